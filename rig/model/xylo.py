"""Train the Xylo Audio 2 acoustic-scene network and save it as the Xylo shim's spec file.

    rig model train xylo            # the shipped firmware/xylo/models/asc_synthetic.npz

Method (a reservoir, fast and honest): a fixed random recurrent LIF layer of `n_hidden` neurons
reads the AFE's 16-channel spike raster; its thresholds are set from the training data so each
neuron fires for part of the samples. The quantised hidden layer is run in XyloSim, and the
output weights are fitted by ridge regression from each hidden neuron's spike count over the
one-second input to the one-hot scene labels. The output LIF neurons barely leak over a second
(dash 10), so each one's spike count follows its linear readout score, and the shim's class
score (output spike count / all output spikes) ranks classes like the readout does.

Settings (hidden size, ridge) are chosen on a validation split of the TRAIN data only
(`rig.model.split`: seeded, stratified by scene, whole clips), as NeuroBench ASC asks; the
chosen settings are then fitted on the whole train split. The spec file records the split,
every candidate's validation accuracy and the choice (header `training`). The test split is
read only after the spec is written, to report its accuracy. Accuracy is always XyloSim on the
quantised spec the shim loads. Deterministic given the seeds.

The spec format, the Rockpool import and the shim's class score are the firmware's own
(firmware/xylo), imported from this checkout: the file is written exactly as the shim reads it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from rig.datasets import afe, dcase
from rig.errors import RigError
from rig.model.split import DEFAULT_FRACTION, DEFAULT_SEED, ValidationSplit, validation_split

if TYPE_CHECKING:
    from firmware.xylo.spec import XyloSpec

REPO = Path(__file__).resolve().parents[2]
#: The shipped model (benches/xylo.toml's `[dut] spec`).
SHIPPED_SPEC = REPO / "firmware" / "xylo" / "models" / "asc_synthetic.npz"
MODEL_ID = "xylo-asc-synth01"
CLASS_NAMES = dcase.SCENES
#: One network step per AFE raster period (10 ms), so Xylo's time base is the audio's.
DT_S = afe.AfeConfig().raster_period_s
#: Audio rate the rig's benches load the data at (the synthetic generator's own rate).
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
#: The candidates the validation split chooses from (the shipped model's search).
HIDDEN_SIZES = (128, 256, 512, 1000)
RIDGES = (1e-3, 1e-2, 1e-1, 1.0)
#: How a choice is made among candidates.
RULE = "highest validation accuracy; ties: fewer hidden neurons, then the larger ridge"


# -- the firmware's own modules --------------------------------------------------------------------
def firmware_xylo() -> SimpleNamespace:
    """firmware/xylo's `spec`, `rockpool_import`, `shim` and `nir_graph` modules from this
    checkout.

    firmware/ is not an installed package (it is the other side of the wire); the checkout's
    root is appended to sys.path so its modules import as the shim itself imports them."""
    if not (REPO / "firmware" / "xylo" / "spec.py").is_file():
        raise RigError(f"{REPO / 'firmware' / 'xylo'} is missing",
                       hint="run the rig from its source checkout: the Xylo spec format lives "
                       "in firmware/xylo")
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))
    from firmware.xylo import nir_graph, rockpool_import, shim, spec

    return SimpleNamespace(spec=spec, rockpool=rockpool_import, shim=shim, nir_graph=nir_graph)


def _xylo_audio2() -> ModuleType:
    return firmware_xylo().rockpool.xylo_audio2()


# -- data ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rasters:
    """One split as Xylo sees it: AFE rasters (n, T, 16) uint8, labels (n,) and the clip each
    slice was cut from (n,)."""

    rasters: np.ndarray
    labels: np.ndarray
    clips: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, index: np.ndarray) -> Rasters:
        """The slices at `index`."""
        return Rasters(self.rasters[index], self.labels[index], self.clips[index])


class RasterSource(Protocol):
    """Where training data comes from: `split('train')` and, for the report only, 'test'."""

    description: str

    def split(self, name: str) -> Rasters:
        """The named split as rasters."""
        ...


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


@dataclass
class DcaseRasters:
    """A DCASE 2020-layout folder (the real TAU set or a synthetic one), sliced into 1-second
    slices at `rate_hz` and pre-processed by the AFE simulator; rasters cached in `afe_dir`."""

    root: Path
    afe_dir: Path
    rate_hz: int = RATE_HZ
    workers: int = 2
    description: str = ""

    def __post_init__(self) -> None:
        if not self.description:
            kind = "SYNTHETIC, " if dcase.is_synthetic(self.root) else ""
            self.description = f"{self.root.name} ({kind}DCASE 2020 layout, {self.rate_hz} Hz)"

    def split(self, name: str) -> Rasters:
        s = dcase.load_split(self.root, name, self.rate_hz)
        rasters = afe_rasters(s.audio, self.rate_hz, self.afe_dir, f"{self.root.name}-{name}",
                              self.workers)
        return Rasters(rasters, s.labels, s.clip_index)


def synthetic_source(work_dir: Path, train_clips: int, test_clips: int, data_seed: int,
                     workers: int = 2) -> DcaseRasters:
    """The SYNTHETIC set (made once under `work_dir`) with `train_clips` / `test_clips`
    ten-second clips per scene."""
    root = work_dir / f"{dcase.SYNTHETIC_DIRNAME}-seed{data_seed}-{train_clips}x{test_clips}"
    if not (root / "README.md").is_file():  # written last by make_synthetic_dcase
        dcase.make_synthetic_dcase(root, train_clips, data_seed, test_clips)
    return DcaseRasters(root, work_dir / "afe", RATE_HZ, workers,
                        f"SYNTHETIC scenes (rig.datasets.synthetic, data seed {data_seed}, "
                        f"{train_clips} train / {test_clips} test ten-second clips per scene)")


# -- network ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hidden:
    """The fixed random recurrent layer: weights (float, before quantisation) and thresholds."""

    w_in: np.ndarray
    w_rec: np.ndarray
    threshold: np.ndarray


def _rockpool_net(hidden: Hidden, w_out: np.ndarray, threshold_out: np.ndarray) -> Any:
    _xylo_audio2()  # the samna stand-ins before any Rockpool import
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


def make_spec(hidden: Hidden, w_out: np.ndarray, threshold_out: np.ndarray,
              model_id: str = MODEL_ID) -> XyloSpec:
    """Map and quantise the network for Xylo Audio 2 (build_spec: mapper + channel_quantize)."""
    net = _rockpool_net(hidden, w_out, threshold_out)
    return firmware_xylo().spec.build_spec(net, class_names=CLASS_NAMES, model_id=model_id,
                                           dt=DT_S)


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
    sim = _xylo_audio2().XyloSim.from_specification(**spec.specification())
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


def _probe(rasters: np.ndarray, n_hidden: int, seed: int, model_id: str
           ) -> tuple[Hidden, np.ndarray]:
    """The hidden layer for `rasters` and its XyloSim spike counts on them (n, n_hidden)."""
    hidden = init_hidden(rasters, n_hidden, seed)
    n_classes = len(CLASS_NAMES)
    probe = make_spec(hidden, np.ones((n_hidden, n_classes)), np.ones(n_classes), model_id)
    _, counts = run_xylo(probe, rasters, record=True)
    assert counts is not None
    return hidden, counts


def fit(rasters: np.ndarray, labels: np.ndarray, *, n_hidden: int, seed: int,
        ridge: float = 0.01, model_id: str = MODEL_ID) -> XyloSpec:
    """The quantised spec for one setting: random hidden layer, ridge readout fitted on
    XyloSim's hidden spikes."""
    hidden, counts = _probe(rasters, n_hidden, seed, model_id)
    w_out, threshold_out = fit_readout(counts, labels, len(CLASS_NAMES), ridge)
    return make_spec(hidden, w_out, threshold_out, model_id)


