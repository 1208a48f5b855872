"""The run folder: written as events happen, read back whole or after a kill."""

from __future__ import annotations

import csv
import json
import typing
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rig.run.events import (
    Event,
    InstrumentInfo,
    LatencyRun,
    RunFinished,
    RunStarted,
    SampleClassified,
    UnknownEvent,
    WindowMeasured,
)
from rig.run.store import INCOMPLETE, RunStore, load_run


def started() -> RunStarted:
    return RunStarted(run_id="r1", procedure="asc", device="sim", simulated=True,
                      manifest={"bench": {"name": "b"}})


def test_every_event_kind_round_trips() -> None:
    ev = SampleClassified(index=3, label=1, predicted=2, correct=False, scores=[0.1, 0.9])
    assert Event.from_record(json.loads(json.dumps(ev.to_record()))) == ev


def test_a_record_read_back_is_the_event_its_class_makes() -> None:
    """Every kind, read back from its record (the quick path that skips the frozen __init__),
    equals the event made by its class, field by field in the same order, and stays frozen; a
    record with a field missing or an extra key goes through the class (its defaults, its
    errors); a class whose __init__ does more (__post_init__) is always built by it."""
    import dataclasses
    import importlib

    from rig.run.events import _KINDS

    for module in ("rig.qubo.sweep", "rig.run.live_power"):  # their events register their kinds
        importlib.import_module(module)

    checked = []
    probes = {bool: True, int: 7, float: 0.25, str: "x", list: [1, 2], dict: {"k": 1}}
    for kind, cls in _KINDS.items():
        if cls is UnknownEvent or kind == "event":
            continue
        hints = typing.get_type_hints(cls)
        values = {}
        for f in dataclasses.fields(cls):
            origin = typing.get_origin(hints[f.name]) or hints[f.name]
            values[f.name] = next((v for t, v in probes.items()
                                   if isinstance(origin, type) and issubclass(origin, t)), None)
        try:
            made = cls(**values)
        except (TypeError, ValueError):  # a __post_init__ that checks its values
            continue
        read = Event.from_record(json.loads(json.dumps(made.to_record(), default=str)))
        assert type(read) is cls and read == made, kind
        assert list(vars(read)) == [f.name for f in dataclasses.fields(cls)], kind
        with pytest.raises(dataclasses.FrozenInstanceError):
            read.at = 1.0  # type: ignore[misc]
        checked.append(kind)
    assert len(checked) >= 17, checked
    short = Event.from_record({"event": "latency_run", "index": 2, "iterations": 5})
    assert short == LatencyRun(index=2, iterations=5, at=short.at)
    extra = Event.from_record({"event": "latency_run", "index": 2, "newer_field": 1, "at": 3.0})
    assert extra == LatencyRun(index=2, at=3.0)

    @dataclasses.dataclass(frozen=True)
    class Checked(Event):
        kind: typing.ClassVar[str] = "test_checked_event"
        value: int = 0

        def __post_init__(self) -> None:
            if self.value < 0:
                raise ValueError("negative")

    try:
        with pytest.raises(ValueError, match="negative"):
            Event.from_record({"event": "test_checked_event", "value": -1, "at": 1.0})
    finally:
        _KINDS.pop("test_checked_event", None)


def test_unknown_kind_is_kept_not_fatal() -> None:
    ev = Event.from_record({"event": "from_the_future", "x": 1})
    assert ev.kind == "unknown" and ev.record["x"] == 1


def test_events_are_on_disk_before_the_run_ends(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "asc", "sim")
    store(started())
    store(LatencyRun(index=0, iterations=800, elapsed_s=10.0, time_per_inference_s=0.0125,
                     inferences_per_s=80.0, timer="emon"))
    # No close, no RunFinished: what a kill -9 leaves behind.
    lines = (store.path / "events.jsonl").read_text().splitlines()
    assert [json.loads(x)["event"] for x in lines] == ["run_started", "latency_run"]
    manifest = json.loads((store.path / "manifest.json").read_text())
    assert manifest["status"] == "running" and manifest["simulated"] is True
    assert "numpy" in manifest["software"] and "hostname" in manifest["host"]
    record = load_run(store.path)
    assert record.status == INCOMPLETE
    assert [r["kind"] for r in record.rows] == ["latency_run"]


def test_finished_run_writes_results_and_status(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "asc", "sim")
    store(started())
    store(InstrumentInfo(role="emon", info={"driver": "lpm01a", "freq": "1k"}))
    store(WindowMeasured(index=0, iterations=800, start_sample=10, end_sample=10010,
                         duration_s=10.0, energy_j=0.036, mean_power_w=3.6e-3,
                         energy_per_inference_j=45e-6))
    store(SampleClassified(index=0, label=1, predicted=1, correct=True, scores=[0.0, 1.0]))
    store(RunFinished(status="complete", summary={"accuracy": 1.0}))
    table = pq.read_table(store.path / "results.parquet").to_pylist()
    assert [r["kind"] for r in table] == ["window", "sample"]
    assert table[0]["energy_j"] == 0.036 and table[0]["simulated"] is True
    assert json.loads(table[1]["scores"]) == [0.0, 1.0]
    csv = (store.path / "results.csv").read_text().splitlines()
    assert len(csv) == 3 and "energy_per_inference_j" in csv[0]
    record = load_run(store.path)
    assert record.status == "complete"
    assert record.manifest["instruments"]["emon"]["freq"] == "1k"
    assert record.manifest["summary"] == {"accuracy": 1.0}


@pytest.mark.parametrize(("simulated", "emulated"), [
    (False, "emulated: QEMU mps2-an386, -icount shift=5, 32 ns per instruction"),
    (True, ""), (False, "")])
def test_results_rows_say_simulated_and_emulated_apart(tmp_path: Path, simulated: bool,
                                                       emulated: str) -> None:
    """Issue 38: an emulated run's rows said simulated=false and nothing else; `emulated` is
    its own column (true on QEMU), and `simulated` keeps its meaning."""
    store = RunStore.create(tmp_path, "asc", "qemu")
    store(RunStarted(run_id="r1", procedure="asc", device="qemu", simulated=simulated,
                     emulated=emulated, manifest={"bench": {"name": "b"}}))
    store(LatencyRun(index=0, iterations=38, elapsed_s=2.09, time_per_inference_s=0.055,
                     inferences_per_s=18.2, timer="dut"))
    store(RunFinished(status="complete", summary={}))
    [row] = pq.read_table(store.path / "results.parquet").to_pylist()
    assert (row["simulated"], row["emulated"]) == (simulated, bool(emulated))
    with open(store.path / "results.csv", newline="") as f:
        [columns] = list(csv.DictReader(f))
    assert (columns["simulated"], columns["emulated"]) == (
        str(simulated).lower(), str(bool(emulated)).lower())


def test_torn_last_line_is_skipped(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "asc", "sim")
    store(started())
    store.close()
    with open(store.path / "events.jsonl", "a") as f:
        f.write('{"event": "latency_ru')
    record = load_run(store.path)
    assert record.bad_lines == 1 and record.status == INCOMPLETE


def test_two_runs_in_the_same_second_get_two_folders(tmp_path: Path) -> None:
    a = RunStore.create(tmp_path, "asc", "sim")
    b = RunStore.create(tmp_path, "asc", "sim")
    assert a.path != b.path and a.path.is_dir() and b.path.is_dir()
