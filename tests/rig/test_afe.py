"""AFE pre-processing (Rockpool's Xylo Audio 2 AFESim) and the raster byte format."""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest

from drivers.file_lock import FileLock
from protocols.errors import ProtocolError
from rig.datasets import afe
from rig.datasets.afe import AfeConfig
from rig.errors import RigError

RATE = 8000
#: 0.2 s clips keep AFESim (~1 s per second of audio) fast.
CLIP = int(0.2 * RATE)


def tone(freq_hz: float, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(CLIP) / RATE
    return np.rint(amplitude * 32767 * np.sin(2 * np.pi * freq_hz * t)).astype(np.int16)


# ---------------------------------------------------------------- byte format


def test_raster_bytes_layout_and_round_trip() -> None:
    raster = np.arange(3 * 16).reshape(3, 16)
    data = afe.raster_to_bytes(raster)
    assert data[:4] == b"\x03\x00\x10\x00"  # u16 T = 3, u16 channels = 16, little-endian
    assert len(data) == 4 + 48 and data[4:] == bytes(range(48))
    assert np.array_equal(afe.bytes_to_raster(data), raster)


def test_raster_bytes_clip_to_a_byte() -> None:
    data = afe.raster_to_bytes(np.array([[300, -2, 255, 7]]))
    assert data == b"\x01\x00\x04\x00" + bytes([255, 0, 255, 7])


def test_bad_raster_bytes_are_refused() -> None:
    with pytest.raises(ProtocolError, match="header"):
        afe.bytes_to_raster(b"\x01")
    with pytest.raises(ProtocolError, match=r"2 x 16 = 32 counts, but 31"):
        afe.bytes_to_raster(b"\x02\x00\x10\x00" + bytes(31))
    with pytest.raises(ValueError, match="2-D"):
        afe.raster_to_bytes(np.zeros(16))


# ---------------------------------------------------------------- rastering and config


def test_frames_to_raster_counts_whole_periods_and_clips() -> None:
    config = AfeConfig(rate_hz=110_000, raster_period_s=0.01)  # 1100 clocks per period
    spikes = np.zeros((2 * 1100 + 500, 16), bool)
    spikes[0:3, 0] = True                 # 3 in period 0
    spikes[1100:1120, 1] = True           # 20 in period 1: clipped to 15
    spikes[2200:2300, 2] = True           # in the partial tail: dropped
    r = afe._frames_to_raster(spikes, config)
    assert r.shape == (2, 16) and r.dtype == np.uint8
    assert (r[0, 0], r[1, 1], r.sum()) == (3, 15, 18)


def test_config_refuses_a_rate_afesim_cannot_take() -> None:
    with pytest.raises(RigError, match="101640"):
        AfeConfig(rate_hz=48_000)
    with pytest.raises(RigError, match="whole number"):
        AfeConfig(rate_hz=110_000, raster_period_s=0.0100001)


# ---------------------------------------------------------------- AFESim


@pytest.fixture(scope="module")
def tones() -> afe.AfeResult:
    audio = np.stack([tone(1177.0), tone(137.0), np.zeros(CLIP, np.int16)])
    return afe.simulate_afe(audio, RATE, AfeConfig(seed=3))


def test_afe_raster_shape_and_timing(tones: afe.AfeResult) -> None:
    # 0.2 s at 10 ms per raster period = 20 rows of 16 channels, counts at most 15.
    assert tones.rasters.shape == (3, 20, afe.CHANNELS) and tones.rasters.dtype == np.uint8
    assert tones.rasters.max() <= 15
    # The hardware's pre-processing time is the audio's duration (the analog AFE is real
    # time); the simulation's host time is separate information.
    assert np.array_equal(tones.hardware_time_s, [0.2, 0.2, 0.2])
    assert np.all(tones.sim_host_s > 0)


def test_afe_channels_follow_the_tone(tones: afe.AfeResult) -> None:
    # Channel 8 is centred on 1177 Hz, channel 3 on 137 Hz; silence gives (almost) nothing.
    per_channel = tones.rasters.sum(axis=1)
    assert int(np.argmax(per_channel[0])) == 8
    assert int(np.argmax(per_channel[1])) == 3
    assert per_channel[2].sum() < per_channel[0].sum() / 10


def test_afe_is_reproducible_and_cached(tmp_path, tones: afe.AfeResult) -> None:
    audio = np.stack([tone(1177.0), tone(137.0), np.zeros(CLIP, np.int16)])
    first = afe.cached_afe(audio, RATE, tmp_path, "t", AfeConfig(seed=3))
    assert not first.from_cache
    assert np.array_equal(first.rasters, tones.rasters)  # same seed, same chip and noise
    again = afe.cached_afe(audio, RATE, tmp_path, "t", AfeConfig(seed=3))
    assert again.from_cache and np.array_equal(again.rasters, first.rasters)
    other = afe.cached_afe(audio[:1], RATE, tmp_path, "t", AfeConfig(seed=3))
    assert not other.from_cache and other.rasters.shape == (1, 20, 16)


def test_a_process_finding_another_simulating_waits_for_its_file(tmp_path, monkeypatch) -> None:
    """Two runs (or a sweep's workers) wanting the same rasters: the second waits on the lock
    file and reads what the first wrote, instead of simulating the same audio beside it."""
    audio = np.stack([tone(1177.0), tone(137.0)])
    simulated: list[int] = []
    real = afe.simulate_afe

    def counted(*args, **kwargs):
        simulated.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(afe, "simulate_afe", counted)
    refused = threading.Event()

    class WatchedLock(FileLock):
        def acquire(self, note: str | None = None) -> bool:
            got = super().acquire(note)
            if not got:
                refused.set()
            return got

    monkeypatch.setattr(afe, "FileLock", WatchedLock)
    other = FileLock(tmp_path / "t_afe.lock")  # the first process, simulating
    assert other.acquire(note="pid 1")
    results: list[afe.AfeResult] = []
    waiter = threading.Thread(target=lambda: results.append(
        afe.cached_afe(audio, RATE, tmp_path, "t", AfeConfig(seed=3))))
    waiter.start()
    assert refused.wait(timeout=30)  # it found the lock taken and waits
    # The first process's simulation, written where the waiter looks, then its lock let go.
    made = afe.cached_afe(audio, RATE, tmp_path / "first", "t", AfeConfig(seed=3))
    shutil.copy(tmp_path / "first" / "t_afe.npz", tmp_path / "t_afe.npz")
    assert waiter.is_alive() and not results  # still waiting on the lock
    other.release()
    waiter.join(timeout=60)
    (result,) = results
    assert result.from_cache and np.array_equal(result.rasters, made.rasters)
    assert simulated == [1]  # the first process's only
