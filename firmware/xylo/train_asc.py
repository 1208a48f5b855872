"""Train the Xylo Audio 2 acoustic-scene model on the SYNTHETIC DCASE-layout set and save its spec.

    .venv/bin/python firmware/xylo/train_asc.py --out firmware/xylo/models/asc_synthetic.npz

Method (a reservoir, fast and honest): a fixed random recurrent LIF layer of `n_hidden` neurons
reads the AFE's 16-channel spike raster; its thresholds are set from the training data so each
neuron fires for part of the samples. The quantised hidden layer is run in XyloSim, and the
output weights are fitted by ridge regression from each hidden neuron's spike count over the
one-second input to the one-hot scene labels. The output LIF neurons barely leak over a second
(dash 10), so each one's spike count follows its linear readout score, and the shim's class
score (output spike count / all output spikes) ranks classes like the readout does. Accuracy is
measured with XyloSim on the quantised spec the shim loads. Deterministic given the seeds.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    # Run as a script: make `firmware.xylo` importable (the repository root).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from firmware.xylo.rockpool_import import xylo_audio2
from firmware.xylo.shim import class_scores
from firmware.xylo.spec import XyloSpec, build_spec, save_spec
from rig.datasets import afe, dcase

MODEL_ID = "xylo-asc-synth01"
CLASS_NAMES = dcase.SCENES
#: One network step per AFE raster period (10 ms), so Xylo's time base is the audio's.
DT_S = afe.AfeConfig().raster_period_s
#: Audio rate the rig's benches load the synthetic set at (the generator's own rate).
RATE_HZ = 8000
#: Hidden-layer time constants in steps: dash = log2(tau / dt) = 1 (synapse) and 3 (membrane).
HIDDEN_TAU_SYN_STEPS, HIDDEN_TAU_MEM_STEPS = 2.0, 8.0
#: Output neurons integrate (almost) without leak over a second: dash_mem_out = 10.
OUTPUT_TAU_MEM_STEPS = 2.0**10
#: Output synapses: dash 1. (dash 0 would clear each step's input before the membrane sees it;
#: with dash 1 one input spike adds about its weight to the membrane in total.)
OUTPUT_TAU_SYN_STEPS = 2.0
#: Output spikes a typical winning score should produce (sets the output threshold).
WINNER_SPIKES = 24
#: Recurrent weights: at most this fraction of a neuron's largest input weight.
REC_GAIN = 0.1
#: Each hidden neuron's threshold sits at a random quantile in [Q_LOW, Q_HIGH] of its drive.
Q_LOW, Q_HIGH = 0.3, 0.9
#: Smallest threshold level, as a fraction of a neuron's largest input weight per step.
LEVEL_FLOOR = 0.25
#: Slices per AFE cache file: fixed so the rasters do not depend on the worker count.
AFE_CHUNK = 40


@dataclass(frozen=True)
class Hidden:
    """The fixed random recurrent layer: weights (float, before quantisation) and thresholds."""

    w_in: np.ndarray
    w_rec: np.ndarray
    threshold: np.ndarray


# -- data ----------------------------------------------------------------------------------------
def _afe_chunk(args: tuple[np.ndarray, int, str, str]) -> np.ndarray:
    audio, rate_hz, cache_dir, name = args
    return afe.cached_afe(audio, rate_hz, Path(cache_dir), name).rasters


def afe_rasters(audio: np.ndarray, rate_hz: int, cache_dir: Path, name: str,
                workers: int = 2) -> np.ndarray:
    """AFE rasters (n, T, 16) of int16 `audio`, simulated in fixed chunks on `workers`
    processes (each chunk cached as `<name>-<k>` under `cache_dir`)."""
    jobs = [(audio[i:i + AFE_CHUNK], rate_hz, str(cache_dir), f"{name}-{i // AFE_CHUNK:03d}")
            for i in range(0, len(audio), AFE_CHUNK)]
    if workers <= 1 or len(jobs) <= 1:
        parts = [_afe_chunk(job) for job in jobs]
    else:
        # spawn: jax (under Rockpool) must not be forked
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            parts = list(pool.map(_afe_chunk, jobs))
    return np.concatenate(parts)


def load_data(work_dir: Path, train_clips: int, test_clips: int, data_seed: int,
              workers: int = 2) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{'train', 'test'}: (rasters (n, T, 16) uint8, labels (n,)) of a synthetic set made (once)
    under `work_dir` with `train_clips` / `test_clips` ten-second clips per scene."""
    root = work_dir / f"{dcase.SYNTHETIC_DIRNAME}-seed{data_seed}-{train_clips}x{test_clips}"
    if not (root / "README.md").is_file():  # written last by make_synthetic_dcase
        dcase.make_synthetic_dcase(root, train_clips, data_seed, test_clips)
    data = {}
    for split in ("train", "test"):
        s = dcase.load_split(root, split, RATE_HZ)
        rasters = afe_rasters(s.audio, RATE_HZ, work_dir / "afe", f"{root.name}-{split}",
                              workers)
        data[split] = (rasters, s.labels)
    return data


