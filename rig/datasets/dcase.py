"""The NeuroBench ASC data in the DCASE 2020 Task 1A layout, and a SYNTHETIC set in that layout.

The layout (TAU Urban Acoustic Scenes 2020 Mobile, development set) is

    ROOT/audio/<scene>-<city>-<location>-<segment>-<device>.wav     10 s clips
    ROOT/evaluation_setup/fold1_train.csv                           the train split
    ROOT/evaluation_setup/fold1_evaluate.csv                        the test split

with tab-separated csv files whose header names the columns `filename` and `scene_label`. Like
the NeuroBench script, only four scenes (airport, street_traffic, bus, park) and device `a` are
used; each clip is resampled to the target rate (scipy's polyphase resampler, on the whole clip
so slices have no edge effects) and cut into 1-second slices. Converting the full set takes
minutes, so each split and rate is cached in one .npz whose key hashes the file list, labels and
file sizes: editing the csv or replacing a clip makes the cache stale, and it is rebuilt.

`make_synthetic_dcase` writes a small set in the same layout from `rig.datasets.synthetic`'s
scene generator: it is not recorded audio, and its README and every file name say so.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import wave
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from math import gcd
from pathlib import Path

import numpy as np

from rig.datasets import synthetic
from rig.errors import RigError

#: The four NeuroBench ASC scenes, in label order (the same order as the synthetic generator's).
SCENES: tuple[str, ...] = synthetic.CLASSES
#: The one recording device NeuroBench uses (a real device: Soundman OKM II binaural mic).
DEVICE = "a"
#: Split name -> csv file under the dataset root.
SPLIT_FILES = {
    "train": "evaluation_setup/fold1_train.csv",
    "test": "evaluation_setup/fold1_evaluate.csv",
}
SLICE_S = 1
#: Cache folder (under the dataset root unless told otherwise).
CACHE_DIRNAME = ".rig-cache"
#: Bumped whenever the conversion changes, so older caches count as stale.
_CONVERSION_VERSION = 1
#: Name of the synthetic set's folder (the CLI's default) and its README's first line.
SYNTHETIC_DIRNAME = "synthetic-tau2020-asc4"
_SYNTHETIC_MARK = "# SYNTHETIC acoustic scenes in the DCASE 2020 Task 1A layout"
#: Seconds per synthetic clip, as in DCASE.
SYNTHETIC_CLIP_S = 10

_LAYOUT_HINT = (
    "expected the DCASE 2020 Task 1A layout: ROOT/evaluation_setup/fold1_train.csv and "
    "fold1_evaluate.csv (tab-separated, header 'filename<TAB>scene_label') and ROOT/audio/*.wav; "
    "or make a synthetic one with `rig dataset synth --out DIR`"
)


class DatasetError(RigError):
    """A dataset folder, csv or audio file that is missing or not in the expected layout."""


@dataclass(frozen=True)
class Clip:
    """One row of a split csv: `filename` relative to the root, its scene and device."""

    filename: str
    scene: str
    device: str


@dataclass(frozen=True)
class AscSplit:
    """1-second slices: `audio` (n, rate_hz) int16, `labels` (n,) int64 (index into SCENES),
    `clip_index` (n,) int64 (row in `filenames` each slice came from)."""

    audio: np.ndarray
    labels: np.ndarray
    clip_index: np.ndarray
    filenames: tuple[str, ...]
    rate_hz: int
    name: str
    #: Hash of the file list, sizes and conversion: names this exact content (cache keys).
    key: str

    def __len__(self) -> int:
        return len(self.labels)


# ---------------------------------------------------------------------------- csv files


def parse_split_csv(text: str, source: str = "<csv>") -> list[Clip]:
    """Rows of a DCASE split csv. Columns are found by the header (`filename`, `scene_label`);
    blank lines and CRLF endings are accepted; a short row or a file name without a device
    field is an error naming `source` and the line."""
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise DatasetError(f"{source}: empty, no header line", hint=_LAYOUT_HINT)
    header = [h.strip() for h in lines[0].split("\t")]
    missing = [c for c in ("filename", "scene_label") if c not in header]
    if missing:
        raise DatasetError(f"{source}: header {header!r} lacks column(s) {missing} "
                           "(is it tab-separated?)", hint=_LAYOUT_HINT)
    i_file, i_scene = header.index("filename"), header.index("scene_label")
    clips = []
    for number, line in enumerate(lines[1:], start=2):  # one line is one clip, not a sample
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split("\t")]
        if len(fields) <= max(i_file, i_scene):
            raise DatasetError(f"{source} line {number}: {len(fields)} field(s), expected "
                               f"{len(header)}: {line!r}", hint=_LAYOUT_HINT)
        name = fields[i_file]
        parts = Path(name).stem.split("-")
        if len(parts) < 2 or not parts[-1]:
            raise DatasetError(f"{source} line {number}: file name {name!r} has no device field "
                               "(expected e.g. audio/airport-lisbon-1000-40000-a.wav)",
                               hint=_LAYOUT_HINT)
        clips.append(Clip(filename=name, scene=fields[i_scene], device=parts[-1]))
    return clips


def select_clips(clips: Iterable[Clip], scenes: Sequence[str] = SCENES,
                 device: str = DEVICE) -> list[Clip]:
    """The clips NeuroBench uses: the given scenes, recorded on `device`; csv order kept."""
    wanted = set(scenes)
    return [c for c in clips if c.scene in wanted and c.device == device]


def split_clips(root: Path, split: str) -> list[Clip]:
    """The selected clips of `split` ('train' or 'test') of the dataset at `root`."""
    if split not in SPLIT_FILES:
        raise DatasetError(f"unknown split {split!r}", hint=f"use one of {sorted(SPLIT_FILES)}")
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"dataset folder {root} does not exist", hint=_LAYOUT_HINT)
    path = root / SPLIT_FILES[split]
    if not path.is_file():
        raise DatasetError(f"{path} is missing", hint=_LAYOUT_HINT)
    clips = select_clips(parse_split_csv(path.read_text(encoding="utf-8"), str(path)))
    if not clips:
        raise DatasetError(f"{path} lists no clip of scenes {list(SCENES)} on device "
                           f"{DEVICE!r}", hint=_LAYOUT_HINT)
    return clips


# ---------------------------------------------------------------------------- wav files


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """Mono float64 audio in [-1, 1) and its rate. PCM of 8, 16, 24 or 32 bits (DCASE is
    24-bit); several channels are averaged."""
    try:
        with wave.open(str(path), "rb") as w:
            rate, width, channels = w.getframerate(), w.getsampwidth(), w.getnchannels()
            raw = w.readframes(w.getnframes())
    except (wave.Error, EOFError) as exc:
        raise DatasetError(f"{path}: not a PCM wav file ({exc})",
                           hint="DCASE clips are PCM .wav; re-download the file") from exc
    if width == 1:  # 8-bit wav is unsigned
        x = (np.frombuffer(raw, np.uint8).astype(np.float64) - 128.0) / 128.0
    elif width == 3:  # no numpy dtype: assemble little-endian 3-byte words, sign from the top
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        word = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (word - ((word & 0x800000) << 1)).astype(np.float64) / float(1 << 23)
    elif width in (2, 4):
        dtype = np.dtype(f"<i{width}")
        x = np.frombuffer(raw, dtype).astype(np.float64) / float(1 << (8 * width - 1))
    else:
        raise DatasetError(f"{path}: {8 * width}-bit samples are not supported",
                           hint="convert it to 16- or 24-bit PCM")
    return x.reshape(-1, channels).mean(axis=1), rate


def write_wav(path: Path, audio: np.ndarray, rate_hz: int) -> None:
    """Mono 16-bit PCM wav of int16 `audio`."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(int(rate_hz))
        w.writeframes(np.asarray(audio, dtype="<i2").tobytes())


