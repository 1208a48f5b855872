"""The dashboard's state fold (rig/dashboard/fleet.py) and its page fan-out (hub.py), without a
broker or a browser: JSON messages in, cards, run views and updates out."""

from __future__ import annotations

import asyncio
import json

import pytest

from rig.dashboard.fleet import EVENTS_PER_RUN, MAX_TEXT, POWER_PER_RUN, SPARKLINE, Fleet, RunView
from rig.dashboard.hub import PAGE_QUEUE, Hub
from rig.mqtt.board import MAX_MESSAGE_BYTES


def msg(data: object) -> bytes:
    return json.dumps(data).encode()


def status(fleet: Fleet, rig: str, now: float, retained: bool = False, **fields):
    return fleet.take(f"neurobench/{rig}/status", msg({"rig": rig, **fields}),
                      retained=retained, now=now)


def test_status_states_since_and_remaining_time():
    f = Fleet()
    status(f, "rig-a", 1000.0, retained=True, state="idle", at=900.0)
    # a retained status: its own time is the best known "since"
    assert f.card("rig-a")["state"] == "idle" and f.card("rig-a")["since"] == 900.0
    status(f, "rig-a", 1001.0, state="running", procedure="asc", run_id="r1", at=1001.0,
           phase="latency", progress={"done": 0, "total": 10}, simulated=True)
    card = f.card("rig-a")
    assert (card["state"], card["since"], card["procedure"], card["phase"]) == (
        "running", 1001.0, "asc", "latency")
    assert card["remaining_s"] is None and card["simulated"] is True
    # 2 of 10 steps in 10 s: 8 more take 40 s
    status(f, "rig-a", 1011.0, state="running", procedure="asc", run_id="r1", at=1011.0,
           phase="latency", progress={"done": 2, "total": 10})
    card = f.card("rig-a")
    assert card["remaining_s"] == pytest.approx(40.0)
    assert (card["done"], card["total"], card["since"]) == (2, 10, 1001.0)
    # a new phase starts its own clock
    status(f, "rig-a", 1020.0, state="running", run_id="r1", at=1020.0, phase="energy",
           progress={"done": 1, "total": 4})
    assert f.card("rig-a")["remaining_s"] is None
    status(f, "rig-a", 1030.0, state="running", run_id="r1", at=1030.0, phase="energy",
           progress={"done": 2, "total": 4})
    assert f.card("rig-a")["remaining_s"] == pytest.approx(20.0)
    # the will: it carries the time the rig connected; the state is offline since it came
    status(f, "rig-a", 1050.0, state="offline", at=800.0)
    card = f.card("rig-a")
    assert (card["state"], card["since"], card["remaining_s"], card["power"]) == (
        "offline", 1050.0, None, [])


def test_power_feeds_the_sparkline_and_the_run_trace():
    f = Fleet()
    status(f, "rig-a", 1.0, state="running", run_id="r1")
    for i in range(SPARKLINE + 5):
        ups = f.take("neurobench/rig-a/run/r1/power",
                     msg({"t_s": i * 0.5, "interval_s": 0.5, "mean_w": 1e-3 * i,
                          "min_w": 0.0, "max_w": 1.0, "at": 10.0 + i}), now=2.0)
        assert [u["type"] for u in ups] == ["rig", "power"]
    card = f.card("rig-a")
    assert card["power"] == pytest.approx([1e-3 * i for i in range(5, SPARKLINE + 5)])
    assert card["power_w"] == pytest.approx(1e-3 * (SPARKLINE + 4))
    assert card["power_at"] == 10.0 + SPARKLINE + 4
    trace = f.run_snapshot("rig-a", "r1")["power"]
    assert len(trace) == SPARKLINE + 5 and trace[3] == [1.5, 3e-3, 0.0, 1.0]
    # another run starts its sparkline afresh
    status(f, "rig-a", 3.0, state="running", run_id="r2")
    f.take("neurobench/rig-a/run/r2/power", msg({"t_s": 0, "mean_w": 5.0}), now=3.0)
    assert f.card("rig-a")["power"] == [5.0]