# -- network -------------------------------------------------------------------------------------
def _rockpool_net(hidden: Hidden, w_out: np.ndarray, threshold_out: np.ndarray) -> Any:
    xylo_audio2()  # the samna stand-ins before any Rockpool import
    from rockpool.nn.combinators import Sequential
    from rockpool.nn.modules import LIF, Linear

    n_in, n_hid = hidden.w_in.shape
    n_out = w_out.shape[1]
    return Sequential(
        Linear((n_in, n_hid), weight=hidden.w_in),
        LIF(n_hid, tau_syn=np.full(n_hid, HIDDEN_TAU_SYN_STEPS * DT_S),
            tau_mem=np.full(n_hid, HIDDEN_TAU_MEM_STEPS * DT_S), threshold=hidden.threshold,
            has_rec=True, w_rec=hidden.w_rec, dt=DT_S),
        Linear((n_hid, n_out), weight=w_out),
        LIF(n_out, tau_syn=np.full(n_out, OUTPUT_TAU_SYN_STEPS * DT_S),
            tau_mem=np.full(n_out, OUTPUT_TAU_MEM_STEPS * DT_S), threshold=threshold_out,
            dt=DT_S),
    )


def make_spec(hidden: Hidden, w_out: np.ndarray, threshold_out: np.ndarray) -> XyloSpec:
    """Map and quantise the network for Xylo Audio 2 (build_spec: mapper + channel_quantize)."""
    net = _rockpool_net(hidden, w_out, threshold_out)
    return build_spec(net, class_names=CLASS_NAMES, model_id=MODEL_ID, dt=DT_S)


def init_hidden(rasters: np.ndarray, n_hidden: int, seed: int, rec_gain: float = REC_GAIN,
                rec_density: float = 0.1) -> Hidden:
    """A random recurrent layer whose neurons each fire for part of the training samples.

    Input weights are random spectral contrasts; a neuron's threshold is its steady-state
    membrane at a random quantile (Q_LOW to Q_HIGH) of its mean drive over the training samples, so
    the layer codes where each sample's spectrum lies, not only how loud it is."""
    rng = np.random.default_rng(seed)
    n_in = rasters.shape[2]
    w_in = rng.normal(0.0, 1.0, (n_in, n_hidden))
    drive = rasters.mean(axis=1) @ w_in  # (samples, hidden): mean input current per step
    q = rng.uniform(Q_LOW, Q_HIGH, n_hidden)
    level = np.quantile(drive, q, axis=0).diagonal()
    flip = level <= 0.0  # mostly inhibited neurons would be silent: mirror their weights
    w_in[:, flip] *= -1.0
    level = np.where(flip, np.quantile(-drive, q, axis=0).diagonal(), level)
    # A floor: a threshold near zero makes a neuron fire at Xylo's maximum on any input, and
    # such huge counts would squeeze the other neurons' readout weights to zero in int8.
    level = np.maximum(level, LEVEL_FLOOR * np.abs(w_in).max(axis=0))
    # Steady-state membrane / drive per step in XyloSim (measured: about tau_syn x tau_mem / 2).
    gain = HIDDEN_TAU_SYN_STEPS * HIDDEN_TAU_MEM_STEPS / 2
    threshold = gain * level
    # Sparse weak recurrence, scaled per neuron to a fraction of its input weights.
    mask = rng.random((n_hidden, n_hidden)) < rec_density
    np.fill_diagonal(mask, False)
    w_rec = rng.normal(0.0, 1.0, (n_hidden, n_hidden)) * mask
    w_rec *= rec_gain * np.abs(w_in).max(axis=0) / np.maximum(np.abs(w_rec).max(axis=0), 1e-12)
    return Hidden(w_in=w_in, w_rec=w_rec, threshold=threshold)


