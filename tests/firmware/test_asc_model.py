"""The DUT's ASC model: the C code (firmware/dut/core/asc_model.c) and its Python reference
(firmware/dut/asc_model.py) agree bit for bit, the committed weights are what
`rig model train c-shim` (rig/model/c_shim.py) makes, and the model is good (not perfect) on
held-out synthetic scenes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from firmware.dut import asc_model as asc
from firmware.dut.asc_model import LinearAscModel
from rig.datasets.synthetic import CLASSES, SAMPLES, make_split
from rig.model import c_shim

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "firmware" / "dut" / "core"
HARNESS = Path(__file__).with_name("asc_model_harness.c")
CC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(CC is None, reason="gcc not found: the C model cannot be built")
CFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-O2"]


@pytest.fixture(scope="module")
def model() -> LinearAscModel:
    return LinearAscModel.load()


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    """The harness and the model, compiled warning-free (-Werror) into a temporary folder."""
    if CC is None:
        pytest.skip("gcc not found: the C model cannot be built")
    exe = tmp_path_factory.mktemp("asc") / "asc_model_harness"
    subprocess.run([CC, *CFLAGS, f"-I{CORE}", str(HARNESS), str(CORE / "asc_model.c"),
                    "-lm", "-o", str(exe)], check=True, capture_output=True, text=True)
    return exe


def run_c(exe: Path, audio: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, logits and scores the C model gives for int16 inputs (n, SAMPLES)."""
    data = np.ascontiguousarray(audio, dtype="<i2").tobytes()
    out = subprocess.run([str(exe)], input=data, capture_output=True, check=True, timeout=60)
    rows: dict[str, list[list[float]]] = {"F": [], "L": [], "S": []}
    for line in out.stdout.decode().splitlines():
        tag, *values = line.split()
        rows[tag].append([float(v) for v in values])
    features, logits = (np.array(rows[k], dtype=np.int64) for k in "FL")
    return features, logits, np.array(rows["S"])


def edge_cases() -> np.ndarray:
    """Silence, full-scale extremes, tones and noise at every level (n, SAMPLES) int16."""
    rng = np.random.default_rng(7)
    t = np.arange(SAMPLES) / 8000.0
    cases = [
        np.zeros(SAMPLES),
        np.full(SAMPLES, 32767), np.full(SAMPLES, -32768),
        np.where(np.arange(SAMPLES) % 2 == 0, 32767, -32768),  # full-scale Nyquist
        32767 * np.sin(2 * np.pi * 1000 * t),
        np.clip(40000 * np.sin(2 * np.pi * 93.75 * t), -32768, 32767),  # clipped, on a bin
        rng.integers(-32768, 32768, SAMPLES),  # full-scale white noise
        rng.integers(-3, 4, SAMPLES),  # near silence
        rng.normal(0, 300, SAMPLES),
    ]
    return np.clip(np.rint(np.stack(cases)), -32768, 32767).astype(np.int16)


def random_inputs(n: int, seed: int) -> np.ndarray:
    """Random int16 audio at random levels, white or integrated (red)."""
    rng = np.random.default_rng(seed)
    level = 10.0 ** rng.uniform(0, 4.5, (n, 1))
    white = rng.normal(0, 1, (n, SAMPLES))
    red = np.cumsum(white, axis=1)
    red -= red.mean(axis=1, keepdims=True)
    x = np.where(rng.random((n, 1)) < 0.5, white, red / red.std(axis=1, keepdims=True))
    return np.clip(np.rint(level * x), -32768, 32767).astype(np.int16)


# -- C and Python agree -------------------------------------------------------------------------
@needs_gcc
def test_c_and_python_agree_bit_for_bit(harness: Path, model: LinearAscModel) -> None:
    scenes = np.concatenate([make_split(10, 3, "test").inputs, make_split(5, 4, "train").inputs])
    audio = np.concatenate([scenes, edge_cases(), random_inputs(40, 11)])
    c_features, c_logits, c_scores = run_c(harness, audio)
    assert c_features.shape == (len(audio), asc.NBANDS)
    np.testing.assert_array_equal(c_features, asc.features_batch(audio, model.tables))
    py_logits = np.stack([model.logits(x.tobytes()) for x in audio])
    np.testing.assert_array_equal(c_logits, py_logits)
    py_scores = np.stack([model(x.tobytes()) for x in audio])
    np.testing.assert_allclose(c_scores, py_scores, rtol=0, atol=1e-5)
    # Not a degenerate agreement: inputs give many different features and every class wins.
    assert len(np.unique(c_features, axis=0)) > len(audio) - 5
    assert set(np.argmax(c_logits, axis=1)) == set(range(len(CLASSES)))


@needs_gcc
def test_wrong_length_is_refused_and_leaves_scores_untouched(harness: Path,
                                                             model: LinearAscModel) -> None:
    out = subprocess.run([str(harness), "--lengths"], capture_output=True, text=True,
                         check=True, timeout=10).stdout.splitlines()
    assert out == [f"len {n} rc -1 untouched 1" for n in (0, 1, 15999, 16001)]
    with pytest.raises(ValueError, match="16000 bytes"):
        model(bytes(15999))


