"""`rig dashboard` in a real browser (headless Debian chromium through Selenium), on a real
mosquitto, with real virtual-bench runs publishing (`rig measure asc`, `rig sweep`, `rig serve`
as subprocesses). One broker, two dashboards (read-only and operator) and one browser serve the
whole module; the tests run in file order (the last one restarts the broker)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess

import pytest

from rig.traces.analysis.uncertainty import with_uncertainty
from tests.dashboard.conftest import TESTER, TOKEN, Dashboard, env_with, shot
from tests.deadline import wait_until
from tests.e2e.runs import RIG, TRUTH, bench_variant, only_run
from tests.mqtt.broker import USERS

pytestmark = pytest.mark.slow
pytest.importorskip("selenium")
pytest.importorskip("starlette")

SMALL = {  # a short ASC run: 2 timed runs of 3 s, 2 samples per class
    "runs": ("runs = 5", "runs = 2"),
    "min_run": ("min_run_s = 10.0", "min_run_s = 3.0"),
    "samples": ("samples_per_class = 10", "samples_per_class = 2"),
}
#: Records every state each rig card goes through (window.__states[rig]), from DOM mutations.
RECORD_STATES = """
window.__states = {};
const push = (rig, s) => { const h = (window.__states[rig] = window.__states[rig] || []);
                           if (s && h[h.length - 1] !== s) h.push(s); };
const scan = () => document.querySelectorAll('.rig-card')
                     .forEach((n) => push(n.dataset.rig, n.dataset.state));
new MutationObserver((records) => {
  for (const r of records) {
    if (r.type === 'attributes' && r.oldValue !== null) push(r.target.dataset.rig, r.oldValue);
  }
  scan();
}).observe(document.getElementById('rigs'), {subtree: true, childList: true, attributes: true,
                                             attributeFilter: ['data-state'],
                                             attributeOldValue: true});
scan();
"""
#: The card of rig arguments[0] as plain data (None if there is none).
CARD = """
const n = [...document.querySelectorAll('.rig-card')].find((c) => c.dataset.rig === arguments[0]);
if (!n) return null;
const q = (s) => n.querySelector(s);
return {state: n.dataset.state, name: q('.rig-name').textContent,
        stateText: q('.state').textContent, since: q('.since').textContent,
        what: q('.what').textContent, progress: q('.progress-text').textContent,
        barHidden: q('.bar').hidden, fill: q('.fill').style.width,
        run: q('.run').textContent, runHref: q('.run a') ? q('.run a').getAttribute('href') : null,
        sparkPoints: q('.spark polyline') ? q('.spark polyline').getAttribute('points') : null,
        power: q('.power').textContent, last: q('.last').textContent,
        error: q('.error').textContent, classes: n.className,
        background: getComputedStyle(n).backgroundColor,
        controls: n.querySelectorAll('button, input, select').length};
