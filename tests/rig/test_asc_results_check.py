"""The ASC accuracy pass and CRC-checked results (rig extension ``rcrc``): the summary says how
results were checked, plain MLPerf Tiny firmware carries "results unchecked", and a sample whose
result failed its CRC twice is failed by name while the others are kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from drivers.dut.client import DutClient
from drivers.transport import SerialTransport
from firmware.dut.asc_model import LinearAscModel
from rig.bench.config import load_bench
from rig.run import asc
from rig.run.console import summary_table
from rig.run.events import Event, InstrumentInfo, Note, SampleClassified, SampleFailed
from virtual_bench.dut import SimDut
from virtual_bench.world import World


def bench_file(tmp_path: Path, port: str) -> Path:
    path = tmp_path / "bench.toml"
    path.write_text(
        '[bench]\nname = "results check"\nvoltage_limit_v = 3.3\nsimulated = true\n\n'
        f'[dut]\nport = "{port}"\ntimestamp_mode = "performance"\n\n[emon]\ndriver = "none"\n\n'
        '[dataset]\nname = "synthetic-asc"\nsamples_per_class = 1\nseed = 0\n'
    )
    return path


@pytest.mark.parametrize("extensions", [True, False])
def test_accuracy_pass_says_whether_results_were_crc_checked(tmp_path: Path,
                                                              extensions: bool) -> None:
    world = World(speed=1000.0)
    dut = SimDut(world, LinearAscModel.load(), timestamp_mode="performance",
                 extensions=extensions)
    dut.start()
    client = DutClient(SerialTransport(dut.path, 115200, name="DUT"))
    events: list[Event] = []
    try:
        world.power(True)
        client.wait_for_boot(timeout_s=5.0)
        bench = load_bench(bench_file(tmp_path, dut.path))
        asc.AscProcedure(bench, client, None, events.append, scope="accuracy").run()
    finally:
        client.close()
        dut.close()
    samples = [e for e in events if isinstance(e, SampleClassified)]
    assert len(samples) == 4 and not any(isinstance(e, SampleFailed) for e in events)
    summary = asc.summarize(events, scope="accuracy")
    warnings = [e.text for e in events if isinstance(e, Note) and e.level == "warning"]
    checks = {c["name"]: c for c in summary["checks"]}
    if extensions:
        assert summary["results_check"] == asc.RESULTS_CRC
        assert checks["results verified"]["ok"] is True
        assert asc.RESULTS_UNCHECKED not in warnings
    else:  # plain MLPerf Tiny firmware: driven as before, its results marked unchecked
        assert summary["results_check"] == asc.RESULTS_UNCHECKED
        assert summary["results_check"].startswith("results unchecked")
        assert "results verified" not in checks
        assert asc.RESULTS_UNCHECKED in warnings
        console = Console(record=True, width=200)
        console.print(summary_table(summary, title="Summary"))
        assert "results unchecked" in console.export_text()  # what `rig show` prints


def test_failed_samples_are_named_and_left_out_of_the_accuracy() -> None:
    info = InstrumentInfo(role="dut", info={"capabilities": ["bload", "rcrc"]})
    events: list[Event] = [info]
    events += [SampleClassified(index=i, label=0, predicted=0, correct=True) for i in (0, 2)]
    events += [SampleClassified(index=3, label=1, predicted=0, correct=False)]
    events += [SampleFailed(index=1, label=0, reason="CRC mismatch twice"),
               SampleFailed(index=4, label=2, reason="CRC mismatch twice")]
    summary = asc.summarize(events, scope="accuracy")
    assert summary["samples"] == 3 and summary["accuracy"] == pytest.approx(2 / 3)
    assert summary["samples_failed"] == 2
    check = next(c for c in summary["checks"] if c["name"] == "results verified")
    assert check["ok"] is False and "sample 1, sample 4" in check["detail"]
    assert not asc.checks_passed(summary)
    # `rig show` says it: the results row and the failed samples
    console = Console(record=True, width=200)
    console.print(summary_table(summary, title="Summary"))
    shown = console.export_text()
    assert "CRC-32 on every result line" in shown
    assert "Samples failed (result unverified)" in shown and "sample 1, sample 4" in shown
    # a run recorded before the rig knew rcrc (no dut info) gets no results_check at all
    assert "results_check" not in asc.summarize(events[1:], scope="accuracy")
