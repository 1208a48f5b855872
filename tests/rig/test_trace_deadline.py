"""rig/run/trace_deadline.py: where a run's reply deadline is counted in the monitor's samples
(issue 39, a hung DUT kept the trace growing). From the run's start pulse, the DUT's time alone
decides: no host time is waited. Before the pulse (or without windows) from the command, and
never before the host's patience for a reply. A closed window never ends the wait."""

from __future__ import annotations

import pytest

from rig.run import trace_deadline
from rig.run.trace_deadline import ReplyDeadlinePassed, TraceDeadline


class Recorder:
    """What TraceDeadline reads of an EmonRecorder."""

    def __init__(self, rate: float = 1000.0) -> None:
        self.sample_rate = rate
        self.samples = 0
        self.edge_list: list[int] = []
        self.stop_after: int | None = None

    def edges(self, start: int = 0) -> list[int]:
        return self.edge_list[start:]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(trace_deadline.time, "monotonic", c)
    return c


def watch(rec: Recorder, start_edges: int | None, deadline_s: float = 30.0) -> TraceDeadline:
    return TraceDeadline(rec, deadline_s, "infer 816 1", "DUT", start_edges=start_edges,
                         host_floor_s=5.0)


def test_from_the_start_pulse_the_duts_time_alone_decides(clock: Clock) -> None:
    rec = Recorder()
    rec.samples, rec.edge_list = 1000, [7, 9]  # two earlier windows' edges
    w = watch(rec, start_edges=2)
    rec.edge_list.append(2000)  # this run's start pulse
    rec.samples = 2000 + 30_000 - 1
    w.check()  # one sample short of the deadline
    rec.samples += 1
    with pytest.raises(ReplyDeadlinePassed) as err:
        w.check()  # no host time has passed: not needed after the pulse
    assert rec.stop_after == 32_000  # the trace stops here
    assert "never said m-infer-done for 'infer 816 1' within 30 s of its own time" \
        in err.value.message and "since its start pulse" in err.value.message
    assert "the trace stops there" in err.value.message


def test_a_closed_window_never_ends_the_wait(clock: Clock) -> None:
    rec = Recorder()
    w = watch(rec, start_edges=0)
    rec.edge_list = [100, 900]
    rec.samples = 10**9
    clock.now += 1e6
    w.check()  # the DUT finished; only its reply is late: the host's deadline decides
    assert rec.stop_after is None


@pytest.mark.parametrize("start_edges", [0, None])  # energy mode before the pulse; no windows
def test_before_the_pulse_the_hosts_patience_is_waited_too(clock: Clock,
                                                          start_edges: int | None) -> None:
    rec = Recorder()
    rec.samples = 500
    w = watch(rec, start_edges=start_edges)
    rec.samples = 500 + 30_000 + 10**6  # far past, in the DUT's time (a fast virtual bench)
    clock.now += 4.9
    w.check()  # a loaded host may deliver the command late: its patience first
    clock.now += 0.2
    with pytest.raises(ReplyDeadlinePassed) as err:
        w.check()
    assert "since the command" in err.value.message and rec.stop_after == rec.samples


def test_the_wrapped_checkpoint_runs_first() -> None:
    rec = Recorder()
    calls: list[str] = []
    w = watch(rec, start_edges=0)
    w.wrap(lambda: calls.append("recorder"))()
    assert calls == ["recorder"]

    def stop() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        w.wrap(stop)()