"""


def card(browser, rig: str) -> dict | None:
    return browser.execute_script(CARD, rig)


def states(browser, rig: str) -> list[str]:
    return browser.execute_script("return (window.__states || {})[arguments[0]] || []", rig)


def open_page(browser, url: str) -> None:
    """Load a page and wait for its first message (the current state)."""
    browser.get(url)
    wait_until(lambda: browser.execute_script("return document.body.dataset.updates"),
               f"the first update on {url}", timeout_s=20)


def in_order(wanted: list[str], seen: list[str]) -> bool:
    it = iter(seen)
    return all(any(s == w for s in it) for w in wanted)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


def publish_as_tester(broker, messages: list[tuple[str, bytes, bool]]) -> None:
    """Publish hostile and broken messages as the test-only `tester` user."""
    import aiomqtt

    async def main() -> None:
        async with aiomqtt.Client("127.0.0.1", broker.port, username=TESTER[0],
                                  password=TESTER[1], identifier="tester") as c:
            for topic, payload, retain in messages:
                await c.publish(topic, payload, qos=1, retain=retain)

    asyncio.run(main())


def test_fleet_follows_a_measurement_and_its_run_page_has_the_figures(broker, dashboards,
                                                                      browser, tmp_path):
    d = dashboards["viewer"]
    open_page(browser, d.url + "/")
    assert browser.execute_script("return document.getElementById('mode').textContent") == \
        "read-only"
    browser.execute_script(RECORD_STATES)
    bench = bench_variant(tmp_path, **SMALL)
    runs = tmp_path / "runs"
    proc = subprocess.Popen([*RIG, "measure", "asc", "--bench", str(bench), "--runs-dir",
                             str(runs), "--json", "--mqtt", broker.url("rig-a"),
                             "--mqtt-power-rate", "10"],
                            env=env_with(RIG_MQTT_PASSWORD=USERS["rig-a"]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        # while it measures: running, a phase, a progress bar, a live power sparkline
        wait_until(lambda: (c := card(browser, "rig-a")) is not None and c["state"] == "running"
                   and c["sparkPoints"] and len(c["sparkPoints"].split()) >= 3,
                   "rig-a running with a power sparkline", timeout_s=60)
        running = card(browser, "rig-a")
        assert running["stateText"] == "running (simulated)"
        assert running["what"].startswith("asc")
        assert running["runHref"].startswith("/run/rig-a/")
        assert running["power"].endswith("W")
        shot(browser, "fleet-running")
        _out, err = proc.communicate(timeout=120)
    finally:
        stop(proc)
    assert proc.returncode == 0, err
    wait_until(lambda: states(browser, "rig-a")[-1:] == ["offline"], "rig-a offline at the end")
    seen = states(browser, "rig-a")
    assert in_order(["idle", "running", "idle", "offline"], seen), seen
    done = card(browser, "rig-a")
    run = only_run(runs)
    shown = json.loads(subprocess.run([*RIG, "show", "--json", str(run)], capture_output=True,
                                      text=True, timeout=60, check=True).stdout)
    run_id = json.loads((run / "events.jsonl").read_text().splitlines()[0])["run_id"]
    assert done["runHref"] == f"/run/rig-a/{run_id}" and "complete" in done["run"]
    assert "offline" in done["classes"]

    # the run page: the same figures as `rig show --json`, the checks, the trace, the log
    open_page(browser, d.url + done["runHref"])
    wait_until(lambda: browser.execute_script(
        "return !document.getElementById('result-section').hidden"), "the run's result")
    figures = dict(browser.execute_script(
        "return [...document.querySelectorAll('#figures tr')].map("
        "(tr) => [tr.dataset.key, tr.querySelector('td').textContent])"))
    summary = shown["summary"]
    scalars = {k: v for k, v in summary.items() if not isinstance(v, list | dict)}
    assert set(figures) == set(scalars)
    for key, value in scalars.items():
        if isinstance(value, bool):
            assert figures[key] == str(value).lower(), key
        elif isinstance(value, int | float):
            assert float(figures[key]) == value, key
        else:
            assert figures[key] == str(value), key
    assert float(figures["inferences_per_s"]) == pytest.approx(TRUTH["inferences_per_s"], rel=1e-3)
    assert float(figures["idle_power_w"]) == pytest.approx(TRUTH["idle_power_w"], rel=1e-3)
    # beside each figure with a budget: figure ± U (k) as every view reads it
    shown_u = dict(browser.execute_script(
        "return [...document.querySelectorAll('#figures tr')].map("
        "(tr) => [tr.dataset.key, tr.querySelector('td.uncertainty').textContent])"))
    for key, budget in summary["uncertainty"].items():
        unit = "/s" if budget["unit"] == "1/s" else budget["unit"]
        assert shown_u[key] == with_uncertainty(summary[key], unit, budget), key
    assert shown_u["energy_per_inference_j"].endswith("(k=2, incomplete)")
    assert shown_u["accuracy"] == ""
    checks = browser.execute_script(
        "return [...document.querySelectorAll('#checks li')].map("
        "(li) => [li.querySelector('strong').textContent, li.classList.contains('ok')])")
    assert checks == [[c["name"], c["ok"]] for c in summary["checks"]]
    assert browser.execute_script(
        "return document.getElementById('result-status').textContent") == "complete"
    on_disk = (run / "events.jsonl").read_text().splitlines()
    logged = browser.execute_script(
        "return [...document.querySelectorAll('#log tr')].map("
        "(tr) => tr.querySelector('.kind').textContent)")
    assert logged == [json.loads(line)["event"] for line in on_disk]
    trace = browser.execute_script(
        "const p = document.querySelector('#trace polyline');"
        "return p ? p.getAttribute('points').split(' ').length : 0")
    assert trace >= 3
    shot(browser, "run-finished")


SWEEP = ('[sweep]\nsuts = ["cpu-sa"]\nnodes = [10, 25]\ndensities = [0.1, 0.2]\n'
         'seeds = [0, 1]\ntimeouts = [0.1, 1.0]\n')


def test_sweep_grid_fills_a_killed_rig_turns_offline_and_resume_completes_it(
        broker, dashboards, browser, tmp_path):
    d = dashboards["viewer"]
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(SWEEP)
    runs = tmp_path / "runs"
    open_page(browser, d.url + "/")
    browser.execute_script(RECORD_STATES)
    # the stand-in point function hangs at point 5 of 16: the sweep is running with 5 done
    env = env_with(RIG_MQTT_PASSWORD=USERS["rig-b"], RIG_SWEEP_STAND_IN_HANG_AT="5")
    proc = subprocess.Popen([*RIG, "sweep", "qubo", str(sweep), "--stand-in", "--runs-dir",
                             str(runs), "--json", "--mqtt", broker.url("rig-b")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_until(lambda: (c := card(browser, "rig-b")) is not None
                   and c["state"] == "running" and c["progress"].startswith("5 / 16"),
                   "rig-b running its sweep, 5 of 16 points done", timeout_s=60)
        assert float(card(browser, "rig-b")["fill"].rstrip("%")) == pytest.approx(
            100 * 5 / 16, abs=0.06)  # the bar width is rounded to 0.1%
        href = card(browser, "rig-b")["runHref"]
        os.kill(proc.pid, signal.SIGKILL)  # the rig dies: the broker sends its will
        proc.wait(10)
        wait_until(lambda: card(browser, "rig-b")["state"] == "offline", "rig-b offline",
                   timeout_s=10)
    finally:
        stop(proc)
    dead = card(browser, "rig-b")
    assert "state-offline" in dead["classes"] and "since" in dead["since"]
    assert dead["background"] == "rgb(229, 231, 235)"  # grey
    assert in_order(["running", "offline"], states(browser, "rig-b"))
    shot(browser, "fleet-offline")

    open_page(browser, d.url + href)
    cells = "return [...document.querySelectorAll('#grid td.cell')].map((td) => " \
            "[td.dataset.cell, Number(td.dataset.points || 0), td.dataset.gap || null, " \
            "td.style.background !== ''])"
    partial = browser.execute_script(cells)
    assert len(partial) == 8  # 1 SUT x 2 nodes x 2 densities x 2 timeouts, laid out at once
    assert sum(p for _, p, _, _ in partial) == 5
    shot(browser, "sweep-partial")

    # resumed (same run id): the grid fills in, every cell's mean gap in closed form
    run = only_run(runs)
    again = subprocess.run([*RIG, "sweep", "resume", str(run), "--json", "--mqtt",
                            broker.url("rig-b")], env=env_with(RIG_MQTT_PASSWORD=USERS["rig-b"]),
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    wait_until(lambda: sum(p for _, p, _, _ in browser.execute_script(cells)) == 16,
               "all 16 points in the grid")
    full = browser.execute_script(cells)
    for key, points, gap, coloured in full:
        nodes = int(key.split("|")[1])
        target = -(nodes // 3) - 1  # the stand-in: cost = target + seed % 2
        assert points == 2 and coloured
        assert float(gap) == pytest.approx((0 + 1 / abs(target)) / 2), key
    assert browser.execute_script("return document.querySelectorAll('.cell.failed').length") == 0
    shot(browser, "sweep-complete")


@pytest.fixture(scope="module")
def serving_rig(broker, tmp_path_factory):
    """`rig serve` as rig-b, with one bench it may start: the virtual bench, 5 runs of 10 s, at
    speed 5 (10 s of host time in all), so that a stop clicked once the run shows its power
    lands part way; at the shipped speed 50 the five took 1 s, which a loaded host's browser
    (its screenshot, then the click) outlasted once."""
    folder = tmp_path_factory.mktemp("serve")
    benches = folder / "benches"
    benches.mkdir()
    bench_variant(benches, "long", speed=("speed = 50", "speed = 5"))
    proc = subprocess.Popen(
        [*RIG, "serve", "--mqtt", broker.url("rig-b"), "--benches-dir", str(benches),
         "--sweeps-dir", str(benches), "--runs-dir", str(folder / "runs")],
        env=env_with(RIG_MQTT_PASSWORD=USERS["rig-b"]), stdout=subprocess.DEVNULL,
        stderr=(folder / "serve.log").open("wb"), start_new_session=True)
    try:
        yield folder
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)  # as Ctrl-C: a run would stop cleanly
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                stop(proc)


def test_read_only_page_has_no_working_controls(serving_rig, dashboards, browser):
    d = dashboards["viewer"]
    open_page(browser, d.url + "/")
    wait_until(lambda: (c := card(browser, "rig-b")) is not None and c["state"] == "idle",
               "the serving rig-b idle")
    assert card(browser, "rig-b")["controls"] == 0
    assert browser.execute_script("return document.querySelectorAll('button').length") == 0
    answer = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch('/api/command', {method: 'POST', headers: {'content-type': 'application/json'},
                               body: JSON.stringify({rig: 'rig-b', action: 'stop'})})
          .then(async (r) => done([r.status, await r.json()]));
    """)
    assert answer[0] == 403 and "read-only" in answer[1]["reason"]


