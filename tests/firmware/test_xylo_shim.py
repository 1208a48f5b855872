"""The Xylo Audio 2 shim (firmware/xylo): the spec file format and the shim over stdio.

A tiny 16-8-4 Rockpool network is mapped and quantised in the test; the shim, run as a child
process through the rig's ProcessTransport and DutClient, must print exactly the scores that
XyloSim gives directly on the same spec and raster, and lap times of T x dt per inference.
"""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from drivers.dut.client import DutClient
from drivers.errors import DutError
from drivers.process import ProcessTransport
from firmware.xylo.rockpool_import import xylo_audio2
from firmware.xylo.shim import Rejected, class_scores, decode_raster, encode_raster
from firmware.xylo.spec import (
    ARRAYS,
    SpecError,
    XyloSpec,
    _checksum,
    build_spec,
    load_spec,
    save_spec,
)
from protocols.dut.codec import LapUs
from tests.requires import needs

pytestmark = needs("rockpool", "xylosim")

REPO = Path(__file__).resolve().parents[2]
SHIM = REPO / "firmware" / "xylo" / "shim.py"
CLASSES = ["airport", "bus", "park", "street_traffic"]
#: Time steps of the test raster; dt is the mapper's 1 ms.
STEPS = 200


@pytest.fixture(scope="module")
def spec() -> XyloSpec:
    xylo_audio2()  # the samna stand-ins before any Rockpool import
    from rockpool.nn.combinators import Sequential
    from rockpool.nn.modules import LIF, Linear

    rng = np.random.default_rng(0)
    net = Sequential(
        Linear((16, 8), weight=rng.normal(0.0, 1.0, (16, 8))), LIF(8),
        Linear((8, 4), weight=rng.normal(0.5, 1.0, (8, 4))), LIF(4),
    )
    return build_spec(net, class_names=CLASSES, model_id="xylo-test01")


