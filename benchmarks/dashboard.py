"""`rig dashboard` under a lab's load: publish-to-page delay, server CPU and memory.

Starts a real mosquitto on 127.0.0.1 (a free port, the docs' ACL plus a benchmark user that may
publish for any rig), one `rig dashboard` process, `--rigs` simulated rigs (one MQTT client
each, in this process: a retained `running` status every second and a power summary at
`--power-hz`, stamped with the time it is published) and `--browsers` headless chromium
pages on the fleet page (Selenium, as the tests). Each page records, for every power summary
that reaches a card, the delay from its publication to the card's DOM change.

Printed (never asserted): p50 / p99 / max publish-to-DOM delay over every page (goal p99
< 500 ms), the dashboard's CPU over the measuring window in % of one core (goal < 20 %), and
its resident memory every 10 s (goal: flat). `--seconds 600` for the 10-minute run.

The browsers and the rigs run on the same machine as the server: on 2 cores the figures include
their contention.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' broker, dashboard process and browser setup

from tests.dashboard.conftest import (  # noqa: E402
    CHROMEDRIVER,
    CHROMIUM,
    TESTER,
    Dashboard,
)
from tests.mqtt.broker import Broker  # noqa: E402

#: Installed in each page: the delay of every power summary that reaches a card [s].
RECORD_DELAYS = """
window.__delays = [];
window.__seen = new Set();  // (rig, publication time): each summary counted once per page
new MutationObserver((records) => {
  const now = Date.now() / 1000;
  const olds = new Map();
  for (const r of records) {
    if (!olds.has(r.target)) olds.set(r.target, []);
    olds.get(r.target).push(r.oldValue);
  }
  for (const [node, values] of olds) {  // each change: the value the next one replaced
    const set = values.slice(1).concat([node.dataset.powerAt]);
    for (const v of set) if (v) window.__delays.push(now - Number(v));
  }
}).observe(document.getElementById('rigs'), {subtree: true, attributes: true,
                                             attributeFilter: ['data-power-at'],
                                             attributeOldValue: true});
"""


class Rigs:
    """`n` simulated rigs publishing status and power through the broker, on a thread."""

    def __init__(self, broker: Broker, n: int, power_hz: float) -> None:
        self.broker, self.n, self.power_hz = broker, n, power_hz
        self.published = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def __enter__(self) -> Rigs:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    async def _rig(self, index: int) -> None:
        import aiomqtt

        from rig.mqtt.connection import NODELAY

        rig, run = f"bench-rig-{index:02d}", f"run{index:02d}"
        async with aiomqtt.Client("127.0.0.1", self.broker.port, username=TESTER[0],
                                  password=TESTER[1], identifier=f"bench-{index}",
                                  socket_options=NODELAY) as c:
            period = 1.0 / self.power_hz
            start = time.monotonic() + index * period / self.n  # spread over the period
            k = 0
            while not self._stop.is_set():
                if k % max(1, round(self.power_hz)) == 0:
                    await c.publish(f"neurobench/{rig}/status", json.dumps({
                        "rig": rig, "state": "running", "procedure": "asc", "run_id": run,
                        "phase": "runs", "progress": {"done": k // 10, "total": 100000},
                        "at": time.time(), "simulated": True}).encode(), qos=1, retain=True)
                await c.publish(f"neurobench/{rig}/run/{run}/power", json.dumps({
                    "t_s": k * period, "interval_s": period, "mean_w": 1e-3 * (2 + (k % 7)),
                    "min_w": 1e-3, "max_w": 9e-3, "samples": 100, "simulated": True,
                    "at": time.time()}).encode(), qos=0)
                self.published += 1
                k += 1
                await asyncio.sleep(max(0.0, start + k * period - time.monotonic()))

    async def _main(self) -> None:
        await asyncio.gather(*(self._rig(i) for i in range(self.n)))


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", "--disable-extensions",
                "--disable-background-timer-throttling", "--disable-renderer-backgrounding"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rigs", type=int, default=20)
    parser.add_argument("--browsers", type=int, default=5)
    parser.add_argument("--power-hz", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="measuring window after a 10 s warm-up (600 for the 10-min run)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        broker = Broker(folder / "broker")
        subprocess.run(["mosquitto_passwd", "-b", str(broker.folder / "passwd"), *TESTER],
                       check=True, capture_output=True, timeout=20)
        with (broker.folder / "acl").open("a") as acl:
            acl.write(f"\nuser {TESTER[0]}\ntopic write neurobench/#\n")
        broker.start()
        dashboard = None
        drivers = []
        try:
            dashboard = Dashboard(broker, folder)
            pid = dashboard.proc.pid
            for _ in range(args.browsers):
                d = browser()
                drivers.append(d)
                d.get(dashboard.url + "/")
            with Rigs(broker, args.rigs, args.power_hz) as rigs:
                time.sleep(10.0)  # warm-up: every rig on every page
                for d in drivers:
                    cards = d.execute_script(
                        "return document.querySelectorAll('.rig-card').length")
                    if cards != args.rigs:
                        print(f"warning: a page shows {cards} of {args.rigs} rigs")
                    d.execute_script(RECORD_DELAYS)
                published0 = rigs.published
                t0, c0 = time.monotonic(), cpu_s(pid)
                memory = [(0.0, rss_mb(pid))]
                while time.monotonic() - t0 < args.seconds:
                    time.sleep(min(10.0, args.seconds - (time.monotonic() - t0)))
                    memory.append((time.monotonic() - t0, rss_mb(pid)))
                wall, cpu = time.monotonic() - t0, cpu_s(pid) - c0
                published = rigs.published - published0
            delays = sorted(x for d in drivers for x in d.execute_script(
                "return window.__delays"))
        finally:
            for d in drivers:
                d.quit()
            if dashboard is not None:
                dashboard.stop()
            broker.stop()

    print(f"rigs {args.rigs} x {args.power_hz:g} Hz power (+ status 1 Hz), "
          f"{args.browsers} browsers, {wall:.0f} s measured")
    print(f"power summaries published: {published} ({published / wall:.0f}/s); "
          f"seen on pages: {len(delays)} (expected ~{published * args.browsers})")
    if delays:
        def pct(q: float) -> float:
            return delays[min(len(delays) - 1, int(q * len(delays)))] * 1e3

        print(f"publish-to-DOM delay: p50 {pct(0.5):.0f} ms, p99 {pct(0.99):.0f} ms, "
              f"max {delays[-1] * 1e3:.0f} ms, mean {statistics.fmean(delays) * 1e3:.0f} ms "
              "(goal p99 < 500 ms)")
    print(f"dashboard CPU: {100 * cpu / wall:.1f} % of one core (goal < 20 %)")
    print("dashboard RSS [MB] every 10 s: " + ", ".join(f"{m:.1f}" for _, m in memory)
          + f" (change {memory[-1][1] - memory[0][1]:+.1f} MB)")


if __name__ == "__main__":
    main()