def test_operator_logs_in_starts_and_stops_a_run_cleanly(serving_rig, dashboards, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    d = dashboards["operator"]
    browser.get(d.url + "/")
    wait_until(lambda: browser.current_url.endswith("/login"), "the login page")
    browser.find_element(By.ID, "token").send_keys("not-the-token")
    browser.find_element(By.ID, "login-button").click()
    wait_until(lambda: browser.find_element(By.ID, "login-error").text == "wrong token",
               "the wrong token refused")
    token = browser.find_element(By.ID, "token")
    token.clear()
    token.send_keys(TOKEN)
    browser.find_element(By.ID, "login-button").click()
    wait_until(lambda: browser.current_url == d.url + "/", "the fleet page after login")
    wait_until(lambda: browser.execute_script("return document.body.dataset.updates"),
               "the fleet's state")
    browser.execute_script(RECORD_STATES)
    wait_until(lambda: (c := card(browser, "rig-b")) is not None and c["state"] == "idle"
               and c["controls"] == 3, "start controls on the idle, serving rig-b")
    for password in USERS.values():  # no broker password ever reaches the browser
        assert password not in browser.page_source
    rig_card = browser.execute_script(
        "return [...document.querySelectorAll('.rig-card')].find("
        "(c) => c.dataset.rig === 'rig-b')")
    Select(rig_card.find_element(By.CSS_SELECTOR, "select.procedure")).select_by_value("asc")
    rig_card.find_element(By.CSS_SELECTOR, "input.file-name").send_keys("long")
    rig_card.find_element(By.CSS_SELECTOR, "button.start").click()
    wait_until(lambda: (c := card(browser, "rig-b"))["state"] == "running"
               and c["sparkPoints"] is not None, "rig-b running after start", timeout_s=60)
    shot(browser, "operator-running")
    rig_card = browser.execute_script(
        "return [...document.querySelectorAll('.rig-card')].find("
        "(c) => c.dataset.rig === 'rig-b')")
    rig_card.find_element(By.CSS_SELECTOR, "button.stop").click()
    wait_until(lambda: card(browser, "rig-b")["state"] == "idle", "rig-b idle after stop",
               timeout_s=60)
    assert "interrupted" in card(browser, "rig-b")["run"]
    assert browser.execute_script("return document.getElementById('toast').textContent") == \
        "stop sent to rig-b"
    run = only_run(serving_rig / "runs")
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    finished = json.loads((run / "events.jsonl").read_text().splitlines()[-1])
    assert finished["event"] == "run_finished" and finished["status"] == "interrupted"
    # stopped part way (the bench asks for 5 latency runs), and the rig serves on
    assert finished["summary"].get("latency_runs", 0) < 5
    assert card(browser, "rig-b")["controls"] == 3
    assert in_order(["idle", "running", "idle"], states(browser, "rig-b"))


def test_markup_from_the_broker_is_shown_as_text_and_bad_messages_are_counted(
        broker, dashboards, browser):
    d = dashboards["viewer"]
    open_page(browser, d.url + "/")
    name = '<img src=x onerror="window.__pwned=1">'
    error = "<script>window.__pwned=2</script>"
    note = '<img src=y onerror="window.__pwned=3"><b>bold</b>'
    # a topic level cannot hold "/", so no closing tag in a rig name; an opening one can
    script_rig = "<script>window.__pwned=4;"
    publish_as_tester(broker, [
        (f"neurobench/{script_rig}/status", json.dumps({"state": "idle"}).encode(), False),
        (f"neurobench/{name}/status", json.dumps({"state": "error", "error": error}).encode(),
         False),
        (f"neurobench/{name}/run/r1/note", json.dumps({"event": "note", "text": note}).encode(),
         False),
        ("neurobench/rig-x/status", b"{not json", False),
        ("neurobench/rig-x/status", b'{"x": "' + b"y" * 300_000 + b'"}', False),
        ("neurobench/rig-x/whatever", b"{}", False),
    ])
    wait_until(lambda: (c := card(browser, name)) is not None and c["last"].endswith(note),
               "the hostile rig's card")
    c = card(browser, name)
    assert c["name"] == name and c["error"] == error and c["state"] == "error"
    assert card(browser, script_rig)["name"] == script_rig
    assert browser.execute_script("return document.querySelectorAll('img, b').length") == 0
    assert browser.execute_script("return document.scripts.length") == 2  # ours only
    assert browser.execute_script("return window.__pwned === undefined")
    wait_until(lambda: browser.execute_script(
        "return document.getElementById('dropped').dataset.total") == "3",
        "3 bad messages counted")
    assert card(browser, "rig-x") is None  # nothing of the bad messages is shown
    # the run page of the hostile rig: its name and the note as text too
    open_page(browser, d.url + f"/run/{name.replace('<', '%3C').replace('>', '%3E')}/r1")
    assert browser.execute_script("return document.getElementById('rig-name').textContent") \
        == name
    assert browser.execute_script(
        "return document.querySelector('#log .text').textContent") == note
    assert browser.execute_script("return document.querySelectorAll('img, b').length") == 0
    assert browser.execute_script("return window.__pwned === undefined")
    shot(browser, "hostile-names")


def test_failed_sweep_points_are_marked_in_the_grid(broker, dashboards, browser):
    """The stand-in sweep never fails a point: a SYNTHETIC sweep (published by the test-only
    tester user, as a rig would) with one failed point of two in a cell."""
    d = dashboards["viewer"]
    sweep = {"suts": ["cpu-sa"], "nodes": [10], "densities": [0.1], "timeouts": [0.1, 1.0],
             "seeds": [0, 1]}
    base = "neurobench/synthetic/run/f1/"
    points = [(0, 0.1, 0, "ok", {"gap": 0.25}), (1, 0.1, 1, "failed", {}),
              (2, 1.0, 0, "ok", {"gap": 0.0})]
    publish_as_tester(broker, [
        (base + "run_started", json.dumps({"event": "run_started", "run_id": "f1",
                                           "procedure": "qubo-sweep",
                                           "manifest": {"sweep": sweep}}).encode(), False),
        *((base + "sweep_point", json.dumps({
            "event": "sweep_point", "index": i, "sut": "cpu-sa", "nodes": 10, "density": 0.1,
            "timeout_s": t, "seed": seed, "status": status, "result": result,
            "error": "solver crashed" if status == "failed" else None}).encode(), False)
          for i, t, seed, status, result in points)])
    open_page(browser, d.url + "/run/synthetic/f1")
    cells = "return [...document.querySelectorAll('#grid td.cell')].map((td) => " \
            "[td.dataset.points, td.dataset.failed, td.classList.contains('failed'), " \
            "td.textContent])"
    wait_until(lambda: [c[0] for c in browser.execute_script(cells)] == ["2", "1"],
               "the synthetic grid")
    (_, f1, marked1, text1), (_, f2, marked2, _) = browser.execute_script(cells)
    assert (f1, marked1, f2, marked2) == ("1", True, "0", False)
    assert text1 == "0.250 2/2 ✗1"


def test_broker_outage_shows_a_banner_and_the_page_comes_back(serving_rig, broker, dashboards,
                                                              browser):
    d = dashboards["viewer"]
    open_page(browser, d.url + "/")
    banner = "return document.getElementById('banner').hidden ? '' : " \
             "document.getElementById('banner').textContent"
    assert browser.execute_script(banner) == ""
    broker.stop()
    try:
        wait_until(lambda: "broker unreachable" in browser.execute_script(banner),
                   "the broker banner", timeout_s=20)
        # the rigs as last seen stay on the page (mosquitto sends its clients' wills as it
        # shuts down: rig-b may be shown offline, as the broker last said)
        assert card(browser, "rig-b")["state"] in ("idle", "offline")
        assert card(browser, "rig-a") is not None
        shot(browser, "broker-down")
        # a browser that (re)connects now still gets the state at once, with the banner
        open_page(browser, d.url + "/")
        assert card(browser, "rig-b") is not None
        assert "broker unreachable" in browser.execute_script(banner)
    finally:
        with contextlib.suppress(RuntimeError):
            if broker.proc is None:
                broker.start()
    wait_until(lambda: browser.execute_script(banner) == "", "the banner gone", timeout_s=30)
    # the serving rig reconnected and said so again
    wait_until(lambda: card(browser, "rig-b")["state"] == "idle", "rig-b back")


def test_a_restarted_dashboard_gives_the_open_page_the_state_again(serving_rig, broker,
                                                                    dashboards, browser,
                                                                    tmp_path):
    """The page stays open while its server restarts on the same port: the browser reconnects
    by itself and the new server, which knows only the broker's retained statuses, fills it."""
    d = dashboards["viewer"]
    open_page(browser, d.url + "/")
    browser.execute_script("document.body.dataset.updates = '0'")
    port = d.port
    d.stop()
    wait_until(lambda: "lost the dashboard server" in browser.execute_script(
        "return document.getElementById('banner').textContent"), "the server-lost banner")
    again = Dashboard(broker, tmp_path, port=port)
    try:
        wait_until(lambda: browser.execute_script("return document.body.dataset.updates")
                   != "0", "the page reconnected", timeout_s=30)
        assert browser.execute_script("return document.getElementById('banner').hidden")
        # the retained status of the serving rig is back at once; the other rigs' were
        # lost with the broker's restart (it keeps no retained messages on disk here)
        assert card(browser, "rig-b")["state"] == "idle"
    finally:
        again.stop()
