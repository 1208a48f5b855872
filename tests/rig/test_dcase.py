"""The DCASE 2020 layout loader, its cache, the synthetic set in that layout, `rig dataset`."""

from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np
import pytest

from rig.cli import main
from rig.datasets import dcase, synthetic
from rig.datasets.dcase import DatasetError

RATE = synthetic.RATE_HZ


@pytest.fixture(scope="module")
def synth_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dcase.make_synthetic_dcase(tmp_path_factory.mktemp("ds") / "syn", 1, seed=5,
                                      test_clips_per_class=2)


def write_tree(root: Path, rows: list[tuple[str, str]], test_rows: list[tuple[str, str]] = ()
               ) -> None:
    """A hand-made DCASE tree: csv files only (clips written by the caller)."""
    (root / "evaluation_setup").mkdir(parents=True, exist_ok=True)
    (root / "audio").mkdir(exist_ok=True)
    for split, r in (("train", rows), ("test", test_rows or rows)):
        text = "filename\tscene_label\n" + "".join(f"{f}\t{s}\n" for f, s in r)
        (root / dcase.SPLIT_FILES[split]).write_text(text)


def write_wav24(path: Path, x: np.ndarray, rate: int) -> None:
    """Float audio as 24-bit PCM, the DCASE format."""
    q = np.rint(x * (1 << 23)).astype(np.int32)
    raw = np.stack([q & 0xFF, (q >> 8) & 0xFF, (q >> 16) & 0xFF], axis=1).astype(np.uint8)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(3)
        w.setframerate(rate)
        w.writeframes(raw.tobytes())


# ---------------------------------------------------------------- synthetic round trip


def test_synthetic_set_loads_as_ten_slices_per_clip(synth_root: Path) -> None:
    train = dcase.load_split(synth_root, "train", RATE)
    test = dcase.load_split(synth_root, "test", RATE)
    assert train.audio.shape == (4 * 1 * 10, RATE) and train.audio.dtype == np.int16
    assert test.audio.shape == (4 * 2 * 10, RATE)
    assert np.array_equal(np.bincount(train.labels), [10, 10, 10, 10])
    assert np.array_equal(np.bincount(test.labels), [20, 20, 20, 20])
    assert np.array_equal(np.bincount(test.clip_index), [10] * 8)
    assert all("synthetic" in f for f in test.filenames)
    assert dcase.is_synthetic(synth_root)


def test_synthetic_slices_are_the_generators_seconds(synth_root: Path) -> None:
    # At the generator's own rate nothing is resampled: slice k of a clip of class c is the
    # k-th one-second scene of class c that make_split drew for that split and seed.
    test = dcase.load_split(synth_root, "test", RATE)
    ref = synthetic.make_split(2 * 10, seed=5, name="test")
    for c in range(4):
        expected = ref.inputs[ref.labels == c]
        assert np.array_equal(test.audio[test.labels == c], expected)


def test_synthetic_set_resamples_to_the_target_rate(synth_root: Path, tmp_path: Path) -> None:
    s = dcase.load_split(synth_root, "train", 16_000, cache_dir=tmp_path)
    assert s.audio.shape == (40, 16_000) and s.rate_hz == 16_000
    # Upsampling by 2 keeps every original sample (polyphase filter, band-limited input):
    # the even samples match the 8 kHz ones to within a few LSB of RMS.
    base = dcase.load_split(synth_root, "train", RATE, cache_dir=tmp_path)
    err = s.audio[:, 1000:-1000:2].astype(float) - base.audio[:, 500:-500]
    assert np.sqrt(np.mean(err**2)) < 0.02 * np.sqrt(np.mean(base.audio.astype(float) ** 2))


