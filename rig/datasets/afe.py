"""ASC pre-processing for Xylo Audio 2: audio -> 16-channel spike rasters with Rockpool's AFESim.

On the chip this step is an analog front end (microphone, LNA, 16 band-pass filters, rectifiers,
spike encoders) that runs in real time on sound played to the microphone. So the pre-processing
TIME to report is the audio's own duration (`hardware_time_s`, from the sample count and rate);
the host time the simulation takes (`sim_host_s`) is recorded only as information and is no
measure of anything on the device. The analog front end's power can only be measured on an HDK
with audio played to the microphone.

Rasters are cached (an .npz keyed by a hash of the audio and every AFE setting), because the
simulation takes about a second per second of audio; a process that finds another simulating
the same file (two runs, a sweep's workers on one host) waits for it rather than simulate
beside it.

Rockpool is imported lazily. `import rockpool.devices.xylo` fails without samna (two Xylo
modules import it unconditionally), so stand-in modules are registered first. That workaround
belongs in ONE place, firmware/xylo/rockpool_import.py; `load_syns61201` uses it and keeps a
fallback copy only for when that file is absent.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import struct
import time
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from drivers.file_lock import FileLock
from protocols.errors import ProtocolError
from rig.datasets.dcase import resample, save_npz
from rig.errors import RigError

#: Channels of the Xylo Audio 2 front end.
CHANNELS = 16
#: AFESim needs fs >= 6 x its highest filter centre (16,940 Hz) = 101,640 Hz.
MIN_AFE_RATE_HZ = 101_640
#: Byte layout of a raster sent to the Xylo shim: u16 T, u16 channels (little-endian), then
#: T x channels u8 counts, row-major.
_HEADER = struct.Struct("<HH")


@dataclass(frozen=True)
class AfeConfig:
    """AFESim settings. `full_scale_v` is the microphone voltage a full-scale sample maps to
    (0.2 V: the microphone's limit before severe distortion in the AFESim model); `seed` fixes
    the simulated chip's mismatch and its noise (sample k uses noise seed `seed + k`)."""

    rate_hz: int = 110_000
    raster_period_s: float = 0.01
    #: Xylo Audio 2 counts at most 15 spikes per channel per raster period.
    max_count: int = 15
    full_scale_v: float = 0.2
    seed: int = 0
    add_noise: bool = True
    add_offset: bool = True
    add_mismatch: bool = True

    def __post_init__(self) -> None:
        if self.rate_hz < MIN_AFE_RATE_HZ:
            raise RigError(f"AFE simulation rate {self.rate_hz} Hz is below {MIN_AFE_RATE_HZ} Hz",
                           hint="AFESim needs fs >= 6 x its highest filter centre; use 110000")
        clocks = self.raster_period_s * self.rate_hz
        if abs(clocks - round(clocks)) > 1e-6 or round(clocks) < 1:
            raise RigError(f"raster period {self.raster_period_s} s is not a whole number of "
                           f"{self.rate_hz} Hz clocks", hint="e.g. 0.01 s at 110000 Hz")

    @property
    def clocks_per_period(self) -> int:
        return round(self.raster_period_s * self.rate_hz)


@dataclass(frozen=True)
class AfeResult:
    """`rasters` (n, T, CHANNELS) uint8 spike counts per raster period for n inputs.

    `hardware_time_s` (n,): the pre-processing time on the chip = each input's audio duration
    (the analog front end runs in real time). `sim_host_s` (n,): host seconds the simulation
    took, information only. `from_cache`: whether the rasters were read from the cache."""

    rasters: np.ndarray
    hardware_time_s: np.ndarray
    sim_host_s: np.ndarray
    config: AfeConfig
    from_cache: bool = False
    meta: dict = field(default_factory=dict)


_REPO = Path(__file__).resolve().parents[2]


def load_syns61201() -> types.ModuleType:
    """`rockpool.devices.xylo.syns61201` (Xylo Audio 2), imported without samna.

    The samna workaround has one home, firmware/xylo/rockpool_import.py (the Xylo shim uses it
    too); it is loaded by path because firmware/ is not an installed package.
    """
    path = _REPO / "firmware" / "xylo" / "rockpool_import.py"
    spec = importlib.util.spec_from_file_location("_rig_xylo_rockpool_import", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise RigError(f"{path} is missing", hint="the rig needs its firmware/ folder")
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    try:
        return helper.xylo_audio2()
    except ImportError as exc:
        raise RigError(f"Rockpool's Xylo Audio 2 simulator is not available ({exc})",
                       hint="pip install -e '.[xylo]' (rockpool, xylosim, jax; not samna)"
                       ) from exc


def _frames_to_raster(spikes: np.ndarray, config: AfeConfig) -> np.ndarray:
    """Spike events (clocks, CHANNELS) -> counts per whole raster period, clipped to max_count.
    A trailing partial period is dropped (AFESim.raster would instead count clock 0 alone in
    its first bin)."""
    n = config.clocks_per_period
    rows = spikes.shape[0] // n
    counts = np.asarray(spikes[: rows * n], np.int64).reshape(rows, n, -1).sum(axis=1)
    return np.minimum(counts, config.max_count).astype(np.uint8)


def simulate_afe(audio: np.ndarray, rate_hz: int, config: AfeConfig | None = None
                 ) -> AfeResult:
    """Rasters of int16 `audio` (n, samples) at `rate_hz` through one simulated AFE chip.

    Each input starts from a reset AFE state (batch size 1, inputs independent). Audio is
    resampled to `config.rate_hz` first; the resampling is dataset preparation, not part of
    the pre-processing the spec times."""
    config = config or AfeConfig()
    audio = np.atleast_2d(np.asarray(audio))
    if audio.dtype != np.int16:
        raise ValueError(f"audio must be int16, not {audio.dtype}")
    mod = load_syns61201()
    afe = mod.AFESim(fs=config.rate_hz, raster_period=config.raster_period_s,
                     max_spike_per_raster_period=config.max_count, add_noise=config.add_noise,
                     add_offset=config.add_offset, add_mismatch=config.add_mismatch,
                     seed=config.seed)
    rasters, host = [], np.zeros(len(audio))
    saved = np.random.get_state()  # AFESim draws noise from numpy's global generator
    try:
        for k, x in enumerate(audio):  # one pass per input (1 s of audio), not per sample
            v = resample(x.astype(np.float64) / 32768.0, int(rate_hz), config.rate_hz)
            afe.reset_state()
            np.random.seed((config.seed + k) % 2**32)
            t0 = time.perf_counter()
            spikes, _, _ = afe.evolve(v * config.full_scale_v)
            host[k] = time.perf_counter() - t0
            rasters.append(_frames_to_raster(np.asarray(spikes), config))
    finally:
        np.random.set_state(saved)
    out = np.stack(rasters) if rasters else np.zeros((0, 0, CHANNELS), np.uint8)
    duration = np.full(len(audio), audio.shape[1] / float(rate_hz))
    return AfeResult(rasters=out, hardware_time_s=duration, sim_host_s=host, config=config)


def _cache_key(audio: np.ndarray, rate_hz: int, config: AfeConfig) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({"rate_hz": int(rate_hz), "shape": list(audio.shape),
                         "afe": asdict(config), "rockpool": _rockpool_version()},
                        sort_keys=True).encode())
    h.update(np.ascontiguousarray(audio).tobytes())
    return h.hexdigest()


def _rockpool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("rockpool")
    except PackageNotFoundError:
        return "absent"


#: Host seconds per second of audio a process waits for another's simulation of the same cache
#: file (the AFE takes about one; a loaded host longer), and at least this long; then it
#: simulates the audio itself (slower, never wrong).
WAIT_PER_AUDIO_S = 5.0
MIN_WAIT_S = 60.0


def cached_afe(audio: np.ndarray, rate_hz: int, cache_dir: Path, name: str,
               config: AfeConfig | None = None) -> AfeResult:
    """As `simulate_afe`, but read from `cache_dir/<name>_afe.npz` when that file was made from
    the same audio and settings; otherwise simulated and written there, under a lock file
    (`<name>_afe.lock`) that another process wanting the same file waits on."""
    config = config or AfeConfig()
    audio = np.atleast_2d(np.asarray(audio))
    key = _cache_key(audio, rate_hz, config)
    path = Path(cache_dir) / f"{name}_afe.npz"
    cached = _from_cache(path, key, config)
    if cached is not None:
        return cached
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path.with_name(f"{name}_afe.lock"))
    deadline = time.monotonic() + max(MIN_WAIT_S, WAIT_PER_AUDIO_S * audio.size / rate_hz)
    while not lock.acquire(note=f"pid {os.getpid()}") and time.monotonic() < deadline:
        time.sleep(0.1)  # another process simulates: its file comes when it lets go
    try:
        cached = _from_cache(path, key, config)  # made while this one waited
        if cached is not None:
            return cached
        result = simulate_afe(audio, rate_hz, config)
        save_npz(path, rasters=result.rasters, hardware_time_s=result.hardware_time_s,
                 sim_host_s=result.sim_host_s, key=np.array(key))
        return result
    finally:
        lock.release()


