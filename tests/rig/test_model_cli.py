"""`rig model train xylo|c-shim` and `rig model info`, through the CLI's own entry point."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rig.cli import main
from rig.model import c_shim

REPO = Path(__file__).resolve().parents[2]
SHIPPED_XYLO = REPO / "firmware" / "xylo" / "models" / "asc_synthetic.npz"


def test_c_shim_writes_the_npz_and_the_header_the_trainer_makes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "train", "c-shim", "--out-dir", str(tmp_path), "--samples-per-class",
                 "15", "--seed", "3", "--test-per-class", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["test_accuracy"] is None and 0.25 < out["train_accuracy"] <= 1.0
    model = c_shim.train(15, 3)
    assert (tmp_path / "asc_model_weights.npz").read_bytes() == c_shim.npz_bytes(model)
    assert (tmp_path / "asc_model_weights.h").read_text() == c_shim.header_text(model)
    assert out["npz"] == str(tmp_path / "asc_model_weights.npz")


def test_xylo_with_a_dataset_needs_an_output_file(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "train", "xylo", "--dataset", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("rig: error: --dataset needs --out (the default asc_synthetic.npz is the "
                   "shipped SYNTHETIC model; name the file to write)")


@pytest.mark.parametrize(("args", "message"), [
    (["--hidden", "0,64"], "hidden sizes are 1 to 1000"),
    (["--hidden", "a"], "is not a list of integers"),
    (["--ridge", "0"], "ridge strengths must be positive"),
])
def test_xylo_refuses_bad_search_settings(args: list[str], message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["model", "train", "xylo", *args])
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_xylo_refuses_a_validation_fraction_outside_0_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("rockpool")
    from rig.model import xylo

    class Source:
        description = "three clips per scene"

        def split(self, name: str) -> xylo.Rasters:
            labels = np.repeat(np.arange(4), 3)
            return xylo.Rasters(np.zeros((12, 5, 16), np.uint8), labels, np.arange(12))

    monkeypatch.setattr(xylo, "synthetic_source", lambda *a, **k: Source())
    assert main(["model", "train", "xylo", "--out", str(tmp_path / "m.npz"),
                 "--val-fraction", "1.5"]) == 2
    assert "validation fraction 1.5 is not between 0 and 1" in capsys.readouterr().err
    assert not (tmp_path / "m.npz").exists()


def test_xylo_trains_through_the_cli_on_a_given_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("rockpool")
    pytest.importorskip("xylosim")
    from rig.model import xylo

    from .test_model_xylo import SpySource

    reads: list[str] = []
    made: dict[str, object] = {}

    def source(work_dir: Path, train_clips: int, test_clips: int, data_seed: int,
               workers: int) -> SpySource:
        made.update(work_dir=work_dir, clips=(train_clips, test_clips), seed=data_seed)
        return SpySource(reads)

    monkeypatch.setattr(xylo, "synthetic_source", source)
    out = tmp_path / "m.npz"
    assert main(["model", "train", "xylo", "--out", str(out), "--hidden", "8", "--ridge",
                 "0.1,1", "--train-clips", "3", "--test-clips", "2", "--data-seed", "5",
                 "--work-dir", str(tmp_path / "w"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert made == {"work_dir": tmp_path / "w", "clips": (3, 2), "seed": 5}
    assert reads == ["read train", "read test"] and result["test_slices"] == 8
    selection = result["training"]["selection"]
    assert [(c["n_hidden"], c["ridge"]) for c in selection["candidates"]] == [(8, 0.1),
                                                                             (8, 1.0)]
    assert xylo.firmware_xylo().spec.load_spec(out).training == result["training"]


def test_info_shows_how_the_shipped_xylo_model_was_chosen(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "info", str(SHIPPED_XYLO), "--json"]) == 0
    header = json.loads(capsys.readouterr().out)
    chosen = header["training"]["selection"]["chosen"]
    assert header["n_hidden"] == chosen["n_hidden"]
    assert main(["model", "info", str(SHIPPED_XYLO)]) == 0
    text = capsys.readouterr().out
    assert "validation split of the train data" in text and "chosen" in text


def test_info_on_a_file_that_is_not_a_spec_fails_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.npz"
    bad.write_bytes(b"not a zip")
    assert main(["model", "info", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rig: error: {bad} is not a Xylo network spec file") and \
        err.count("\n") == 1
    assert main(["model", "info", str(tmp_path / "missing.npz")]) == 2
    assert "does not exist" in capsys.readouterr().err