@pytest.fixture(scope="module")
def spec_path(spec: XyloSpec, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_spec(spec, tmp_path_factory.mktemp("xylo") / "net.npz")


@pytest.fixture(scope="module")
def raster() -> np.ndarray:
    return np.random.default_rng(1).integers(0, 3, (STEPS, 16))


def direct_scores(spec: XyloSpec, raster: np.ndarray) -> np.ndarray:
    """XyloSim run here, on a fresh simulator, with the shim's normalisation."""
    sim = xylo_audio2().XyloSim.from_specification(**spec.specification())
    output, _, _ = sim(raster)
    assert np.asarray(output).sum() > 0, "test network must spike, else scores prove nothing"
    return class_scores(output)


# -- the spec file ---------------------------------------------------------------------------
def test_round_trip_keeps_everything(spec: XyloSpec, spec_path: Path) -> None:
    loaded = load_spec(spec_path)
    assert (loaded.n_input, loaded.n_hidden, loaded.n_output) == (16, 8, 4)
    assert loaded.class_names == tuple(CLASSES)
    assert loaded.model_id == "xylo-test01"
    assert loaded.dt == spec.dt == 0.001
    assert loaded.aliases == spec.aliases
    for name in ARRAYS:
        assert loaded.arrays[name].dtype == spec.arrays[name].dtype
        np.testing.assert_array_equal(loaded.arrays[name], spec.arrays[name])
    assert loaded.arrays["weights_in"].dtype == np.int8
    assert np.abs(spec.arrays["weights_in"]).max() > 0


def test_file_is_plain_npz_without_pickle(spec_path: Path) -> None:
    with np.load(spec_path, allow_pickle=False) as npz:
        header = json.loads(npz["header"].tobytes())
        assert all(npz[name].dtype != object for name in npz.files)
    assert header["format"] == "neurobench-rig/xylo-spec" and header["version"] == 1
    assert len(header["sha256"]) == 64


def _entries(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def _write(path: Path, entries: dict[str, np.ndarray], *, rehash: bool) -> Path:
    """Save `entries`; with `rehash` the header's checksum is made to match the arrays."""
    if rehash:
        header = json.loads(entries["header"].tobytes())
        arrays = {n: entries[n] for n in ARRAYS if n in entries}
        header["sha256"] = _checksum(arrays, entries["aliases"].tobytes())
        entries = {**entries, "header": np.frombuffer(json.dumps(header).encode(), np.uint8)}
    buffer = io.BytesIO()
    np.savez(buffer, **entries)
    path.write_bytes(buffer.getvalue())
    return path


def test_changed_array_fails_checksum(spec_path: Path, tmp_path: Path) -> None:
    entries = _entries(spec_path)
    weights = entries["weights_out"].copy()
    weights.flat[0] ^= 1
    bad = _write(tmp_path / "bad.npz", {**entries, "weights_out": weights}, rehash=False)
    with pytest.raises(SpecError, match="checksum mismatch"):
        load_spec(bad)


def test_flipped_byte_in_file_is_refused(spec_path: Path, tmp_path: Path) -> None:
    raw = bytearray(spec_path.read_bytes())
    entries = _entries(spec_path)
    # Flip a byte inside the stored weights_in data (found by its unique byte pattern).
    at = bytes(raw).find(entries["weights_in"].tobytes())
    assert at > 0
    raw[at] ^= 0xFF
    bad = tmp_path / "flipped.npz"
    bad.write_bytes(bytes(raw))
    with pytest.raises(SpecError, match=r"flipped\.npz"):
        load_spec(bad)


def test_wrong_shape_is_named(spec_path: Path, tmp_path: Path) -> None:
    entries = _entries(spec_path)
    bad = _write(tmp_path / "shape.npz", {**entries, "threshold": entries["threshold"][:7]},
                 rehash=True)
    with pytest.raises(SpecError, match=r"threshold has shape \(7,\), expected \(8,\)"):
        load_spec(bad)


def test_missing_key_is_named(spec_path: Path, tmp_path: Path) -> None:
    entries = _entries(spec_path)
    del entries["dash_syn_out"]
    bad = _write(tmp_path / "missing.npz", entries, rehash=True)
    with pytest.raises(SpecError, match="lacks dash_syn_out"):
        load_spec(bad)


def test_float_array_and_out_of_range_refused(spec_path: Path, tmp_path: Path) -> None:
    entries = _entries(spec_path)
    floats = _write(tmp_path / "f.npz",
                    {**entries, "bias": entries["bias"].astype(np.float32)}, rehash=True)
    with pytest.raises(SpecError, match="bias has dtype float32, Xylo needs integers"):
        load_spec(floats)
    dash = entries["dash_mem"].copy()
    dash[0] = 16
    wide = _write(tmp_path / "r.npz", {**entries, "dash_mem": dash}, rehash=True)
    with pytest.raises(SpecError, match=r"dash_mem has values in \[.*16\], Xylo takes \[0, 15\]"):
        load_spec(wide)


def test_header_sizes_must_match_arrays(spec_path: Path, tmp_path: Path) -> None:
    entries = _entries(spec_path)
    header = json.loads(entries["header"].tobytes())
    header["n_input"] = 12
    entries["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    with pytest.raises(SpecError, match="header says n_input = 12, the arrays have 16"):
        load_spec(_write(tmp_path / "h.npz", entries, rehash=False))


def test_not_a_spec_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file at all")
    with pytest.raises(SpecError, match=r"not a readable \.npz"):
        load_spec(junk)
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "absent.npz")


# -- the raster format -----------------------------------------------------------------------
def test_raster_round_trip_and_errors(raster: np.ndarray) -> None:
    data = encode_raster(raster)
    assert len(data) == 4 + STEPS * 16
    assert data[:4] == bytes([STEPS & 0xFF, STEPS >> 8, 16, 0])
    np.testing.assert_array_equal(decode_raster(data, 16), raster)
    with pytest.raises(Rejected, match="needs 16"):
        decode_raster(encode_raster(raster[:, :8]), 16)
    with pytest.raises(Rejected, match=f"needs {4 + STEPS * 16}"):
        decode_raster(data[:-1], 16)
    with pytest.raises(Rejected, match="at most 15"):
        decode_raster(encode_raster(np.full((3, 16), 16)), 16)


def test_class_scores_normalise_counts() -> None:
    out = np.array([[1, 0, 0, 1], [1, 0, 0, 0], [1, 0, 0, 0]])
    np.testing.assert_array_equal(class_scores(out), [0.75, 0.0, 0.0, 0.25])
    np.testing.assert_array_equal(class_scores(np.zeros((5, 4))), np.zeros(4))


# -- the shim over stdio ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def client(spec_path: Path) -> Iterator[DutClient]:
    transport = ProcessTransport([sys.executable, str(SHIM), "--spec", str(spec_path)],
                                 name="xylo", cwd=REPO)
    dut = DutClient(transport, name="xylo shim")
    try:
        dut.wait_for_boot(timeout_s=60)
        yield dut
    finally:
        dut.close()


def test_shim_scores_equal_direct_xylosim(
    client: DutClient, spec: XyloSpec, raster: np.ndarray
) -> None:
    assert client.timestamp_mode == "performance"
    # XyloSim's lap counter is its time base, not a measured time: `simtime` says so.
    assert client.negotiate() == frozenset({"bload", "simtime", "rcrc", "lapcrc"})
    info = client.identify()
    assert (info.name, info.model) == ("xylo", "xylo-test01")
    assert client.load(encode_raster(raster)).method == "binary"
    n, warmup = 3, 2
    result = client.infer(n, warmup)
    expected = direct_scores(spec, raster)
    assert [f"{v:.3f}" for v in result.results] == [f"{v:.3f}" for v in expected]
    # Xylo's time base: T steps x 1 ms x N inferences, in µs, exactly.
    assert result.elapsed_us == STEPS * 1000 * n
    # The warmups ran on the same clock before the window opened.
    assert result.lap_us[0] == STEPS * 1000 * warmup
    np.testing.assert_array_equal(client.results(), result.results)
    # lapcrc: the lap lines carried their CRC, and `laps` prints the same two again
    laps = [e for e in client.command("laps") if isinstance(e, LapUs)]
    assert tuple(e.us for e in laps) == result.lap_us and all(e.checked for e in laps)
    assert client.timestamp() == STEPS * 1000 * (warmup + n)


def test_shim_hex_download_and_refusals(client: DutClient, raster: np.ndarray) -> None:
    small = raster[:5]
    client.capabilities = frozenset()  # force the hex path with its read-back
    assert client.load(encode_raster(small)).method == "hex"
    assert client.infer(1, 0).elapsed_us == 5 * 1000
    client.capabilities = None
    client.load(encode_raster(raster[:, :8]))
    with pytest.raises(DutError, match="Raster has 8 channels, the network needs 16"):
        client.infer(1, 0)
    with pytest.raises(DutError, match="Unknown command: qsolve 1 2"):
        client.command("qsolve 1 2")


@pytest.mark.skipif(importlib.util.find_spec("samna") is not None, reason="samna is installed")
def test_hdk_without_samna_fails_clearly(spec_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SHIM), "--spec", str(spec_path), "--hdk"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 3
    assert "samna" in done.stderr and "installer stub" in done.stderr
    assert "m-init-done" not in done.stdout


def test_bad_spec_stops_before_banner(tmp_path: Path) -> None:
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"junk")
    done = subprocess.run(
        [sys.executable, str(SHIM), "--spec", str(junk)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert "not a readable .npz" in done.stderr
    assert done.stdout == ""


def test_idle_power_under_xylosim_is_refused_not_zero(client: DutClient) -> None:
    with pytest.raises(DutError, match="idle power needs an HDK"):
        client.command("idle 100", timeout_s=30.0)
    assert "power" not in client.negotiate()  # no rails to offer