def _from_cache(path: Path, key: str, config: AfeConfig) -> AfeResult | None:
    """The cached rasters at `path` if they were made with `key`; None if absent, stale or
    unreadable (then simulated again and overwritten)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            if str(z["key"]) != key:
                return None
            return AfeResult(rasters=z["rasters"], hardware_time_s=z["hardware_time_s"],
                             sim_host_s=z["sim_host_s"], config=config, from_cache=True)
    except (OSError, ValueError, KeyError):
        return None


def raster_to_bytes(raster: np.ndarray) -> bytes:
    """One raster (T, channels) as the Xylo shim's input: u16 T, u16 channels (little-endian),
    then T x channels u8 counts, row-major, clipped to 0..255."""
    r = np.asarray(raster)
    if r.ndim != 2:
        raise ValueError(f"a raster is 2-D (T, channels), not shape {r.shape}")
    if r.shape[0] > 0xFFFF or r.shape[1] > 0xFFFF:
        raise ValueError(f"raster shape {r.shape} does not fit u16 sizes")
    counts = np.clip(r, 0, 255).astype(np.uint8)
    return _HEADER.pack(*r.shape) + counts.tobytes(order="C")


def bytes_to_raster(data: bytes) -> np.ndarray:
    """The inverse of `raster_to_bytes`: (T, channels) uint8. A length that does not match the
    header is a ProtocolError."""
    if len(data) < _HEADER.size:
        raise ProtocolError(f"raster of {len(data)} byte(s) is shorter than its 4-byte header")
    t, channels = _HEADER.unpack_from(data)
    body = memoryview(data)[_HEADER.size:]
    if len(body) != t * channels:
        raise ProtocolError(f"raster header says {t} x {channels} = {t * channels} counts, "
                            f"but {len(body)} byte(s) follow",
                            hint="the sender and receiver disagree on the raster format")
    return np.frombuffer(body, np.uint8).reshape(t, channels).copy()