ASC_SUMMARY = {"inferences_per_s": 80.0, "accuracy": 0.625, "energy_per_inference_j": 4.5e-05,
               "latency_timer": "emon", "simulated": True, "rows": [1, 2],
               "checks": [{"name": "latency replicable", "ok": True, "detail": "max 0.000%"},
                          {"name": "no lost samples", "ok": False, "detail": "3 dropped"}]}


def test_run_events_log_and_finished_figures():
    f = Fleet()
    ups = f.take("neurobench/rig-a/run/r1/run_started",
                 msg({"event": "run_started", "at": 5.0, "run_id": "r1", "procedure": "asc",
                      "device": "sim", "manifest": {}}), now=6.0)
    assert [u["type"] for u in ups] == ["rig", "event"]
    assert ups[1]["row"] == {"n": 0, "at": 5.0, "kind": "run_started", "text": "asc on sim"}
    f.take("neurobench/rig-a/run/r1/note",
           msg({"event": "note", "at": 6.0, "text": "x" * 1000}), now=6.0)
    assert len(f.card("rig-a")["last_text"]) == MAX_TEXT
    ups = f.take("neurobench/rig-a/run/r1/run_finished",
                 msg({"event": "run_finished", "at": 9.0, "status": "complete",
                      "summary": ASC_SUMMARY, "error": None}), now=9.0)
    finished = next(u for u in ups if u["type"] == "finished")["result"]
    # the summary's scalars, exactly (what `rig show --json` prints), and its checks
    assert finished["figures"] == {"inferences_per_s": 80.0, "accuracy": 0.625,
                                   "energy_per_inference_j": 4.5e-05, "latency_timer": "emon",
                                   "simulated": True}
    assert finished["checks"] == [
        {"name": "latency replicable", "ok": True, "detail": "max 0.000%"},
        {"name": "no lost samples", "ok": False, "detail": "3 dropped"}]
    run = f.run_snapshot("rig-a", "r1")
    assert [e["kind"] for e in run["events"]] == ["run_started", "note", "run_finished"]
    assert run["result"] == finished
    # the log is bounded, its count is not
    for i in range(EVENTS_PER_RUN + 10):
        f.take("neurobench/rig-a/run/r1/note", msg({"text": str(i)}), now=10.0)
    run = f.run_snapshot("rig-a", "r1")
    assert len(run["events"]) == EVENTS_PER_RUN and run["events_seen"] == EVENTS_PER_RUN + 13


def point(i: int, nodes: int, seed: int, gap: float | None, status: str = "ok") -> bytes:
    return msg({"event": "sweep_point", "index": i, "sut": "cpu-sa", "nodes": nodes,
                "density": 0.1, "timeout_s": 0.1, "seed": seed, "status": status,
                "result": {} if gap is None else {"gap": gap},
                "error": None if gap is not None else "solver crashed"})


def test_sweep_grid_cells_average_their_seeds_and_mark_failures():
    f = Fleet()
    sweep = {"suts": ["cpu-sa"], "nodes": [10, 25], "densities": [0.1], "timeouts": [0.1],
             "seeds": [0, 1]}
    ups = f.take("neurobench/rig-a/run/s1/run_started",
                 msg({"procedure": "qubo-sweep", "manifest": {"sweep": sweep}}), now=1.0)
    grid = next(u for u in ups if u["type"] == "grid")["grid"]
    assert grid == {"suts": ["cpu-sa"], "nodes": [10, 25], "densities": [0.1],
                    "timeouts": [0.1], "seeds": 2}
    cells = []
    for i, (nodes, seed, gap) in enumerate([(10, 0, 0.0), (10, 1, 0.25), (25, 0, None),
                                            (25, 1, 0.1)]):
        ups = f.take("neurobench/rig-a/run/s1/sweep_point",
                     point(i, nodes, seed, gap, "ok" if gap is not None else "failed"), now=2.0)
        cells += [u["cell"] for u in ups if u["type"] == "cell"]
    assert len(cells) == 4
    by_nodes = {c["nodes"]: c for c in f.run_snapshot("rig-a", "s1")["cells"]}
    assert by_nodes[10]["gap_mean"] == pytest.approx(0.125) and by_nodes[10]["failed"] == 0
    assert by_nodes[25]["gap_mean"] == pytest.approx(0.1) and by_nodes[25]["failed"] == 1
    assert by_nodes[25]["points"] == 2
    assert "sut=" not in f.card("rig-a")["last_text"]
    assert f.card("rig-a")["last_text"] == "cpu-sa n=25 d=0.1 t=0.1 s=1: ok, gap 0.1"