@needs_gcc
def test_c_time_per_inference_is_printed(harness: Path) -> None:
    """A figure for the report (never asserted: no test depends on speed)."""
    data = make_split(1, 0, "test").inputs[0].tobytes()
    out = subprocess.run([str(harness), "--bench", "2000"], input=data, capture_output=True,
                         check=True, timeout=120)
    line = out.stdout.decode().strip()
    assert line.startswith("ns_per_inference ")
    print(f"C asc_model_infer: {line}")


# -- the fixed-point pipeline computes what it claims -------------------------------------------
def test_fixed_point_fft_matches_the_float_fft() -> None:
    """Output = DFT / 256 of the windowed frame, to within the rounding of 8 stages."""
    tables = asc.make_tables()
    rng = np.random.default_rng(1)
    x = rng.integers(-32768, 32768, (4, asc.NFFT)) * tables["window"].astype(np.int64)
    x >>= asc.WINDOW_SHIFT
    re, im = asc._fft(x[:, tables["bitrev"]], tables["twiddle_cos"], tables["twiddle_sin"])
    ref = np.fft.fft(x, axis=1) / asc.NFFT
    # Rounding and flooring cost about one LSB per stage; the Q15 twiddles have gain
    # 32767/32768, which costs at most 8 x 2^-15 of the largest value.
    bound = 16 + 8 * 2.0**-15 * np.abs(ref).max()
    assert np.abs(re - ref.real).max() < bound and np.abs(im - ref.imag).max() < bound
    assert np.abs(ref).max() > 2**18  # full-scale noise: a real test of the bound


def test_log2_is_exact_at_powers_of_two_and_close_between() -> None:
    table = asc.make_tables()["log2_frac"]
    k = np.arange(63)
    np.testing.assert_array_equal(asc._log2_q(np.int64(1) << k, table), k * 64)
    v = np.array([3, 5, 1000, 123456789, 2**62 + 2**61], dtype=np.int64)
    assert np.abs(asc._log2_q(v, table) / 64 - np.log2(v.astype(float))).max() < 1 / 64
    assert asc._log2_q(np.array([0]), table)[0] == 0


def test_features_are_mean_log_mel_energies(model: LinearAscModel) -> None:
    """Against the same pipeline in float64: within 1/16 octave where the band is not tiny."""
    audio = make_split(3, 5, "test").inputs
    t = model.tables
    frames = audio[:, :asc.NFRAMES * asc.NFFT].reshape(len(audio), asc.NFRAMES, asc.NFFT)
    spectrum = np.fft.rfft(frames * (t["window"] / 2.0**asc.WINDOW_SHIFT), axis=2) / asc.NFFT
    power = np.abs(spectrum) ** 2
    bank = np.zeros((asc.NBANDS, asc.NBINS))
    for b in range(asc.NBANDS):  # a loop over bands, building the dense filterbank
        o, c, s = t["mel_offset"][b], t["mel_count"][b], t["mel_start"][b]
        bank[b, s:s + c] = t["mel_weight"][o:o + c]
    energy = power @ bank.T
    expected = 64 * np.log2(np.maximum(energy, 1.0)).mean(axis=1)
    got = asc.features_batch(audio, t)
    loud = energy.min(axis=1) > 2**24
    assert loud.mean() > 0.5
    assert np.abs(got - expected)[loud].max() < 4


def test_a_tone_lights_its_own_mel_bands_with_the_closed_form_energy(model: LinearAscModel
                                                                      ) -> None:
    """A 1 kHz tone of amplitude A sits on bin 32. With the Hann window and the 2^8 gain the
    pipeline keeps, |X[32]| = A 2^8 / 4 and |X[31]| = |X[33]| = A 2^8 / 8 (DFT / 256)."""
    amplitude = 8000
    t = np.arange(SAMPLES) / 8000.0
    tone = np.rint(amplitude * np.sin(2 * np.pi * 1000 * t)).astype("<i2")
    f = model.features(tone.tobytes())
    power = np.zeros(asc.NBINS)
    power[32] = (amplitude * 2**8 / 4) ** 2
    power[[31, 33]] = (amplitude * 2**8 / 8) ** 2
    tb = model.tables
    lit = []
    for b in range(asc.NBANDS):  # a loop over bands
        o, c, s = tb["mel_offset"][b], tb["mel_count"][b], tb["mel_start"][b]
        energy = float(tb["mel_weight"][o:o + c] @ power[s:s + c])
        if energy > 0:
            lit.append(b)
            assert abs(f[b] - 64 * np.log2(energy)) <= 2, b
    assert len(lit) >= 2 and int(np.argmax(f)) in lit
    # Everything else is Hann side lobes and rounding: far below (> 30 dB).
    assert np.delete(f, lit).max() < f[lit].min() - 64 * 10