def run_xylo(spec: XyloSpec, rasters: np.ndarray, record: bool = False
             ) -> tuple[np.ndarray, np.ndarray | None]:
    """XyloSim on each raster from a reset state: output spike counts (n, n_out) and, with
    `record`, hidden spike counts (n, n_hidden)."""
    sim = xylo_audio2().XyloSim.from_specification(**spec.specification())
    out = np.zeros((len(rasters), spec.n_output), np.int64)
    hid = np.zeros((len(rasters), spec.n_hidden), np.int64) if record else None
    for k, raster in enumerate(rasters):  # one simulation per input, vectorised over time
        sim.reset_state()
        output, _, rec = sim(np.asarray(raster, np.int64), record=record)
        out[k] = np.asarray(output).sum(axis=0)
        if hid is not None:
            hid[k] = np.asarray(rec["Spikes"]).sum(axis=0)
    return out, hid


def fit_readout(counts: np.ndarray, labels: np.ndarray, n_classes: int, ridge: float
                ) -> tuple[np.ndarray, np.ndarray]:
    """Ridge regression of one-hot labels on hidden spike counts (no intercept: the chip's
    output neurons see only spikes): weights (hidden, classes) and output thresholds."""
    x = counts.astype(np.float64)
    y = np.eye(n_classes)[labels]
    scale = np.maximum(x.std(axis=0), 1.0)  # ridge on comparable features, then undo
    xs = x / scale
    gram = xs.T @ xs + ridge * len(xs) * np.eye(xs.shape[1])
    w = np.linalg.solve(gram, xs.T @ y) / scale[:, None]
    scores = x @ w
    winner = np.median(scores[np.arange(len(labels)), labels])
    threshold_out = np.full(n_classes, max(winner, 1e-6) / WINNER_SPIKES)
    return w, threshold_out


def train(rasters: np.ndarray, labels: np.ndarray, *, n_hidden: int, seed: int,
          ridge: float = 0.01) -> XyloSpec:
    """The quantised spec: random hidden layer, ridge readout fitted on XyloSim's hidden spikes."""
    n_classes = len(CLASS_NAMES)
    hidden = init_hidden(rasters, n_hidden, seed)
    probe = make_spec(hidden, np.ones((n_hidden, n_classes)), np.ones(n_classes))
    _, counts = run_xylo(probe, rasters, record=True)
    assert counts is not None
    w_out, threshold_out = fit_readout(counts, labels, n_classes, ridge)
    return make_spec(hidden, w_out, threshold_out)


def accuracy(spec: XyloSpec, rasters: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of inputs whose highest shim class score (XyloSim) is the label."""
    out, _ = run_xylo(spec, rasters)
    scores = np.stack([class_scores(o[None, :]) for o in out])
    return float(np.mean(scores.argmax(axis=1) == labels))


# -- command line --------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """Make the data (cached), train, report accuracy and wall time, save the spec."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="spec file to write (.npz)")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="synthetic data and AFE cache (default: the rig's cache folder)")
    p.add_argument("--train-clips", type=int, default=16, help="10 s train clips per scene")
    p.add_argument("--test-clips", type=int, default=4, help="10 s test clips per scene")
    p.add_argument("--data-seed", type=int, default=1,
                   help="synthetic data seed (the rig's own test set uses seed 0)")
    p.add_argument("--seed", type=int, default=0, help="network initialisation seed")
    p.add_argument("--hidden", type=int, default=512, help="hidden neurons (<= 1000)")
    p.add_argument("--ridge", type=float, default=0.01, help="ridge regularisation")
    p.add_argument("--workers", type=int, default=2, help="AFE simulation processes")
    args = p.parse_args(argv)
    if args.work_dir is None:
        from rig.datasets.testsets import cache_root
        args.work_dir = cache_root() / "xylo-train"
    t0 = time.perf_counter()
    data = load_data(args.work_dir, args.train_clips, args.test_clips, args.data_seed,
                     args.workers)
    t_data = time.perf_counter() - t0
    (x_train, y_train), (x_test, y_test) = data["train"], data["test"]
    spec = train(x_train, y_train, n_hidden=args.hidden, seed=args.seed, ridge=args.ridge)
    t_train = time.perf_counter() - t0 - t_data
    acc_train = accuracy(spec, x_train, y_train)
    acc_test = accuracy(spec, x_test, y_test)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_spec(spec, args.out)
    print(f"data: {len(y_train)} train / {len(y_test)} test one-second slices (SYNTHETIC, "
          f"seed {args.data_seed}), AFE + loading {t_data:.1f} s")
    print(f"network: {spec.n_input}-{spec.n_hidden}-{spec.n_output}, dt {spec.dt} s; "
          f"training {t_train:.1f} s")
    print(f"XyloSim accuracy on the quantised spec: train {acc_train:.3f}, "
          f"test {acc_test:.3f} (chance 0.25)")
    print(f"wall time {time.perf_counter() - t0:.1f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