def test_24_bit_clip_resampled_and_sliced_closed_form(tmp_path: Path) -> None:
    rate_in, rate_out, f = 44_100, 16_000, 1000.0
    t = np.arange(10 * rate_in) / rate_in
    write_tree(tmp_path, [("audio/bus-lyon-1-2-a.wav", "bus")])
    write_wav24(tmp_path / "audio/bus-lyon-1-2-a.wav", 0.5 * np.sin(2 * np.pi * f * t), rate_in)
    s = dcase.load_split(tmp_path, "test", rate_out)
    assert s.audio.shape == (10, rate_out)
    assert np.array_equal(s.labels, [2] * 10)
    t_out = np.arange(10 * rate_out) / rate_out
    want = 0.5 * 32768 * np.sin(2 * np.pi * f * t_out).reshape(10, rate_out)
    inner = slice(1, 9)  # away from the clip's ends, where the resampler's filter has no data
    assert np.max(np.abs(s.audio[inner] - want[inner])) < 30  # LSB, of a 16384 amplitude


# ---------------------------------------------------------------- csv parsing


def test_csv_columns_by_header_crlf_blank_lines_and_filtering() -> None:
    text = ("scene_label\tfilename\textra\r\n"
            "airport\taudio/airport-lisbon-1000-40000-a.wav\tx\r\n"
            "\r\n"
            "bus\taudio/bus-milan-1-2-b.wav\tx\r\n"            # device b: not used
            "metro\taudio/metro-paris-3-4-a.wav\tx\r\n"        # scene not used
            "street_traffic\taudio/street_traffic-x-5-6-a.wav\tx\r\n")
    clips = dcase.parse_split_csv(text)
    assert [c.device for c in clips] == ["a", "b", "a", "a"]
    kept = dcase.select_clips(clips)
    assert [(c.filename, c.scene) for c in kept] == [
        ("audio/airport-lisbon-1000-40000-a.wav", "airport"),
        ("audio/street_traffic-x-5-6-a.wav", "street_traffic"),
    ]


@pytest.mark.parametrize(("text", "needle"), [
    ("", "empty"),
    ("filename,scene_label\na.wav,bus\n", "tab-separated"),
    ("filename\tscene_label\naudio/bus-a-1-2-a.wav\n", "line 2"),
    ("filename\tscene_label\naudio/bus.wav\tbus\n", "no device field"),
])
def test_bad_csv_is_refused_with_file_and_line(text: str, needle: str) -> None:
    with pytest.raises(DatasetError, match=needle) as info:
        dcase.parse_split_csv(text, "fold1_train.csv")
    assert "fold1_train.csv" in str(info.value)
    assert "evaluation_setup" in info.value.hint


# ---------------------------------------------------------------- missing files


def test_missing_root_csv_or_clip_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        dcase.load_split(tmp_path / "nope", "train", RATE)
    with pytest.raises(DatasetError, match=r"fold1_train\.csv is missing") as info:
        dcase.load_split(tmp_path, "train", RATE)
    assert "rig dataset synth" in info.value.hint
    write_tree(tmp_path, [("audio/park-x-1-2-a.wav", "park")])
    with pytest.raises(DatasetError, match=r"1 of 1 audio file.*park-x-1-2-a\.wav"):
        dcase.load_split(tmp_path, "train", RATE)
    write_tree(tmp_path, [("audio/park-x-1-2-b.wav", "park")])
    with pytest.raises(DatasetError, match="no clip"):
        dcase.load_split(tmp_path, "train", RATE)
    with pytest.raises(DatasetError, match="unknown split"):
        dcase.load_split(tmp_path, "validation", RATE)


def test_not_a_wav_is_a_clear_error(tmp_path: Path) -> None:
    write_tree(tmp_path, [("audio/park-x-1-2-a.wav", "park")])
    (tmp_path / "audio/park-x-1-2-a.wav").write_bytes(b"not audio")
    with pytest.raises(DatasetError, match="not a PCM wav"):
        dcase.load_split(tmp_path, "train", RATE)


# ---------------------------------------------------------------- cache