# -- committed weights, training -----------------------------------------------------------------
def parse_header(text: str) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """#defines and `static const T asc_<name>[..] = {..};` arrays of the generated header."""
    defines = dict(re.findall(r"^#define (ASC_\w+) (\S+)$", text, re.M))
    arrays = {}
    pattern = r"static const \w+ asc_(\w+)((?:\[\d+\])+) = \{(.*?)\};"
    for name, dims, body in re.findall(pattern, text, re.S):
        shape = tuple(int(d) for d in re.findall(r"\d+", dims))
        arrays[name] = np.array(re.findall(r"-?\d+", body), dtype=np.int64).reshape(shape)
    return defines, arrays


def test_header_and_npz_carry_the_same_numbers(model: LinearAscModel) -> None:
    text = (CORE / "asc_model_weights.h").read_text()
    assert "generated by `rig model train c-shim` (rig/model/c_shim.py), do not edit" in text
    defines, arrays = parse_header(text)
    expected = model.arrays()
    scale = expected.pop("logit_scale")
    assert set(arrays) == set(expected)
    for name, array in expected.items():
        np.testing.assert_array_equal(arrays[name], array, err_msg=name)
    assert np.float32(defines["ASC_LOGIT_SCALE"].rstrip("f")) == np.float32(scale)
    assert float(np.float32(scale)) == float(scale)  # C's float is exactly Python's number
    assert int(defines["ASC_NBANDS"]) == asc.NBANDS and int(defines["ASC_NFFT"]) == asc.NFFT
    assert int(defines["ASC_MEL_TAPS"]) == len(expected["mel_weight"])


def test_training_is_deterministic() -> None:
    a = c_shim.train(samples_per_class=15, seed=3)
    b = c_shim.train(samples_per_class=15, seed=3)
    assert c_shim.npz_bytes(a) == c_shim.npz_bytes(b)
    assert c_shim.header_text(a) == c_shim.header_text(b)
    np.testing.assert_array_equal(a.weights, b.weights)
    # ... and the weights depend on the data, not only on the recipe.
    assert not np.array_equal(a.weights, c_shim.train(samples_per_class=15, seed=4).weights)


def test_committed_files_are_what_the_trainer_writes(model: LinearAscModel) -> None:
    fresh = c_shim.train(samples_per_class=c_shim.TRAIN_PER_CLASS, seed=c_shim.SEED)
    for name in asc.TABLES:
        np.testing.assert_array_equal(fresh.tables[name], model.tables[name], err_msg=name)
    # Another machine's float rounding may move a weight by an LSB; stale weights move by far more.
    assert np.abs(fresh.weights.astype(int) - model.weights).max() <= 2
    assert np.abs(fresh.bias.astype(np.int64) - model.bias).max() <= 2 * 4095 * asc.NBANDS
    assert fresh.logit_scale == pytest.approx(model.logit_scale, rel=1e-4)
    assert LinearAscModel.load(asc.WEIGHTS_PATH).arrays().keys() == fresh.arrays().keys()


def test_npz_round_trips_through_the_trainers_writer(tmp_path: Path,
                                                     model: LinearAscModel) -> None:
    path = tmp_path / "w.npz"
    path.write_bytes(c_shim.npz_bytes(model))
    again = LinearAscModel.load(path)
    for name, array in model.arrays().items():
        np.testing.assert_array_equal(again.arrays()[name], array, err_msg=name)


# -- the model is a real one ---------------------------------------------------------------------
def test_accuracy_on_held_out_scenes_is_well_above_chance(model: LinearAscModel) -> None:
    test = make_split(50, 0, "test")
    predicted = model.predict_batch(test.inputs)
    accuracy = float(np.mean(predicted == test.labels))
    assert accuracy >= 0.6, accuracy
    # Every scene is recognised, not just the easy ones.
    for c in range(len(CLASSES)):
        assert np.mean(predicted[test.labels == c] == c) > 0.4, CLASSES[c]
    # The batch path is the per-input path the DUT uses.
    assert [model.predict(x.tobytes()) for x in test.inputs[:12]] == list(predicted[:12])


def test_scores_are_a_distribution_and_follow_the_logits(model: LinearAscModel) -> None:
    x = make_split(1, 1, "test").inputs[0].tobytes()
    scores, logits = model(x), model.logits(x)
    assert scores.dtype == np.float64 and scores.shape == (len(CLASSES),)
    assert scores.sum() == pytest.approx(1.0)
    np.testing.assert_array_equal(np.argsort(scores), np.argsort(logits))
    assert model.model_id == "asc01" and model.input_size == 16000


def test_the_reference_sits_beside_the_c_code_and_needs_only_protocols() -> None:
    """firmware/ imports nothing of ours but protocols/: loading the reference (and its weights)
    in a fresh interpreter pulls in no rig, driver, GUI or virtual-bench module."""
    code = ("import sys; from firmware.dut.asc_model import LinearAscModel; LinearAscModel.load(); "
            "print(sorted({n.split('.')[0] for n in sys.modules} "
            "& {'rig', 'drivers', 'gui', 'virtual_bench', 'protocols'}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['protocols']"
    assert asc.WEIGHTS_PATH == REPO / "firmware" / "dut" / "asc_model_weights.npz"
    assert c_shim.HEADER_PATH.parent.parent == asc.WEIGHTS_PATH.parent  # dut/core/ and dut/
