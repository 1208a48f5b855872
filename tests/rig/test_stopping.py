"""The Stop button (`StopRequest`): the flag, the waits that honour it (recorder, DUT client),
a sweep stopped between points and resumed, and `measure_asc(stop=)` on the virtual bench
stopped from another thread, also while it is blocked in a wait."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from drivers.dut.client import DutClient
from drivers.emon.base import Chunk
from rig.bench.config import load_bench
from rig.errors import RunInterrupted
from rig.qubo.sweep import SweepPointDone, load_sweep, read_sweep, resume_sweep, start_sweep
from rig.run.events import Event, LatencyRun, PhaseStarted, TraceSaved
from rig.run.recording import EmonRecorder
from rig.run.stopping import StopRequest, StopRequested
from rig.run.store import load_run

REPO = Path(__file__).resolve().parents[2]
#: A deadline for waits that must end early (never reached when the code works).
LONG_S = 20.0


# -- the flag ---------------------------------------------------------------------------------
def test_flag_set_check_and_reason() -> None:
    stop = StopRequest()
    assert not stop.is_set()
    stop.check()  # not set: nothing happens
    assert stop.wait(0) is False
    stop.set("the GUI's Stop button")
    stop.set("a second press")  # the first reason is the one kept
    assert stop.is_set() and stop.reason == "the GUI's Stop button"
    with pytest.raises(StopRequested) as err:
        stop.check()
    assert err.value.args == ("the GUI's Stop button",)
    with pytest.raises(StopRequested):  # stays set: every later safe point stops too
        stop.check()
    assert stop.wait(0) is True


def test_stop_requested_is_a_keyboard_interrupt_not_an_exception() -> None:
    """So `except Exception` in a procedure cannot swallow it and the runner treats it as ^C."""
    assert issubclass(StopRequested, KeyboardInterrupt)
    assert not issubclass(StopRequested, Exception)
    assert StopRequest().reason == ""
    stop = StopRequest()
    stop.set()
    assert stop.reason == "stopped by the user"


def test_set_from_another_thread_wakes_a_waiter() -> None:
    stop = StopRequest()
    setter = threading.Thread(target=stop.set, args=("from a worker",))
    setter.start()
    assert stop.wait(LONG_S) is True  # returns as soon as it is set, not after LONG_S
    setter.join()
    with pytest.raises(StopRequested, match="from a worker"):
        stop.check()


# -- the recorder's waits ---------------------------------------------------------------------
class StopOnFirstCheck:
    """A checkpoint that, the first time the wait calls it, has another thread set `stop`."""

    def __init__(self, stop: StopRequest) -> None:
        self.stop, self.calls, self.thread = stop, 0, None

    def __call__(self) -> None:
        self.calls += 1
        if self.thread is None:
            self.thread = threading.Thread(target=self.stop.set)
            self.thread.start()
        self.stop.check()


def idle_chunk(first: int, n: int) -> Chunk:
    return Chunk(first, np.full(n, 1e-3), np.full(n, 1.8), np.ones(n, dtype=np.uint8))


@pytest.mark.parametrize("which", ["edges", "samples"])
def test_a_stop_ends_a_recorder_wait_instead_of_its_timeout(which: str) -> None:
    stop = StopRequest()
    checkpoint = StopOnFirstCheck(stop)
    rec = EmonRecorder(1000.0, checkpoint=checkpoint)
    rec.on_chunk(idle_chunk(0, 100))  # data flows, but no edge and not enough samples
    with pytest.raises(StopRequested):
        if which == "edges":
            rec.wait_for_edges(1, timeout_s=LONG_S)  # DeviceTimeout only after LONG_S
        else:
            rec.wait_for_samples(10_000, timeout_s=LONG_S)
    checkpoint.thread.join()
    # The wait re-checks at least every 0.1 s: a handful of calls, not LONG_S / 0.1 of them.
    assert 1 <= checkpoint.calls < 100
    # The recorder is still usable (the runner reads its counts after a stop).
    assert rec.samples == 100 and rec.edge_count == 0


def test_a_raising_checkpoint_is_not_called_when_the_wait_is_already_satisfied() -> None:
    def never() -> None:
        raise AssertionError("the checkpoint ran although nothing had to be waited for")

    rec = EmonRecorder(1000.0, checkpoint=never)
    gpio = np.ones(10, dtype=np.uint8)
    gpio[4] = 0
    rec.on_chunk(Chunk(0, np.ones(10), np.ones(10), gpio))
    assert rec.wait_for_edges(1, timeout_s=1.0) == [4]
    rec.wait_for_samples(10, timeout_s=1.0)


def test_a_stop_set_while_chunks_arrive_ends_the_wait() -> None:
    """Chunks keep waking the wait (notify) without satisfying it; the stop still ends it."""
    stop = StopRequest()
    rec = EmonRecorder(1000.0, checkpoint=stop.check)
    fed = threading.Event()

    def driver() -> None:  # a monitor's thread: chunks, then the Stop button, more chunks
        for i in range(50):
            rec.on_chunk(idle_chunk(10 * i, 10))
            if i == 20:
                stop.set()
        fed.set()

    thread = threading.Thread(target=driver)
    thread.start()
    with pytest.raises(StopRequested):
        rec.wait_for_edges(1, timeout_s=LONG_S)
    thread.join()
    assert fed.is_set() and rec.error is None


# -- the DUT client's reply loop --------------------------------------------------------------
class SilentTransport:
    """A DUT port that takes every command and never answers."""

    url = "silent://port"

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.reads = 0

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def read(self) -> bytes:
        self.reads += 1
        threading.Event().wait(0.001)  # like a port with nothing to say
        return b""

    def reset_input(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_stop_ends_a_dut_command_wait() -> None:
    stop = StopRequest()
    transport = SilentTransport()
    client = DutClient(transport)
    checkpoint = StopOnFirstCheck(stop)
    client.checkpoint = checkpoint
    with pytest.raises(StopRequested):
        client.command("name", timeout_s=LONG_S)
    checkpoint.thread.join()
    assert transport.written  # the command went out; its reply was abandoned
    assert checkpoint.calls < 10_000


def test_a_stop_ends_a_boot_wait() -> None:
    stop = StopRequest()
    stop.set()
    client = DutClient(SilentTransport())
    client.checkpoint = stop.check
    with pytest.raises(StopRequested):
        client.wait_for_boot(LONG_S)


# -- a sweep ----------------------------------------------------------------------------------
SWEEP = """
[sweep]
suts = ["cpu-sa", "loihi2"]
nodes = [10, 25]
densities = [0.05]
seeds = [0, 1]
timeouts = [0.01]
"""


class StopAfterPoints:
    """A subscriber: after the n-th SweepPointDone another thread presses Stop (joined, so the
    stop is set before the next point starts: the count is exact)."""

    def __init__(self, stop: StopRequest, n: int) -> None:
        self.stop, self.n, self.seen = stop, n, 0

    def __call__(self, event: Event) -> None:
        if isinstance(event, SweepPointDone):
            self.seen += 1
            if self.seen == self.n:
                press = threading.Thread(target=self.stop.set)
                press.start()
                press.join()


def test_sweep_stops_between_points_and_resumes_to_complete(tmp_path: Path) -> None:
    path = tmp_path / "small.toml"
    path.write_text(SWEEP)
    spec = load_sweep(path)
    keys = [p.key for p in spec.points()]
    assert len(keys) == 8
    stop = StopRequest()
    with pytest.raises(RunInterrupted, match=r"after 1 of 8 points.*rig sweep resume"):
        start_sweep(spec, runs_root=tmp_path / "runs", stand_in=True, stop=stop,
                    subscribers=[StopAfterPoints(stop, 1)])
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    record = read_sweep(run)
    assert record.status == "interrupted" and list(record.done) == keys[:1]
    assert record.manifest["status"] == "interrupted"

    # A stop already set: the resume stops before measuring anything, and loses nothing.
    with pytest.raises(RunInterrupted, match="after 1 of 8"):
        resume_sweep(run, stop=stop)
    assert list(read_sweep(run).done) == keys[:1]

    outcome = resume_sweep(run, stop=StopRequest())
    assert outcome.status == "complete" and outcome.ran == 7
    record = read_sweep(run)
    assert record.status == "complete" and list(record.done) == keys
    kinds = [json.loads(x)["event"] for x in (run / "events.jsonl").read_text().splitlines()]
    assert kinds.count("sweep_point") == 8  # each point once


# -- measure_asc on the virtual bench ---------------------------------------------------------
def fast_sim(tmp_path: Path, **replace: tuple[str, str]) -> Path:
    """benches/sim.toml, quicker (2 runs of 1 s, 1 sample per class, speed 100), plus edits."""
    text = (REPO / "benches" / "sim.toml").read_text()
    edits = {"runs": ("runs = 5", "runs = 2"), "min_run_s": ("min_run_s = 10.0", "min_run_s = 1.0"),
             "samples": ("samples_per_class = 10", "samples_per_class = 1"),
             "speed": ("speed = 50", "speed = 100"), **replace}
    for old, new in edits.values():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "fast.toml"
    path.write_text(text)
    return path


def attached(tmp_path: Path, sim_path: Path, ports: dict[str, str]) -> Path:
    """The same bench pointing at a virtual bench this test started (so it can see the world)."""
    text = sim_path.read_text()
    text = text.replace('kind = "mlperf-tiny"\nport = "virtual"',
                        f'kind = "mlperf-tiny"\nport = "{ports["dut"]}"')
    text = text.replace('driver = "lpm01a"\nport = "virtual"',
                        f'driver = "lpm01a"\nport = "{ports["emon"]}"')
    text = text.replace("[bench]\n", "[bench]\nsimulated = true\n")
    assert '"virtual"' not in text
    path = tmp_path / "attached.toml"
    path.write_text(text)
    return path


def run_attached(
    tmp_path: Path, stop: StopRequest, subscribers: list[Callable[[Event], None]],
    **replace: tuple[str, str],
) -> tuple[BaseException | None, bool, Path]:
    """measure_asc on a virtual bench of our own: (what it raised, DUT powered at the end,
    the run folder)."""
    from rig.run.measure import measure_asc
    from virtual_bench.bench import VirtualBench
    from virtual_bench.description import load_description

    sim_path = fast_sim(tmp_path, **replace)
    raised: BaseException | None = None
    with VirtualBench(load_description(sim_path)) as vb:
        bench = load_bench(attached(tmp_path, sim_path, vb.ports))
        try:
            measure_asc(bench, device="attached", runs_root=tmp_path / "r",
                        subscribers=subscribers, stop=stop)
        except RunInterrupted as exc:
            raised = exc
        powered = vb.world.powered
    runs = [p for p in (tmp_path / "r").iterdir() if p.is_dir()]
    assert len(runs) == 1
    return raised, powered, runs[0]


def kinds_of(run: Path) -> list[str]:
    return [json.loads(x)["event"] for x in (run / "events.jsonl").read_text().splitlines()]


def samples_recorded(run: Path) -> int:
    (saved,) = [e for e in load_run(run).events if isinstance(e, TraceSaved)]
    return saved.samples


@pytest.mark.slow
def test_stop_from_another_thread_after_the_second_run(tmp_path: Path) -> None:
    stop = StopRequest()
    seen: list[int] = []

    def press_on_second_run(event: Event) -> None:
        if isinstance(event, LatencyRun):
            seen.append(event.index)
            if len(seen) == 2:
                press = threading.Thread(target=stop.set, args=("Stop pressed",))
                press.start()
                press.join()

    raised, powered, run = run_attached(tmp_path, stop, [press_on_second_run],
                                        runs=("runs = 5", "runs = 4"))
    assert isinstance(raised, RunInterrupted)
    assert "powered off" in raised.message and raised.exit_code == 130
    assert powered is False
    record = load_run(run)
    assert record.status == "interrupted"
    assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"
    kinds = [r["kind"] for r in record.rows]
    # Stopped at the safe point right after run 1's LatencyRun: its window is not measured.
    assert kinds.count("latency_run") == 2 and kinds.count("window") == 1
    assert kinds.count("idle") == 1 and kinds.count("sample") == 0
    assert record.manifest["summary"]["latency_runs"] == 2
    assert kinds_of(run)[-1] == "run_finished"


@pytest.mark.slow
def test_run_on_a_worker_thread_stopped_from_the_main_thread(tmp_path: Path) -> None:
    """As the runner GUI does it: the run on a worker thread, Stop pressed on the main one."""
    from rig.run.measure import measure_asc
    from virtual_bench.bench import VirtualBench
    from virtual_bench.description import load_description

    stop = StopRequest()
    first_run = threading.Event()
    pressed = threading.Event()
    outcome: dict[str, object] = {}

    def hold_after_first_run(event: Event) -> None:  # on the worker thread
        if isinstance(event, LatencyRun) and not first_run.is_set():
            first_run.set()
            assert pressed.wait(LONG_S)  # the Stop press lands here: a known place

    def worker(bench) -> None:
        try:
            outcome["result"] = measure_asc(bench, device="attached", runs_root=tmp_path / "r",
                                            subscribers=[hold_after_first_run], stop=stop)
        except BaseException as exc:  # handed to the main thread
            outcome["result"] = exc

    sim_path = fast_sim(tmp_path)
    with VirtualBench(load_description(sim_path)) as vb:
        bench = load_bench(attached(tmp_path, sim_path, vb.ports))
        thread = threading.Thread(target=worker, args=(bench,))
        thread.start()
        assert first_run.wait(LONG_S)
        stop.set("Stop pressed in the GUI")
        pressed.set()
        thread.join(LONG_S)
        assert not thread.is_alive()
        powered = vb.world.powered
    assert isinstance(outcome["result"], RunInterrupted), outcome
    assert powered is False
    (run,) = [p for p in (tmp_path / "r").iterdir() if p.is_dir()]
    record = load_run(run)
    assert record.status == "interrupted"
    assert [r["kind"] for r in record.rows] == ["idle", "latency_run"]


@pytest.mark.slow
def test_stop_set_before_the_run_powers_off_and_measures_nothing(tmp_path: Path) -> None:
    stop = StopRequest()
    stop.set()
    raised, powered, run = run_attached(tmp_path, stop, [])
    assert isinstance(raised, RunInterrupted) and powered is False
    record = load_run(run)
    assert record.status == "interrupted" and record.rows == []


class StopWhenBlocked:
    """A subscriber: when `phase` starts, another thread watches the run's thread and presses
    Stop once that thread is inside `function` (of a file ending in `module`), i.e. blocked in
    a wait that would last the whole phase. Polls against a deadline; never a measurement."""

    def __init__(self, stop: StopRequest, phase: str, function: str, module: str) -> None:
        self.stop, self.phase, self.function, self.module = stop, phase, function, module
        self.found: bool | None = None
        self.thread: threading.Thread | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, PhaseStarted) and event.phase == self.phase and self.thread is None:
            self.thread = threading.Thread(target=self._watch, args=(threading.get_ident(),))
            self.thread.start()

    def _inside(self, ident: int) -> bool:
        frame = sys._current_frames().get(ident)
        while frame is not None:
            code = frame.f_code
            if code.co_name == self.function and code.co_filename.endswith(self.module):
                return True
            frame = frame.f_back
        return False

    def _watch(self, ident: int) -> None:
        pause = threading.Event()
        for _ in range(int(LONG_S / 0.002)):
            if self._inside(ident):
                self.found = True
                break
            pause.wait(0.002)
        else:
            self.found = False
        self.stop.set("Stop pressed mid-wait")


@pytest.mark.slow
def test_stop_while_blocked_in_the_recorders_idle_wait(tmp_path: Path) -> None:
    """idle_s = 300 s of stream (3 s of host time at speed 100); the stop ends it at once."""
    stop = StopRequest()
    watch = StopWhenBlocked(stop, "idle", "wait_for_samples", "rig/run/recording.py")
    raised, powered, run = run_attached(tmp_path, stop, [watch],
                                        idle=("idle_s = 2.0", "idle_s = 300.0"))
    watch.thread.join()
    assert watch.found is True  # the Stop landed while the procedure waited on the monitor
    assert isinstance(raised, RunInterrupted) and powered is False
    record = load_run(run)
    assert record.status == "interrupted"
    assert [r["kind"] for r in record.rows] == []  # the idle span was never finished
    # Stream time is the instrument's clock: the run ended far inside the 300 s idle span.
    assert samples_recorded(run) < 0.25 * 300.0 * 1000


@pytest.mark.slow
def test_stop_while_blocked_in_a_dut_command(tmp_path: Path) -> None:
    """Timed runs of >= 300 s: the stop ends the wait for the DUT's reply to `infer`."""
    stop = StopRequest()
    watch = StopWhenBlocked(stop, "runs", "infer", "drivers/dut/client.py")
    raised, powered, run = run_attached(tmp_path, stop, [watch],
                                        min_run_s=("min_run_s = 10.0", "min_run_s = 300.0"))
    watch.thread.join()
    assert watch.found is True
    assert isinstance(raised, RunInterrupted) and powered is False
    record = load_run(run)
    assert record.status == "interrupted"
    assert [r["kind"] for r in record.rows] == ["idle"]  # measured before the runs: kept
    assert samples_recorded(run) < 0.25 * 300.0 * 1000