def test_cache_hit_then_stale_after_a_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    root = dcase.make_synthetic_dcase(tmp_path / "syn", 1, seed=1)
    assert dcase.cache_state(root, "train", RATE) == "absent"
    first = dcase.load_split(root, "train", RATE)
    assert dcase.cache_path(root / dcase.CACHE_DIRNAME, "train", RATE).is_file()
    assert dcase.cache_state(root, "train", RATE) == "fresh"

    def no_conversion(*_a: object, **_k: object) -> None:
        raise AssertionError("converted although the cache is fresh")

    monkeypatch.setattr(dcase, "convert_split", no_conversion)
    hit = dcase.load_split(root, "train", RATE)
    assert np.array_equal(hit.audio, first.audio) and hit.filenames == first.filenames
    assert hit.key == first.key
    monkeypatch.undo()

    # Drop one clip from the csv: the cache is stale and is rebuilt with 10 fewer slices.
    csv = root / dcase.SPLIT_FILES["train"]
    lines = csv.read_text().splitlines()
    csv.write_text("\n".join(lines[:-1]) + "\n")
    assert dcase.cache_state(root, "train", RATE) == "stale"
    rebuilt = dcase.load_split(root, "train", RATE)
    assert len(rebuilt) == len(first) - 10
    assert dcase.cache_state(root, "train", RATE) == "fresh"

    # A clip replaced by one of another length (size changes): stale again.
    dcase.write_wav(root / rebuilt.filenames[0], np.zeros(11 * RATE, np.int16), RATE)
    assert dcase.cache_state(root, "train", RATE) == "stale"
    assert len(dcase.load_split(root, "train", RATE)) == len(rebuilt) + 1


def test_corrupt_cache_is_rebuilt(tmp_path: Path) -> None:
    root = dcase.make_synthetic_dcase(tmp_path / "syn", 1, seed=2)
    path = dcase.cache_path(root / dcase.CACHE_DIRNAME, "test", RATE)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"garbage")
    assert dcase.cache_state(root, "test", RATE) == "stale"
    assert len(dcase.load_split(root, "test", RATE)) == 40


# ---------------------------------------------------------------- CLI


