"""`rig model export --format nir`, through the CLI's own entry point."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.requires import needs

pytest.importorskip("nir")  # imported below, at module level

import nir

from rig.cli import main

pytestmark = needs("rockpool", "xylosim")

REPO = Path(__file__).resolve().parents[2]
SHIPPED_XYLO = REPO / "firmware" / "xylo" / "models" / "asc_synthetic.npz"


def test_export_writes_a_nir_graph_identical_to_the_spec(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "graphs" / "asc.nir"
    assert main(["model", "export", "--format", "nir", str(SHIPPED_XYLO), "-o", str(out),
                 "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["file"] == str(out) and record["format"] == "nir"
    assert record["shape"] == [16, 1000, 4] and record["dt"] == 0.01
    assert record["checked"] is True and record["identical"] is True
    assert record["differences"] == []
    graph = nir.read(out)  # an ordinary NIR file
    assert graph.metadata["model_id"] == record["model_id"] == "xylo-asc-synth01"
    assert graph.nodes["w_in"].weight.shape == (1000, 16)
    assert out.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"


def test_export_default_output_name_and_text_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "net.npz"
    model.write_bytes(SHIPPED_XYLO.read_bytes())
    assert main(["model", "export", str(model), "--no-check"]) == 0
    text = capsys.readouterr().out
    assert (tmp_path / "net.nir").is_file()
    assert "NIR graph of xylo-asc-synth01, 16-1000-4" in text
    assert "not read back (--no-check)" in text


def test_export_refuses_what_it_cannot_write(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "export", str(tmp_path / "missing.npz")]) == 2
    assert "missing.npz does not exist" in capsys.readouterr().err
    graph = tmp_path / "g.nir"
    assert main(["model", "export", str(SHIPPED_XYLO), "-o", str(graph), "--no-check"]) == 0
    capsys.readouterr()
    assert main(["model", "export", str(graph), "-o", str(tmp_path / "h.nir")]) == 2
    assert "is already a NIR graph" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["model", "export", "--format", "onnx", str(SHIPPED_XYLO)])
    assert info.value.code == 2 and "invalid choice: 'onnx'" in capsys.readouterr().err


def test_export_refuses_a_spec_using_the_second_synapse(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from firmware.xylo.spec import XyloSpec, load_spec, save_spec

    spec = load_spec(SHIPPED_XYLO)
    arrays = dict(spec.arrays)
    for name in ("weights_in", "weights_rec"):
        arrays[name] = np.concatenate([arrays[name], arrays[name]], axis=2)
    two = save_spec(XyloSpec(arrays, spec.aliases, spec.dt, spec.class_names, spec.model_id),
                    tmp_path / "syn2.npz")
    assert main(["model", "export", str(two), "-o", str(tmp_path / "syn2.nir")]) == 2
    err = capsys.readouterr().err
    assert "second hidden synapse" in err and "no equivalent" in err
    assert not (tmp_path / "syn2.nir").exists()


def test_report_describes_a_bench_running_the_nir_graph(tmp_path: Path) -> None:
    from rig.report.models import describe_asc_model

    graph = tmp_path / "asc.nir"
    assert main(["model", "export", str(SHIPPED_XYLO), "-o", str(graph), "--no-check",
                 "--json"]) == 0
    manifest = {"bench": {"dut": {"kind": "xylo", "spec": str(graph)}},
                "instruments": {"dut": {"model": "xylo-asc-synth01"}}}
    rows = describe_asc_model(manifest)
    npz_rows = describe_asc_model({**manifest, "bench": {"dut": {"kind": "xylo",
                                                                 "spec": str(SHIPPED_XYLO)}}})
    assert rows["Architecture"].startswith(
        "16 inputs -> CubaLIF layers 1000 (hidden.lif), 4 (output_lif); dt 10 ms")
    assert rows["Classes"] == npz_rows["Classes"] == "airport, street_traffic, bus, park"
    # The same synaptic weights, counted from the graph's Linear nodes.
    assert rows["Parameters"].split(" of ")[0] == npz_rows["Parameters"].split(" of ")[0]
    assert rows["Training"] == npz_rows["Training"]  # the record travels in the metadata
    graph.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(32))
    assert "NIR graph unreadable" in describe_asc_model(manifest)["Architecture"]


def test_model_info_reads_an_exported_graph_like_its_spec(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = tmp_path / "asc.nir"
    assert main(["model", "export", str(SHIPPED_XYLO), "-o", str(graph), "--no-check"]) == 0
    capsys.readouterr()
    assert main(["model", "info", str(graph), "--json"]) == 0
    header = json.loads(capsys.readouterr().out)
    assert main(["model", "info", str(SHIPPED_XYLO), "--json"]) == 0
    spec_header = json.loads(capsys.readouterr().out)
    assert header["format"] == "neurobench-rig/xylo-nir"
    for key in ("model_id", "device", "n_input", "n_hidden", "n_output", "dt", "class_names",
                "training"):
        assert header[key] == spec_header[key], key
    junk = tmp_path / "junk.nir"
    junk.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(32))
    assert main(["model", "info", str(junk)]) == 2
    assert "is not a readable NIR graph" in capsys.readouterr().err


def test_export_says_which_arrays_a_weight_shift_changes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A weight shift is folded into the weights (x2); re-quantising brings the largest output
    weight back to 127 and halves the output thresholds, so those arrays differ."""
    from firmware.xylo.spec import XyloSpec, load_spec, save_spec

    spec = load_spec(SHIPPED_XYLO)
    arrays = dict(spec.arrays)
    arrays["weight_shift_out"] = np.array(1, np.uint8)
    arrays["threshold_out"] = np.array([100, 150, 201, 255], np.int16)
    shifted = save_spec(XyloSpec(arrays, spec.aliases, spec.dt, spec.class_names,
                                 spec.model_id), tmp_path / "shifted.npz")
    assert main(["model", "export", str(shifted), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["identical"] is False
    assert record["differences"] == ["threshold_out", "weight_shift_out"]
    back = nir.read(tmp_path / "shifted.nir")
    np.testing.assert_array_equal(back.nodes["w_out"].weight, 2.0 * spec.arrays["weights_out"].T)


@pytest.mark.slow
def test_a_bench_running_the_graph_scores_every_sample_like_the_spec(tmp_path: Path) -> None:
    """`rig measure asc` twice on the same 4 SYNTHETIC scenes: [dut] spec = the shipped .npz,
    then the .nir graph exported from it; every sample's scores and prediction are the same."""
    import os
    import subprocess
    import sys

    import pyarrow.parquet as pq

    graph = tmp_path / "asc.nir"
    assert main(["model", "export", str(SHIPPED_XYLO), "-o", str(graph), "--no-check",
                 "--json"]) == 0
    text = (REPO / "benches" / "xylo.toml").read_text().replace(
        "samples_per_class = 10", "samples_per_class = 1").replace(
        "runs = 5", "runs = 1").replace("min_run_s = 10.0", "min_run_s = 1.0")
    assert 'spec = "../firmware/xylo/models/asc_synthetic.npz"' in text
    env = dict(os.environ)  # RIG_CACHE: the session's (conftest)
    samples = {}
    for name, spec in (("npz", SHIPPED_XYLO), ("nir", graph)):
        bench = tmp_path / f"xylo-{name}.toml"
        bench.write_text(text.replace('spec = "../firmware/xylo/models/asc_synthetic.npz"',
                                      f'spec = "{spec}"'))
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "rig"), "measure", "asc", "--bench", str(bench),
             "--runs-dir", str(tmp_path / "runs"), "--json"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
            stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr
        run = Path(json.loads(proc.stdout)["run"])
        samples[name] = [(r["index"], r["label"], r["predicted"], r["scores"])
                         for r in pq.read_table(run / "results.parquet").to_pylist()
                         if r["kind"] == "sample"]
    assert len(samples["npz"]) == 4
    assert samples["nir"] == samples["npz"]
