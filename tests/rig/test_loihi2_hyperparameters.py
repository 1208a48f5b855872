"""The Loihi 2 shim takes a tuning file's hyperparameters: what `rig qubo tune --sut loihi2`
searches and a tuned sweep passes on. Unknown names are refused by the shim itself."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from rig.cli import main
from rig.errors import BENCH_ERRORS
from rig.qubo.suts import LAVA_PYTHON, LOIHI2_SHIM, open_sut
from rig.qubo.workloads import generate

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (LAVA_PYTHON.exists() and LOIHI2_SHIM.exists()),
                       reason=".venv-lava or the Loihi 2 shim missing: run `make lava-env`"),
]


def test_an_unknown_hyperparameter_is_refused_by_name() -> None:
    with pytest.raises(BENCH_ERRORS) as err:  # a DeviceError: the shim exited
        open_sut("loihi2", hyperparameters={"bogus": 1})
    assert "unknown hyperparameters ['bogus']" in err.value.message
    assert "temperature" in err.value.message  # the names it does take


def test_hyperparameters_reach_the_shim_and_it_solves_with_them() -> None:
    sut = open_sut("loihi2", hyperparameters={"temperature": 2, "refract": 2})
    try:
        assert sut.hyperparameters == {"temperature": 2, "refract": 2}
        argv = Path(f"/proc/{sut._transport.pid}/cmdline").read_bytes().split(b"\0")
        assert b'{"refract": 2, "temperature": 2}' in argv  # what the shim parsed (see above)
        sut.load(generate(25, 0.05, 0))
        result = sut.solve(0.05, 7)
        # It ran for its timeout and stopped: a loaded host stretches the Lava steps (CI saw
        # 86 ms for 50 ms).
        assert 0.025 <= result.elapsed_s < 1.0
        assert result.improvements
    finally:
        sut.close()


def test_rig_qubo_tune_runs_on_loihi2(tmp_path: Path) -> None:
    out = tmp_path / "tuning.toml"
    code = main(["qubo", "tune", "--sut", "loihi2", "--nodes", "10", "--densities", "0.25",
                 "--seeds", "0,1", "--timeout", "0.05", "--out", str(out)])
    assert code == 0
    data = tomllib.loads(out.read_text())
    (entry,) = data["entry"]
    assert (entry["nodes"], entry["density"]) == (10, 0.25)
    assert set(entry["parameters"]) <= {"temperature", "refract", "neuron_model"}
    assert "seed" not in entry
