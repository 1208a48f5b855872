"""`rig qubo tune` and sweeps with a tuning file (rig/qubo/tuning.py): seeds 0-4 only,
parameters per (nodes, density) never per seed, the sweep's SUT gets them, the manifest has them."""

from __future__ import annotations

import itertools
import json
import random
import tomllib
from pathlib import Path

import pytest

from rig.errors import ConfigError
from rig.qubo import tuning

GRID = {"temperature": [1, 2, 4], "refract": [1, 2]}


def fake_measure(params, nodes, density, seed):
    """Deterministic gap: best temperature grows with nodes; seed adds noise."""
    best_t = 1 if nodes < 50 else 4
    return abs(params["temperature"] - best_t) * 0.1 + 0.01 * params["refract"] + 0.03 * seed


def test_seeds_outside_0_4_refused():
    for bad in ([5], [0, 7], [-1]):
        with pytest.raises(ConfigError, match="0-4") as info:
            tuning.search("loihi2", [25], [0.05], fake_measure, seeds=bad, grid=GRID)
        assert "\n" not in str(info.value)


def test_cli_refuses_seed_outside_0_4(tmp_path, capsys):
    from rig.cli import main

    code = main(["qubo", "tune", "--sut", "loihi2", "--nodes", "25", "--densities", "0.05",
                 "--seeds", "0,5", "--out", str(tmp_path / "t.toml")])
    assert code != 0
    assert "0-4" in capsys.readouterr().err
    assert not (tmp_path / "t.toml").exists()


def test_search_file_roundtrip_and_no_seed_in_entries(tmp_path):
    content = tuning.search("loihi2", [25, 100], [0.05, 0.1], fake_measure, grid=GRID)
    path = tmp_path / "tuning.toml"
    tuning.write_tuning(content, path)
    loaded = tuning.load_tuning(path)
    assert loaded["entry"] == content["entry"]
    for e in loaded["entry"]:
        assert set(e) == {"nodes", "density", "parameters"}
        assert not any("seed" in k for k in e["parameters"])
    by = {(e["nodes"], e["density"]): e["parameters"] for e in loaded["entry"]}
    assert by[(25, 0.05)] == {"refract": 1, "temperature": 1}
    assert by[(100, 0.1)] == {"refract": 1, "temperature": 4}
    rec = loaded["search"][0]
    assert len(rec["candidates"]) == 6 and rec["candidates"][rec["choice"]]["mean_gap"] == min(
        c["mean_gap"] for c in rec["candidates"])
    bad = dict(content, entry=[dict(content["entry"][0], seed=0)])
    with pytest.raises(ConfigError, match="never the seed"):
        tuning.validate(bad, "x")


def test_permuting_seed_results_does_not_change_choice():
    rng = random.Random(1)
    cands = tuning.candidates(GRID)
    table = {(i, s): rng.random() for i in range(len(cands)) for s in tuning.TUNING_SEEDS}
    base = None
    for perm in itertools.islice(itertools.permutations(tuning.TUNING_SEEDS), 0, 120, 7):
        mapping = dict(zip(tuning.TUNING_SEEDS, perm, strict=True))

        def measure(params, nodes, density, seed, mapping=mapping):
            return table[(cands.index(params), mapping[seed])]

        content = tuning.search("loihi2", [25], [0.05], measure, grid=GRID)
        if base is None:
            base = content["entry"]
        assert content["entry"] == base


def test_nearest_entry_lookup():
    content = tuning.search("loihi2", [25, 100], [0.05], fake_measure, grid=GRID)
    assert tuning.parameters_for(content, 25, 0.05)["temperature"] == 1
    assert tuning.parameters_for(content, 30, 0.1)["temperature"] == 1
    assert tuning.parameters_for(content, 250, 0.01)["temperature"] == 4


def _sweep_file(tmp_path: Path, tuning_name: str | None) -> Path:
    text = ('[sweep]\nsuts = ["cpu-sa"]\nnodes = [10, 25]\ndensities = [0.05]\n'
            'timeouts = [0.05]\nseeds = [0]\n')
    if tuning_name:
        text += f'tuning = "{tuning_name}"\n'
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_sweep_passes_tuned_parameters_and_records_them(tmp_path, monkeypatch):
    from rig.qubo import suts
    from rig.qubo.sweep import load_sweep, start_sweep, with_tuning

    content = tuning.search("cpu-sa", [10, 100], [0.05], fake_measure, grid=GRID)
    tuning.write_tuning(content, tmp_path / "tuning.toml")
    opened = []
    real_open = suts.open_sut

    def recording_open(name, **options):
        opened.append(dict(options))
        options.pop("hyperparameters", None)
        return real_open(name, **options)

    monkeypatch.setattr(suts, "open_sut", recording_open)
    spec = load_sweep(_sweep_file(tmp_path, "tuning.toml"))
    assert with_tuning(load_sweep(_sweep_file(tmp_path, None)), tmp_path / "tuning.toml"
                       ).tuning == spec.tuning
    outcome = start_sweep(spec, runs_root=tmp_path / "runs")
    assert outcome.error is None
    # 10 nodes: the exact entry (temperature 1); 25 nodes: nearer 10 than 100 in log size, so
    # the same parameters and the SUT stays open.
    assert [o["hyperparameters"] for o in opened] == [{"refract": 1, "temperature": 1}]
    run = next((tmp_path / "runs").glob("*/manifest.json")).parent
    manifest = json.loads((run / "manifest.json").read_text())
    text = "".join(f.read_text() for f in run.iterdir() if f.suffix == ".jsonl")
    assert text.count('"hyperparameters"') >= 2
    sweep = manifest["sweep"]
    assert sweep["tuning"]["entry"] == tomllib.loads(
        (tmp_path / "tuning.toml").read_text())["entry"]
    assert sweep["tuning_sha256"] == tuning.digest(spec.tuning)
    assert sweep["tuning_file"].endswith("tuning.toml")


def test_sweep_tuning_validated(tmp_path):
    from rig.qubo.sweep import load_sweep

    (tmp_path / "tuning.toml").write_text("format = 1\nsut = \"cpu-sa\"\n")
    with pytest.raises(ConfigError, match="entry"):
        load_sweep(_sweep_file(tmp_path, "tuning.toml"))
    content = tuning.search("loihi2", [10], [0.05], fake_measure, grid=GRID)
    tuning.write_tuning(content, tmp_path / "tuning.toml")
    with pytest.raises(ConfigError, match="not one of the sweep's suts"):
        load_sweep(_sweep_file(tmp_path, "tuning.toml"))


def test_a_sut_without_hyperparameter_support_says_so():
    from rig.errors import RigError

    # The CPU samplers take no tunable settings (the Loihi 2 shim does: see
    # tests/rig/test_loihi2_hyperparameters.py).
    with pytest.raises(RigError, match="no hyperparameters"):
        tuning.sut_measure("cpu-tabu", 0.1)


def test_sweep_sut_without_hyperparameters_is_a_clear_error(tmp_path):
    from rig.errors import RigError
    from rig.qubo.sweep import QuboPointFunction, load_sweep

    content = tuning.search("cpu-sa", [10], [0.05], fake_measure, grid=GRID)
    tuning.write_tuning(content, tmp_path / "tuning.toml")
    f = QuboPointFunction(load_sweep(_sweep_file(tmp_path, "tuning.toml")))
    with pytest.raises(RigError, match="takes no hyperparameters"):
        f._open("cpu-sa", {"temperature": 1})
    f.close()
