"""The ASC procedure and replies garbled on the DUT's line (issue 39): an ``infer`` whose reply
shows the DUT ran it but cannot be read is never sent again blindly by the client; the
procedure re-runs that timed run (or that sample), says so in the run's notes, and the run ends
complete with every figure from an intact reply. Before, the first such reply ended the run
("did not answer 'infer ...' with the expected InferStart line")."""

from __future__ import annotations

from pathlib import Path

import pytest

from drivers.dut.client import DutClient
from drivers.transport import SerialTransport
from firmware.dut.asc_model import LinearAscModel
from rig.bench.config import load_bench
from rig.datasets.synthetic import make_split
from rig.errors import MeasurementFailed
from rig.run import asc
from rig.run.events import Event, LatencyRun, Note, SampleClassified, SampleFailed
from tests.drivers.garbling import GarblingTransport
from virtual_bench.dut import SimDut
from virtual_bench.world import World


def bench_file(tmp_path: Path, port: str) -> Path:
    path = tmp_path / "bench.toml"
    path.write_text(
        '[bench]\nname = "garbled replies"\nvoltage_limit_v = 3.3\nsimulated = true\n\n'
        f'[dut]\nport = "{port}"\ntimestamp_mode = "performance"\n\n[emon]\ndriver = "none"\n\n'
        '[dataset]\nname = "synthetic-asc"\nsamples_per_class = 1\nseed = 0\n\n'
        '[procedure.asc]\nruns = 2\nmin_run_s = 0.5\nmin_iterations = 10\nwarmup = 1\n'
    )
    return path


def run_garbled(tmp_path: Path, rules: list[tuple[bytes, int, bytes]], *, lap_crc: bool = True
                ) -> tuple[list[Event], GarblingTransport, BaseException | None]:
    world = World(speed=1000.0)
    dut = SimDut(world, LinearAscModel.load(), timestamp_mode="performance", lap_crc=lap_crc)
    dut.start()
    transport = GarblingTransport(SerialTransport(dut.path, 115200, name="DUT"), rules)
    client = DutClient(transport)
    events: list[Event] = []
    error: BaseException | None = None
    try:
        world.power(True)
        client.wait_for_boot(timeout_s=5.0)
        bench = load_bench(bench_file(tmp_path, dut.path))
        asc.AscProcedure(bench, client, None, events.append).run()
    except MeasurementFailed as exc:
        error = exc
    finally:
        client.close()
        dut.close()
    return events, transport, error


@pytest.mark.parametrize("lap_crc", [False, True])
def test_garbled_infer_replies_are_re_run_and_said(tmp_path: Path, lap_crc: bool) -> None:
    """Firmware from before lapcrc: its plain lap lines cannot be read again, nor can an end
    line garbled be told from a lost one: three re-runs. With lapcrc only the count's echo
    needs one; the lap lines are read again with `laps`, the lost end line is taken (every line
    that measures carries its CRC)."""
    events, transport, error = run_garbled(tmp_path, [
        # the first timed run after the calibration: its echo of the count
        (b"m-infer-start-", 2, b"m-infer-stqrt-9999\r\n"),
        # the accuracy pass's second sample: its end line ('m' -> 'e', no refusal)
        (b"m-infer-done", 7, b"e-infer-done\r\n"),
        # a lap line of the second timed run (plain lap lines: no way to read them again)
        (b"m-lap-us-", 7, b"m-lap-us-1\xb02\r\n"),
    ], lap_crc=lap_crc)
    assert error is None
    assert len(transport.hits) == 3
    runs = [e for e in events if isinstance(e, LatencyRun)]
    samples = [e for e in events if isinstance(e, SampleClassified)]
    assert [r.index for r in runs] == [0, 1]
    assert not any(isinstance(e, SampleFailed) for e in events)
    model = LinearAscModel.load()
    test = make_split(1, 0, "test")
    assert [s.predicted for s in samples] == [model.predict(x.tobytes()) for x in test.inputs]
    # every time is the simulated truth: nothing of a garbled reply was taken
    assert all(r.time_per_inference_s == pytest.approx(12.5e-3, rel=1e-6) for r in runs)
    assert all(s.execution_time_s == pytest.approx(12.5e-3, rel=1e-6) for s in samples)
    notes = [e.text for e in events if isinstance(e, Note)]
    reruns = [n for n in notes if " re-run: " in n]
    assert any("timed run 0" in n and "m-infer-start" in n for n in reruns)
    (count,) = [n for n in notes if n.startswith("DUT line: ")]  # once, at the end of the run
    if not lap_crc:
        assert len(reruns) == 3, notes
        assert any("sample 1" in n and "m-infer-done" in n for n in reruns)
        assert any("timed run 1" in n and "m-lap-us" in n for n in reruns)
        assert "3 infer re-runs" in count
        return
    assert len(reruns) == 1, notes
    assert any("lap lines of 'infer 41 1' came back garbled" in n and "'laps'" in n
               for n in notes)
    assert any("without its m-infer-done line" in n and "taken" in n for n in notes)
    assert "1 infer re-runs" in count and "laps 1" in count


def test_an_infer_garbled_every_time_ends_the_run_naming_it(tmp_path: Path) -> None:
    rules = [(b"m-infer-start-", k, b"m-infer-stqrt-1\r\n") for k in range(2, 2 + asc.RERUNS + 1)]
    events, _, error = run_garbled(tmp_path, rules)
    assert error is not None
    assert f"garbled {asc.RERUNS + 1} times" in str(error) and "m-infer-start" in str(error)
    assert len([e for e in events if isinstance(e, Note) and " re-run: " in e.text]) == asc.RERUNS