@pytest.mark.parametrize(("topic", "payload", "why"), [
    ("neurobench/rig-a/status", b"{not json", "malformed"),
    ("neurobench/rig-a/status", b"\xff\xfe", "malformed"),
    ("neurobench/rig-a/status", b"[1, 2]", "malformed"),
    ("neurobench/rig-a/status", b"[" * 100000 + b"]" * 100000, "malformed"),
    ("neurobench/rig-a/status", b'{"a": "' + b"x" * MAX_MESSAGE_BYTES + b'"}', "oversized"),
    ("neurobench/rig-a/run/r1/note", b'{"text": "' + b"x" * MAX_MESSAGE_BYTES + b'"}',
     "oversized"),
    ("neurobench/rig-a/whatever", b"{}", "unknown topic"),
    ("neurobench/rig-a/run/r1", b"{}", "unknown topic"),
    ("elsewhere/rig-a/status", b"{}", "unknown topic"),
    ("neurobench/" + "r" * 200 + "/status", b"{}", "unknown topic"),
])
def test_bad_input_is_dropped_and_counted(topic, payload, why):
    f = Fleet()
    assert f.take(topic, payload, now=1.0) == []
    assert f.dropped == {why: 1}
    assert f.snapshot()["rigs"] == []


def test_the_command_channel_is_neither_shown_nor_counted():
    f = Fleet()
    assert f.subscriptions() == ["neurobench/#"]
    for topic in ("neurobench/rig-a/cmd", "neurobench/rig-a/cmd/reply"):
        assert f.take(topic, b'{"action": "stop"}', now=1.0) == []
    assert f.dropped == {} and f.snapshot()["rigs"] == []


def test_the_ledger_head_is_neither_shown_nor_counted():
    """A rig's retained ledger head (neurobench/<rig>/ledger) is ours: not a bad message."""
    f = Fleet()
    head = b'{"seq": 3, "digest": "' + b"a" * 64 + b'", "run": "r"}'
    assert f.take("neurobench/rig-a/ledger", head, retained=True, now=1.0) == []
    assert f.dropped == {} and f.snapshot()["rigs"] == []
    f.take("neurobench/rig-a/ledgers", b"{}", now=1.0)  # not the ledger: still unknown
    assert f.dropped == {"unknown topic": 1}


def test_a_rig_name_with_markup_is_kept_as_data():
    """Escaping is the page's job (it sets text, never markup); the fold keeps the name as is
    so the page can show it as text."""
    f = Fleet()
    name = "<img src=x onerror=alert(1)>"
    status(f, name, 1.0, state="idle", error="<script>alert(2)</script>")
    card = f.snapshot()["rigs"][0]
    assert card["rig"] == name and card["error"] == "<script>alert(2)</script>"