def test_cli_synth_and_info_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "syn"
    assert main(["dataset", "synth", "--out", str(out), "--clips-per-class", "1",
                 "--seed", "4"]) == 0
    dcase.load_split(out, "test", 16_000)
    capsys.readouterr()
    assert main(["dataset", "info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["synthetic"] is True
    for split in ("train", "test"):
        s = info["splits"][split]
        assert (s["clips"], s["slices"], s["audio_rates_hz"]) == (4, 40, [RATE])
        assert s["per_scene"]["park"] == {"clips": 1, "slices": 10}
    assert info["splits"]["test"]["cache"] == {"16000 Hz": "fresh"}
    assert info["splits"]["train"]["cache"] == {}
    assert main(["dataset", "info", str(out)]) == 0
    assert "SYNTHETIC" in capsys.readouterr().out


def test_cli_info_on_a_missing_folder_exits_2(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dataset", "info", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "fold1_train.csv" in err


def test_two_writers_of_one_cache_file_cannot_write_into_each_others(tmp_path: Path,
                                                                     monkeypatch) -> None:
    """A second writer (another run on the host: here a thread) fills the same cache file while
    the first is writing: each writes its own file, both finish, the last rename wins whole."""
    import threading

    path = tmp_path / "cache" / "split.npz"
    savez = np.savez
    calls = []

    def savez_with_a_second_writer(f, **arrays):
        calls.append(arrays["x"][0])
        if len(calls) == 1:  # the first writer, half way: the second writes the whole file
            other = threading.Thread(target=dcase.save_npz, args=(path,),
                                     kwargs={"x": np.full(1000, 2.0)})
            other.start()
            other.join()
        savez(f, **arrays)

    monkeypatch.setattr(np, "savez", savez_with_a_second_writer)
    dcase.save_npz(path, x=np.full(1000, 1.0))
    assert calls == [1.0, 2.0]
    with np.load(path) as z:
        assert (z["x"] == 1.0).all()  # the first writer renamed last: its file, whole
    assert [p.name for p in path.parent.iterdir()] == ["split.npz"]  # no .partial left


def test_a_writer_that_fails_leaves_no_partial_file(tmp_path: Path, monkeypatch) -> None:
    def savez_fails(f, **arrays):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", savez_fails)
    with pytest.raises(OSError, match="No space"):
        dcase.save_npz(tmp_path / "split.npz", x=np.zeros(3))
    assert list(tmp_path.iterdir()) == []


def set_cache(monkeypatch: pytest.MonkeyPatch, root: Path) -> Path:
    monkeypatch.setenv("RIG_CACHE", str(root))
    return root / "datasets"


def test_a_set_made_for_fewer_samples_is_not_reused_for_more(tmp_path: Path,
                                                             monkeypatch) -> None:
    """ten 1 s slices per clip: 10 samples per class need 1 clip, 11 need 2. The old cache
    folder had no clip count in its name, so 11 got the 10 of the set made first."""
    from rig.datasets.testsets import synthetic_dcase_cached

    sets = set_cache(monkeypatch, tmp_path)
    one, two = synthetic_dcase_cached(1, 0), synthetic_dcase_cached(2, 0)
    assert one != two and sorted(p.name for p in sets.iterdir()) == sorted([one.name, two.name])
    for root, clips in ((one, 1), (two, 2)):
        split = dcase.load_split(root, "test", synthetic.RATE_HZ)
        assert np.bincount(split.labels).tolist() == [10 * clips] * len(synthetic.CLASSES)
    assert synthetic_dcase_cached(2, 0) == two  # made once


def test_a_set_interrupted_while_written_is_not_left_for_the_next_run(tmp_path: Path,
                                                                      monkeypatch) -> None:
    from rig.datasets import testsets

    sets = set_cache(monkeypatch, tmp_path)
    real, written = dcase.write_wav, []

    def unplugged(path, *args, **kwargs):
        if len(written) == 3:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the set
        written.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(dcase, "write_wav", unplugged)
    with pytest.raises(KeyboardInterrupt):
        testsets.synthetic_dcase_cached(1, 0)
    assert len(written) == 3 and not any(sets.iterdir())  # neither the set nor its draft
    monkeypatch.setattr(dcase, "write_wav", real)
    root = testsets.synthetic_dcase_cached(1, 0)
    assert len(list((root / "audio").iterdir())) == 2 * len(synthetic.CLASSES)  # train + test


def test_two_processes_making_one_set_at_once_both_read_it_whole(tmp_path: Path,
                                                                 monkeypatch) -> None:
    """Two writers in step (each held after its first file until both have one): the first
    rename wins, the second finds the set there, and each reads all of it."""
    import threading

    from rig.datasets import testsets

    sets = set_cache(monkeypatch, tmp_path)
    real, both = dcase.write_wav, threading.Barrier(2, timeout=30)
    firsts: set[int] = set()

    def in_step(path, *args, **kwargs):
        out = real(path, *args, **kwargs)
        if threading.get_ident() not in firsts:
            firsts.add(threading.get_ident())
            both.wait()
        return out

    monkeypatch.setattr(dcase, "write_wav", in_step)
    roots: list[Path] = []
    threads = [threading.Thread(target=lambda: roots.append(testsets.synthetic_dcase_cached(1, 7)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(roots) == 2 and roots[0] == roots[1]
    assert [p.name for p in sets.iterdir()] == [roots[0].name]  # no draft left behind
    split = dcase.load_split(roots[0], "test", synthetic.RATE_HZ)
    assert np.bincount(split.labels).tolist() == [10] * len(synthetic.CLASSES)
