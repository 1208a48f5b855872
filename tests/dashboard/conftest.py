"""For the browser tests: one real mosquitto (the docs' ACL, plus a `tester` user that may write
anything under neurobench/, to inject bad and hostile messages), `rig dashboard` processes on
free 127.0.0.1 ports, and one headless Debian chromium driven by Selenium; all module-scoped
and stopped by pid."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deadline import wait_until
from tests.e2e.runs import REPO, RIG
from tests.mqtt.broker import USERS, Broker, free_port, mosquitto_binary

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
#: Where the screenshots go (build/ is not committed; the README's copy is docs/images/).
SHOTS = REPO / "build" / "dashboard-screenshots"
TESTER = ("tester", "tester-secret-5772")
TOKEN = "dashboard-token-for-the-tests-0123456789"


def env_with(**passwords: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(passwords)
    return env


class Dashboard:
    """One `rig dashboard` process; `url` is where it serves."""

    def __init__(self, broker: Broker, folder: Path, *extra: str, port: int | None = None
                 ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / f"dashboard-{self.port}.log"
        env = env_with(RIG_MQTT_PASSWORD=USERS["viewer"],
                       RIG_MQTT_OPERATOR_PASSWORD=USERS["operator"])
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*RIG, "dashboard", "--mqtt", broker.url("viewer"), "--port", str(self.port),
                 *extra], env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

        def listening() -> bool:
            assert self.proc.poll() is None, self.log.read_text()
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.2):
                return True
            return False

        try:
            wait_until(listening, "the dashboard serving", timeout_s=30)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[Broker]:
    if mosquitto_binary() is None:
        pytest.fail("mosquitto is not installed: `make system-deps` installs it")
    b = Broker(tmp_path_factory.mktemp("broker"))
    subprocess.run(["mosquitto_passwd", "-b", str(b.folder / "passwd"), *TESTER], check=True,
                   capture_output=True, timeout=20)
    with (b.folder / "acl").open("a") as acl:
        acl.write(f"\nuser {TESTER[0]}\ntopic write neurobench/#\ntopic read neurobench/#\n")
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def dashboards(broker, tmp_path_factory) -> Iterator[dict[str, Dashboard]]:
    """A read-only dashboard (no login) and an operator one (token login)."""
    folder = tmp_path_factory.mktemp("dashboards")
    token = folder / "token"
    token.write_text(TOKEN + "\n")
    started: dict[str, Dashboard] = {}
    try:
        started["viewer"] = Dashboard(broker, folder)
        started["operator"] = Dashboard(broker, folder, "--operator", broker.url("operator"),
                                        "--token-file", str(token))
        yield started
    finally:
        for d in started.values():
            d.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not shutil.which(path):
            pytest.fail(f"{path} is missing: `make system-deps` installs chromium and "
                        "chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", "--disable-extensions"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver, name: str) -> Path:
    """Save a screenshot of the page as build/dashboard-screenshots/NAME.png."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