def accuracy(spec: XyloSpec, rasters: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of inputs whose highest shim class score (XyloSim) is the label."""
    class_scores = firmware_xylo().shim.class_scores
    out, _ = run_xylo(spec, rasters)
    scores = np.stack([class_scores(o[None, :]) for o in out])
    return float(np.mean(scores.argmax(axis=1) == labels))


# -- choosing the settings on the validation split -------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """One setting and its XyloSim accuracy on the validation part of the train data."""

    n_hidden: int
    ridge: float
    validation_accuracy: float

    def record(self) -> dict[str, Any]:
        return {"n_hidden": self.n_hidden, "ridge": self.ridge,
                "validation_accuracy": round(self.validation_accuracy, 6)}


def select(fit_part: Rasters, validation: Rasters, hidden_sizes: Sequence[int],
           ridges: Sequence[float], seed: int, model_id: str = MODEL_ID,
           log: Callable[[str], None] | None = None) -> list[Candidate]:
    """Every (hidden size, ridge): fitted on `fit_part`, scored on `validation` (XyloSim on the
    quantised spec). The hidden layer depends only on the hidden size, so it is simulated once
    per size."""
    candidates = []
    for n_hidden in hidden_sizes:  # one hidden layer per size; ridges share its spike counts
        hidden, counts = _probe(fit_part.rasters, n_hidden, seed, model_id)
        for ridge in ridges:
            w_out, threshold_out = fit_readout(counts, fit_part.labels, len(CLASS_NAMES), ridge)
            spec = make_spec(hidden, w_out, threshold_out, model_id)
            c = Candidate(int(n_hidden), float(ridge),
                          accuracy(spec, validation.rasters, validation.labels))
            candidates.append(c)
            if log:
                log(f"  hidden {c.n_hidden:4d}  ridge {c.ridge:g}: validation accuracy "
                    f"{c.validation_accuracy:.3f}")
    return candidates


def best(candidates: Sequence[Candidate]) -> Candidate:
    """The candidate `RULE` picks."""
    if not candidates:
        raise RigError("no candidate settings to choose from",
                       hint="give at least one hidden size and one ridge")
    return max(candidates, key=lambda c: (c.validation_accuracy, -c.n_hidden, c.ridge))


# -- the whole run ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainConfig:
    """The settings of a training run; the defaults make the shipped model."""

    hidden_sizes: tuple[int, ...] = HIDDEN_SIZES
    ridges: tuple[float, ...] = RIDGES
    seed: int = 0
    val_fraction: float = DEFAULT_FRACTION
    val_seed: int = DEFAULT_SEED
    model_id: str = MODEL_ID


@dataclass(frozen=True)
class Trained:
    """A trained spec (its header's `training` says how) and what chose it."""

    spec: XyloSpec
    split: ValidationSplit
    candidates: list[Candidate]
    chosen: Candidate
    train_accuracy: float
    seconds: dict[str, float] = field(default_factory=dict)


def train(source: RasterSource, config: TrainConfig | None = None,
          log: Callable[[str], None] | None = None) -> Trained:
    """Choose the settings on a validation split of the train data, fit them on all of it.
    Reads only `source.split('train')`."""
    config = config or TrainConfig()
    t0 = time.perf_counter()
    data = source.split("train")
    t_data = time.perf_counter() - t0
    split = validation_split(data.labels, data.clips, fraction=config.val_fraction,
                             seed=config.val_seed, class_names=CLASS_NAMES)
    if log:
        log(f"train: {len(data)} slices from {len(np.unique(data.clips))} clips; validation "
            f"split (seed {config.val_seed}): {len(split.validation)} slices of "
            f"{split.summary['validation']['clips']} clips, fit on {len(split.fit)}")
    candidates = select(data.take(split.fit), data.take(split.validation), config.hidden_sizes,
                        config.ridges, config.seed, config.model_id, log)
    chosen = best(candidates)
    t_select = time.perf_counter() - t0 - t_data
    if log:
        log(f"chosen: hidden {chosen.n_hidden}, ridge {chosen.ridge:g} (validation accuracy "
            f"{chosen.validation_accuracy:.3f}); fitting on all {len(data)} train slices")
    spec = fit(data.rasters, data.labels, n_hidden=chosen.n_hidden, seed=config.seed,
               ridge=chosen.ridge, model_id=config.model_id)
    train_accuracy = accuracy(spec, data.rasters, data.labels)
    t_fit = time.perf_counter() - t0 - t_data - t_select
    record = {
        "method": "reservoir: fixed random recurrent LIF layer (thresholds from the train "
                  "data), ridge readout on its XyloSim spike counts (rig/model/xylo.py)",
        "data": source.description,
        "selection": {
            "on": "a validation split of the train data; the test split was not read",
            "split": split.record(),
            "rule": RULE,
            "candidates": [c.record() for c in candidates],
            "chosen": chosen.record(),
        },
        "final_fit": {"on": "all train slices (fit + validation parts)",
                      "slices": len(data), "n_hidden": chosen.n_hidden, "ridge": chosen.ridge,
                      "seed": config.seed, "train_accuracy": round(train_accuracy, 6)},
    }
    return Trained(spec=replace(spec, training=record), split=split, candidates=candidates,
                   chosen=chosen, train_accuracy=train_accuracy,
                   seconds={"data": t_data, "selection": t_select, "fit": t_fit})


@dataclass(frozen=True)
class Outcome:
    """What `train_and_save` did."""

    trained: Trained
    path: Path
    test_accuracy: float | None
    test_slices: int


def train_and_save(source: RasterSource, out: Path, config: TrainConfig | None = None,
                   evaluate_test: bool = True, log: Callable[[str], None] | None = None
                   ) -> Outcome:
    """`train`, write the spec to `out`, and only then (with `evaluate_test`) read the test
    split to report its accuracy: nothing the test split shows can change the file."""
    trained = train(source, config, log)
    out.parent.mkdir(parents=True, exist_ok=True)
    path = firmware_xylo().spec.save_spec(trained.spec, out)
    if not evaluate_test:
        return Outcome(trained, path, None, 0)
    test = source.split("test")
    return Outcome(trained, path, accuracy(trained.spec, test.rasters, test.labels), len(test))