def test_hub_gives_each_page_its_updates_and_drops_a_page_that_cannot_keep_up():
    async def main() -> None:
        hub = Hub(clock=lambda: 7.0)
        fleet_page, run_page, other_run = hub.attach(), hub.attach(("rig-a", "r1")), \
            hub.attach(("rig-a", "r2"))
        hub.take("neurobench/rig-a/run/r1/note", msg({"text": "hello"}))
        assert [u["type"] for u in fleet_page.queue.get_nowait()] == ["rig"]
        assert [u["type"] for u in run_page.queue.get_nowait()] == ["rig", "event"]
        assert [u["type"] for u in other_run.queue.get_nowait()] == ["rig"]
        hub.take("neurobench/rig-a/bogus", b"{}")
        assert fleet_page.queue.get_nowait() == [{"type": "dropped",
                                                  "dropped": {"unknown topic": 1}}]
        snap = hub.snapshot(("rig-a", "r1"))
        assert snap["run"]["events"][0]["text"] == "hello" and snap["rigs"][0]["rig"] == "rig-a"
        hub.set_broker(False, "gone")
        assert fleet_page.queue.get_nowait() == [{"type": "broker", "broker": {
            "connected": False, "since": 7.0, "reason": "gone"}}]
        for _ in range(PAGE_QUEUE + 1):
            hub.take("neurobench/rig-a/status", msg({"state": "idle"}))
        assert fleet_page not in hub.pages  # closed: the browser reconnects and starts afresh
        items = [fleet_page.queue.get_nowait() for _ in range(fleet_page.queue.qsize())]
        assert items[-1] is None

    asyncio.run(main())


def test_a_page_message_carries_a_rigs_card_once_per_state():
    from rig.dashboard.server import latest_cards

    a1, b1, a2, a3, a4 = ({"type": "rig", "rig": {"rig": r, "state": s, "n": n}}
                          for r, s, n in (("a", "running", 1), ("b", "idle", 1),
                                          ("a", "running", 2), ("a", "idle", 3),
                                          ("a", "offline", 4)))
    event = {"type": "event", "rig": "a", "run_id": "r", "row": {}}
    # a1 is superseded by a2 (same state); every change of state stays, in order
    assert latest_cards([a1, event, b1, a2, a3, a4]) == [event, b1, a2, a3, a4]


def test_a_long_run_trace_thins_out_and_still_spans_the_whole_run():
    run = RunView("rig-a", "r1")
    n = 5 * POWER_PER_RUN + 123
    for i in range(n):
        run.add_power((float(i), 1.0, 1.0, 1.0))
    times = [p[0] for p in run.power]
    assert len(times) < POWER_PER_RUN and times[0] == 0.0
    # evenly spaced by the stride, up to the last summary that fell on it
    stride = run.power_stride
    assert stride == 8
    assert times == [float(i) for i in range(0, n, stride)]


def test_finished_figures_carry_u_k_and_completeness():
    """A RunFinished summary's GUM budgets reach the run page compactly: U, k, complete, the
    number of unknown terms and the figure as the rig reads it everywhere."""
    budget = {"figure": "energy per inference", "value": 4.5e-05, "unit": "J", "U": 1.04e-06,
              "k": 2.0, "complete": False, "components": [{"name": "x"}] * 6,
              "unknown": ["energy per inference: supply voltage",
                          "energy per inference: lpm01a sample clock"]}
    rate = {"figure": "inferences per second", "value": 80.0, "unit": "1/s", "U": 0.4,
            "k": 2.78, "complete": True, "unknown": []}
    summary = {**ASC_SUMMARY, "uncertainty": {"energy_per_inference_j": budget,
                                              "inferences_per_s": rate,
                                              "idle_power_w": {"U": "?"}}}
    f = Fleet()
    ups = f.take("neurobench/rig-a/run/r1/run_finished",
                 msg({"event": "run_finished", "at": 9.0, "status": "complete",
                      "summary": summary, "error": None}), now=9.0)
    result = next(u for u in ups if u["type"] == "finished")["result"]
    assert "uncertainty" not in result["figures"]  # a table, not a figure
    assert result["uncertainty"] == {
        "energy_per_inference_j": {"U": 1.04e-06, "k": 2.0, "complete": False, "unknown": 2,
                                   "text": "45.00 µJ ± ≥1.0 µJ (k=2, incomplete)"},
        "inferences_per_s": {"U": 0.4, "k": 2.78, "complete": True, "unknown": 0,
                             "text": "80.00 /s ± 0.40 /s (k=2.78)"}}
