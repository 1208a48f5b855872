"""The rig through the IO manager sketch's AVR build on simavr (benches/simavr-io-manager.toml).

`rig dut` commands reach the host build of the DUT shim through the emulated UNO, and a short
ASC accuracy pass (one test sample: every input goes down as hex, checked by the DUT's `db crc`,
about 50 s of simulated UNO time) gives the reference model's scores, and a trace the disk
preflight priced within 20% (issue 25.2: the bench's time follows the UNO's while it works). No
harness outlives a run.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from firmware.dut.asc_model import LinearAscModel
from rig.bench.config import load_bench
from rig.datasets.testsets import TestSet, load_test_set
from rig.run import asc
from rig.run import measure as runner
from rig.run.events import InstrumentInfo, SampleClassified
from rig.run.measure import measure_asc
from rig.traces.files import read_trace
from tests.e2e.runs import REPO, RIG
from tests.firmware.simavr_uno import build_or_skip
from virtual_bench.simavr_uno import DEFAULT_ELF, DEFAULT_HARNESS

pytestmark = pytest.mark.slow

BENCH = REPO / "benches" / "simavr-io-manager.toml"


@pytest.fixture(scope="module", autouse=True)
def avr_build() -> None:
    """Built once; skipped (with the reason) where the AVR toolchain or simavr is missing."""
    build_or_skip()


#: Set, with a value of its own, in the environment of each test here: the harnesses it starts
#: inherit it, so another xdist worker's harnesses are not taken for leftovers of this test.
TAG_VARIABLE = "NEUROBENCH_RIG_TEST_TAG"


@pytest.fixture(autouse=True)
def tag(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> bytes:
    value = f"{os.getpid()}-{request.node.name}"
    monkeypatch.setenv(TAG_VARIABLE, value)
    return f"{TAG_VARIABLE}={value}".encode()


def harness_pids(tag: bytes) -> set[int]:
    """Running harness processes (their command line starts with the harness's path) that this
    test started (their environment has its `tag`)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0]
                if argv0 != os.fsencode(DEFAULT_HARNESS):
                    continue
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if tag in environ:
                pids.add(int(entry.name))
    return pids


def rig_dut(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RIG, "dut", "--device", "simavr-io-manager", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)


def test_rig_dut_commands_through_the_emulated_uno(tmp_path: Path, tag: bytes) -> None:
    info = rig_dut("info", "--json")
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout) == {
        "name": "dut", "vendor": "neurobench-rig host shim",
        "profile": "ULPMark for tinyML Firmware V0.0.1", "model": "asc01",
        "timestamp_mode": "energy", "capabilities": ["bload", "dbcrc", "elap", "lapcrc", "rcrc"],
        # the sketch's own name: the Python simulation calls itself "(simulated)"
        "io_manager": "neurobench-rig IO manager 1.0.0",
    }
    data = tmp_path / "input.bin"
    data.write_bytes(bytes(range(256)) * 2)
    load = rig_dut("load", str(data), "--json")
    assert load.returncode == 0, load.stderr
    # Hex behind an IO manager (binary cannot pass through), verified by the DUT's db crc.
    assert json.loads(load.stdout) == {"bytes": 512, "method": "hex", "verified": True,
                                       "check": "crc", "attempts": 1,
                                       "io_manager": "neurobench-rig IO manager 1.0.0"}
    # A fresh power-up has no input: the DUT's refusal comes back through the UNO, exit 2.
    infer = rig_dut("infer", "1")
    assert infer.returncode == 2
    assert "Input is 0 bytes, the model needs 16000" in infer.stderr
    assert harness_pids(tag) == set()  # every harness of the three runs was killed


def test_short_asc_accuracy_pass_through_the_emulated_uno(tmp_path: Path, monkeypatch,
                                                          tag: bytes) -> None:
    bench = load_bench(BENCH)
    full = load_test_set(bench)
    one = TestSet(full.inputs[:1], full.labels[:1], full.description + " (the first only)")
    monkeypatch.setattr(asc, "load_test_set", lambda _bench: one)
    # What the preflight projects for this run from the bench alone: scope accuracy, one sample.
    monkeypatch.setattr(runner, "_asc_test_samples", lambda _bench: 1)
    projected = runner.asc_trace_bytes(bench, "accuracy")
    events: list = []
    running: set[int] = set()

    def watch(event: object) -> None:
        events.append(event)
        if isinstance(event, SampleClassified):
            running.update(harness_pids(tag))

    outcome = measure_asc(bench, device="simavr-io-manager", runs_root=tmp_path / "runs",
                          subscribers=[watch], scope="accuracy")
    assert outcome.error is None, outcome.error
    failed = [c for c in outcome.summary.get("checks", []) if c["ok"] is False]
    assert outcome.status == "complete", failed
    # The run's harness carried the tag (so one left running would be seen), and none is left.
    assert len(running) == 1
    assert harness_pids(tag) == set()
    infos = {e.role: e.info for e in events if isinstance(e, InstrumentInfo)}
    assert infos["io_manager"]["name"] == "neurobench-rig IO manager"
    assert "simavr" in infos["virtual_bench"]["dut"]
    # The UNO's firmware image, told apart by its digest (issue 38).
    assert infos["virtual_bench"]["images"]["io_manager"] == {
        "path": str(DEFAULT_ELF), "sha256": hashlib.sha256(DEFAULT_ELF.read_bytes()).hexdigest(),
        "size_bytes": DEFAULT_ELF.stat().st_size}
    samples = [e for e in events if isinstance(e, SampleClassified)]
    assert len(samples) == 1 and outcome.summary["samples"] == 1
    sample = samples[0]
    # The real model on the DUT, through the real AVR binary: the reference's scores.
    expected = np.round(LinearAscModel.load()(one.inputs[0]), 3)
    np.testing.assert_allclose(sample.scores, expected, atol=1.5e-3)
    assert sample.predicted == int(np.argmax(sample.scores))
    assert sample.label == int(one.labels[0])
    # One inference of [sim] inference_ms = 12.5 ms, timed by the DUT's lap counter (elap).
    assert sample.timer == "dut" and sample.execution_time_s == pytest.approx(0.0125, abs=1e-6)
    # The trace: its download lasted what the emulated UNO took (~50 s at 9600 and 115200
    # baud), not the host's time for the emulation x speed 50; the preflight priced it so.
    trace_path = outcome.run_path / "traces" / "emon.jls"
    real = trace_path.stat().st_size
    duration_s = read_trace(trace_path).duration_s
    print(f"simavr UNO, one sample: {duration_s:.1f} s recorded, "
          f"{runner.asc_trace_seconds(bench, 'accuracy'):.1f} s estimated; "
          f"projected {projected} B, real {real} B ({projected / real - 1:+.1%})")
    assert abs(projected - real) <= 0.2 * real