def resample(x: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """`x` (float, last axis time) from `rate_in` to `rate_out` with scipy's polyphase filter."""
    if rate_in == rate_out:
        return x
    try:
        from scipy.signal import resample_poly  # lazy: only needed when rates differ
    except ImportError as exc:
        raise RigError("resampling audio needs scipy, which is not installed",
                       hint="pip install scipy (it comes with the qubo and test extras)") from exc
    g = gcd(int(rate_in), int(rate_out))
    return resample_poly(x, int(rate_out) // g, int(rate_in) // g, axis=-1)


def to_int16(x: np.ndarray) -> np.ndarray:
    """Float audio in [-1, 1) to int16, rounded and clipped (the resampler may overshoot)."""
    return np.clip(np.rint(x * 32768.0), -32768, 32767).astype(np.int16)


def slice_clip(x: np.ndarray, rate_hz: int) -> np.ndarray:
    """A clip cut into whole `SLICE_S`-second slices (n, SLICE_S * rate); a tail is dropped."""
    n = SLICE_S * int(rate_hz)
    count = len(x) // n
    return x[: count * n].reshape(count, n)


# ---------------------------------------------------------------------------- loading + cache


def _clip_paths(root: Path, clips: Sequence[Clip]) -> list[Path]:
    """Each clip's path; all missing ones are named in one error (first few listed)."""
    paths = [root / c.filename for c in clips]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise DatasetError(f"{len(missing)} of {len(paths)} audio file(s) listed in the csv are "
                           f"missing: {shown}", hint=_LAYOUT_HINT)
    return paths


def content_key(root: Path, split: str, rate_hz: int) -> str:
    """Hash of what a converted split depends on: files, labels, sizes, rate, conversion."""
    root = Path(root)
    clips = split_clips(root, split)
    paths = _clip_paths(root, clips)
    h = hashlib.sha256(f"v{_CONVERSION_VERSION} {split} {int(rate_hz)} {SLICE_S}\n".encode())
    for clip, path in zip(clips, paths, strict=True):
        h.update(f"{clip.filename}\t{clip.scene}\t{path.stat().st_size}\n".encode())
    return h.hexdigest()


def cache_path(cache_dir: Path, split: str, rate_hz: int) -> Path:
    """The one cache file of a split at a rate (a newer key overwrites an older one)."""
    return Path(cache_dir) / f"{split}_{int(rate_hz)}Hz.npz"


def _default_cache_dir(root: Path, cache_dir: Path | None) -> Path:
    return Path(cache_dir) if cache_dir is not None else Path(root) / CACHE_DIRNAME


def cache_state(root: Path, split: str, rate_hz: int, cache_dir: Path | None = None) -> str:
    """'fresh' (matches the files), 'stale' (files changed since) or 'absent'."""
    path = cache_path(_default_cache_dir(root, cache_dir), split, rate_hz)
    if not path.is_file():
        return "absent"
    return "fresh" if _cached_key(path) == content_key(root, split, rate_hz) else "stale"


def _cached_key(path: Path) -> str | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            return str(z["key"])
    except (OSError, ValueError, KeyError):  # truncated or foreign file: treat as stale
        return None


def load_split(root: Path, split: str, rate_hz: int, cache_dir: Path | None = None
               ) -> AscSplit:
    """The `split` ('train' or 'test') as 1-second int16 slices at `rate_hz`, from the cache if
    it is fresh, else converted from the wav files and cached (under ROOT/.rig-cache by
    default)."""
    root = Path(root)
    if int(rate_hz) <= 0:
        raise DatasetError(f"sample rate must be positive, not {rate_hz}")
    key = content_key(root, split, rate_hz)
    path = cache_path(_default_cache_dir(root, cache_dir), split, rate_hz)
    if path.is_file() and _cached_key(path) == key:
        with np.load(path, allow_pickle=False) as z:
            return AscSplit(audio=z["audio"], labels=z["labels"], clip_index=z["clip_index"],
                            filenames=tuple(str(f) for f in z["filenames"]),
                            rate_hz=int(rate_hz), name=split, key=key)
    result = convert_split(root, split, rate_hz, key)
    _save_cache(path, result)
    return result


def convert_split(root: Path, split: str, rate_hz: int, key: str = "") -> AscSplit:
    """Read, resample and slice every selected clip of `split` (no cache)."""
    root = Path(root)
    clips = split_clips(root, split)
    paths = _clip_paths(root, clips)
    slices, labels, index = [], [], []
    for i, (clip, path) in enumerate(zip(clips, paths, strict=True)):  # one clip per pass
        x, rate = read_wav(path)
        cut = slice_clip(to_int16(resample(x, rate, int(rate_hz))), int(rate_hz))
        slices.append(cut)
        labels.append(np.full(len(cut), SCENES.index(clip.scene), np.int64))
        index.append(np.full(len(cut), i, np.int64))
    return AscSplit(audio=np.concatenate(slices), labels=np.concatenate(labels),
                    clip_index=np.concatenate(index),
                    filenames=tuple(c.filename for c in clips), rate_hz=int(rate_hz),
                    name=split, key=key)


def _save_cache(path: Path, s: AscSplit) -> None:
    save_npz(path, audio=s.audio, labels=s.labels, clip_index=s.clip_index,
             filenames=np.array(s.filenames, dtype=str), key=np.array(s.key))


def save_npz(path: Path, **arrays: np.ndarray) -> None:
    """Write `arrays` to `path` (.npz) through a file of this writer's own, then rename it: a
    killed writer never leaves a cache that looks valid, and two filling the same cache at once
    (two runs, or a sweep's workers, on one host) cannot write into each other's file; the
    last rename wins, whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.partial")
    try:
        with open(tmp, "wb") as f:
            # numpy's stub: a key of **arrays could be allow_pickle (a bool); ours name arrays
            np.savez(f, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------- info


def is_synthetic(root: Path) -> bool:
    """Whether `root` was written by make_synthetic_dcase (its README says so)."""
    readme = Path(root) / "README.md"
    return readme.is_file() and readme.read_text(encoding="utf-8").startswith(_SYNTHETIC_MARK)


def dataset_info(root: Path, cache_dir: Path | None = None) -> dict:
    """Clips and 1-second slices per split and scene, the audio rates found, and the state of
    every cache file present (reads wav headers only, never the audio)."""
    root = Path(root)
    cache = _default_cache_dir(root, cache_dir)
    info: dict = {"root": str(root), "synthetic": is_synthetic(root), "cache_dir": str(cache),
                  "splits": {}}
    for split in SPLIT_FILES:
        clips = split_clips(root, split)
        paths = _clip_paths(root, clips)
        per_scene = {s: {"clips": 0, "slices": 0} for s in SCENES}
        rates: set[int] = set()
        for clip, path in zip(clips, paths, strict=True):  # headers only: one per clip
            with wave.open(str(path), "rb") as w:
                rate, frames = w.getframerate(), w.getnframes()
            rates.add(rate)
            per_scene[clip.scene]["clips"] += 1
            per_scene[clip.scene]["slices"] += frames // (SLICE_S * rate)
        caches = {}
        for f in sorted(cache.glob(f"{split}_*Hz.npz")):
            rate_hz = int(f.stem.split("_")[-1].removesuffix("Hz"))
            caches[f"{rate_hz} Hz"] = cache_state(root, split, rate_hz, cache)
        info["splits"][split] = {
            "csv": SPLIT_FILES[split],
            "clips": len(clips),
            "slices": sum(v["slices"] for v in per_scene.values()),
            "per_scene": per_scene,
            "audio_rates_hz": sorted(rates),
            "cache": caches,
        }
    return info


# ---------------------------------------------------------------------------- synthetic set


def make_synthetic_dcase(root: Path, clips_per_class: int, seed: int,
                         test_clips_per_class: int | None = None) -> Path:
    """Write a SYNTHETIC set in the DCASE 2020 layout at `root`: `clips_per_class` 10-second
    clips per scene in the train split and `test_clips_per_class` (default the same) in the
    test split, 16-bit mono wav at the generator's rate, both csv files and a README.

    Each clip is ten consecutive 1-second scenes of one class from `synthetic.make_split`
    (the train clips from its 'train' stream, the test clips from its 'test' stream)."""
    root = Path(root)
    test_n = clips_per_class if test_clips_per_class is None else test_clips_per_class
    if clips_per_class < 1 or test_n < 1:
        raise DatasetError(f"need at least one clip per class per split, not "
                           f"{clips_per_class} (train) / {test_n} (test)")
    (root / "audio").mkdir(parents=True, exist_ok=True)
    (root / "evaluation_setup").mkdir(parents=True, exist_ok=True)
    for split, n in (("train", clips_per_class), ("test", test_n)):
        rows = ["filename\tscene_label"]
        s = synthetic.make_split(n * SYNTHETIC_CLIP_S, seed, split)
        for label, scene in enumerate(SCENES):
            # The generator shuffles; this class's seconds, in order, form its clips.
            seconds = s.inputs[np.flatnonzero(s.labels == label)]
            clips = seconds.reshape(n, SYNTHETIC_CLIP_S * synthetic.RATE_HZ)
            for i, audio in enumerate(clips):  # one file per clip
                # scene-city-location-segment-device, as DCASE names them; city says synthetic.
                name = f"audio/{scene}-synthetic-{split}{seed}-{i:04d}-{DEVICE}.wav"
                write_wav(root / name, audio, synthetic.RATE_HZ)
                rows.append(f"{name}\t{scene}")
        (root / SPLIT_FILES[split]).write_text("\n".join(rows) + "\n", encoding="utf-8")
    (root / "README.md").write_text(_synthetic_readme(clips_per_class, test_n, seed),
                                    encoding="utf-8")
    return root


def _synthetic_readme(train_n: int, test_n: int, seed: int) -> str:
    params = {"clips_per_class": {"train": train_n, "test": test_n}, "seed": seed,
              "rate_hz": synthetic.RATE_HZ, "clip_s": SYNTHETIC_CLIP_S, "scenes": list(SCENES)}
    return (
        f"{_SYNTHETIC_MARK}\n\n"
        "This is NOT the TAU Urban Acoustic Scenes 2020 Mobile dataset and contains no recorded\n"
        "audio. Every clip was generated by `rig.datasets.synthetic` (class-specific mixes of\n"
        "coloured noise, engines, babble, birds, chimes, horns) for tests and demos. It uses the\n"
        "DCASE 2020 Task 1A layout so the same loader reads it and the real data. Accuracy on\n"
        "it says nothing about accuracy on DCASE.\n\n"
        f"Made by `rig dataset synth` with:\n\n```json\n{json.dumps(params, indent=2)}\n```\n"
    )
