"""Results the DUT did not send are never accepted (issue 22.5).

The real host-built C shim serves the virtual bench; a relay (`NoisyResultLine`) between its
pty and the rig's flips one bit in 3% of the bytes of every result line, seeded. An accuracy
pass of 152 samples then runs through the CLI. Every score vector the rig accepted is compared
with the one the DUT sent: none may differ. A sample whose result stays corrupted after the
re-asks (`ASK_AGAIN` of them) is failed by name, the others are kept, and the run says its
results were CRC-checked. (Issue 22.5's 0.4% corrupts a result nine times in a row almost never
since issue 39 raised the re-asks from one to eight: 3% exercises that path.)
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest

from rig.cli import main
from virtual_bench.bench import VirtualBench
from virtual_bench.description import load_description
from virtual_bench.host_dut import host_shim_binary

from .noisy_line import NoisyResultLine
from .runs import REPO, events, only_run

pytestmark = pytest.mark.slow

#: 4 classes x 38 = 152 test samples.
SAMPLES_PER_CLASS = 38
RATE = 0.03
SEED = 22


def accuracy_bench(tmp_path: Path, dut_port: str, emon_port: str) -> Path:
    """benches/sim.toml's DUT and LPM01A at explicit ports (a bench served in this process)."""
    path = tmp_path / "noisy.toml"
    path.write_text(
        '[bench]\nname = "noisy DUT line"\nvoltage_limit_v = 3.3\nsimulated = true\n\n'
        f'[dut]\nport = "{dut_port}"\ntimestamp_mode = "energy"\n\n'
        f'[emon]\ndriver = "lpm01a"\nport = "{emon_port}"\nsample_rate_hz = 1000\n'
        "supply_voltage_v = 1.8\n\n"
        f'[dataset]\nname = "synthetic-asc"\nsamples_per_class = {SAMPLES_PER_CLASS}\n'
        "seed = 0\n"
    )
    return path


@pytest.fixture(scope="module")
def noisy_run(tmp_path_factory) -> tuple[int, Path, NoisyResultLine]:
    """One `rig measure asc --scope accuracy` over the noisy line, against the C shim."""
    if host_shim_binary(build=True) is None:
        pytest.skip("the host C shim cannot be built here (no gcc)")
    tmp = tmp_path_factory.mktemp("noisy")
    sim = load_description(REPO / "benches" / "sim.toml")
    with contextlib.ExitStack() as stack:
        vb = stack.enter_context(VirtualBench(sim))
        assert vb.dut_impl.startswith("c-shim")
        line = stack.enter_context(NoisyResultLine(vb.ports["dut"], rate=RATE, seed=SEED))
        bench = accuracy_bench(tmp, line.path, vb.ports["emon"])
        code = main(["measure", "asc", "--bench", str(bench), "--scope", "accuracy",
                         "--runs-dir", str(tmp / "runs")])
    run = only_run(tmp / "runs")
    return code, run, line


def test_no_corrupted_result_is_accepted(noisy_run) -> None:
    _, run, line = noisy_run
    samples = [e for e in events(run) if e["event"] == "sample_classified"]
    n = SAMPLES_PER_CLASS * 4
    assert len(line.truth) == n  # one inference per sample, every one reached the DUT
    # the line was noisy as intended: about 0.4% of the result bytes (a binomial count)
    assert line.result_bytes > 4000
    assert abs(line.flipped_bytes - RATE * line.result_bytes) < 4 * np.sqrt(
        RATE * line.result_bytes)
    wrong = [s["index"] for s in samples if s["scores"] != line.truth[s["index"]]]
    assert wrong == [], f"{len(wrong)} of {len(samples)} accepted results differ: {wrong}"


def test_every_sample_is_classified_or_failed_by_name(noisy_run) -> None:
    code, run, line = noisy_run
    recorded = events(run)
    classified = {e["index"] for e in recorded if e["event"] == "sample_classified"}
    failed = {e["index"]: e for e in recorded if e["event"] == "sample_failed"}
    n = SAMPLES_PER_CLASS * 4
    assert classified | set(failed) == set(range(n)) and not classified & set(failed)
    # a corrupted line was re-asked: most samples hit once are classified all the same
    recovered = [i for i in classified if line.hit[i]]
    assert len(recovered) >= 5
    assert failed  # this rate corrupts some results nine times in a row: the path is exercised
    manifest = json.loads((run / "manifest.json").read_text())
    summary = manifest["summary"]
    assert summary["samples"] == len(classified)
    assert summary["results_check"].startswith("CRC-32")
    check = next(c for c in summary["checks"] if c["name"] == "results verified")
    assert check["ok"] is (not failed)
    warnings = [e["text"] for e in recorded if e["event"] == "note" and e["level"] == "warning"]
    for index, event in failed.items():
        assert f"sample {index}" in check["detail"]
        assert any(w.startswith(f"sample {index} failed: ") for w in warnings)
        assert "CRC" in event["reason"]
        assert line.hit[index]  # only a corrupted result fails a sample
    # a run with unverified samples failed its own check (exit 1); nothing measured was lost
    assert code == (1 if failed else 0)
    assert manifest["status"] == ("failed-checks" if failed else "complete")
