"""ASC energy windows on an LPM01A above the ascii_dec rate limit are refused before any run
folder or port exists: the D7 event framing in bin_hexa is not public, so no window may be
placed from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rig.bench.config import load_bench
from rig.errors import ConfigError
from rig.run.measure import check_bench_setup

SIM_BENCH = Path(__file__).resolve().parents[2] / "benches" / "sim.toml"


@pytest.mark.parametrize("rate", [10_000, 100_000])
def test_energy_mode_above_the_ascii_limit_is_refused_with_the_reason_and_what_to_do(rate):
    bench = load_bench(SIM_BENCH, {"emon": {"sample_rate_hz": rate}})
    assert bench.dut.timestamp_mode == "energy" and bench.emon.driver == "lpm01a"
    with pytest.raises(ConfigError) as info:
        check_bench_setup(bench)
    assert "bin_hexa" in info.value.message and "not public" in info.value.message
    assert "only as a trigger" not in info.value.message
    assert "sample_rate_hz to 5000 or less" in info.value.hint


@pytest.mark.parametrize("rate", [1000, 5000])
def test_energy_mode_at_ascii_rates_is_accepted(rate):
    check_bench_setup(load_bench(SIM_BENCH, {"emon": {"sample_rate_hz": rate}}))


def test_performance_mode_above_the_ascii_limit_needs_no_edges_and_is_accepted():
    bench = load_bench(SIM_BENCH, {"emon": {"sample_rate_hz": 100_000},
                                   "dut": {"timestamp_mode": "performance"}})
    check_bench_setup(bench)


# -- every path that connects a bench refuses it alike, before any port ----------------------
REASON = ("bin_hexa", "not public", "ASC energy windows need both edges")
FIX = "sample_rate_hz to 5000 or less"


def fast_lpm_bench(tmp_path: Path, rate: int = 10_000) -> Path:
    """benches/sim.toml (an LPM01A, a DUT in energy mode) at `rate`."""
    text = SIM_BENCH.read_text()
    assert "sample_rate_hz = 1000\n" in text
    path = tmp_path / "fast-lpm.toml"
    path.write_text(text.replace("sample_rate_hz = 1000\n", f"sample_rate_hz = {rate}\n"))
    return path


@pytest.fixture
def nothing_opened(monkeypatch) -> list[str]:
    """Fails the test's bench connection at its first port: the virtual bench, a serial port or
    a monitor (the names of what was tried are listed)."""
    from rig.bench import virtual as sim_bench
    from rig.run import measure

    tried: list[str] = []

    def refuse(what: str):
        def opened(*args, **kwargs):
            tried.append(what)
            raise AssertionError(f"{what} opened for a bench that must be refused first")
        return opened

    monkeypatch.setattr(sim_bench.VirtualBenchProcess, "__init__", refuse("virtual bench"))
    monkeypatch.setattr(measure, "SerialTransport", refuse("serial port"))
    monkeypatch.setattr(measure, "open_bench_monitor", refuse("monitor"))
    return tried


def assert_refused(text: str, bench: Path) -> None:
    for part in REASON:
        assert part in text, text
    assert FIX in text and f"{bench}: [emon]" in text, text


@pytest.mark.parametrize("argv", [["devices", "--check"], ["devices", "--check", "--json"],
                                  ["dut", "info"]])
def test_the_cli_refuses_an_lpm01a_above_the_ascii_limit_in_energy_mode(
        argv, tmp_path: Path, capsys, nothing_opened) -> None:
    from rig.cli import main

    bench = fast_lpm_bench(tmp_path)
    assert main([*argv[:1], "--bench", str(bench), *argv[1:]]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith("rig: error: ")
    assert_refused(out.err, bench)
    assert nothing_opened == []


def test_check_bench_refuses_it_as_a_bench_error_not_a_device_state(tmp_path, nothing_opened):
    from rig.run.bench_check import check_bench

    bench = fast_lpm_bench(tmp_path)
    with pytest.raises(ConfigError) as info:
        check_bench(load_bench(bench))
    assert_refused(f"{info.value.message} ({info.value.hint})", bench)
    assert nothing_opened == []


def test_connect_bench_refuses_it_whoever_calls_it(tmp_path, nothing_opened):
    from rig.run.events import EventBus
    from rig.run.measure import BenchParts, connect_bench

    bench = fast_lpm_bench(tmp_path, 100_000)
    parts = BenchParts()
    with pytest.raises(ConfigError) as info:
        connect_bench(load_bench(bench), parts, EventBus())
    assert_refused(f"{info.value.message} ({info.value.hint})", bench)
    assert nothing_opened == [] and parts.emon is None and parts.vbench is None
    assert parts.shutdown() == []


def test_the_same_words_as_a_measurement(tmp_path):
    from rig.run.bench_check import check_bench

    bench = load_bench(fast_lpm_bench(tmp_path))
    with pytest.raises(ConfigError) as measured:
        check_bench_setup(bench)
    with pytest.raises(ConfigError) as checked:
        check_bench(bench)
    assert (checked.value.message, checked.value.hint) == (
        measured.value.message, measured.value.hint)


@pytest.mark.parametrize("rate", [1000, 5000])
def test_check_bench_still_connects_at_ascii_rates(rate, tmp_path, monkeypatch):
    """The refusal is the rate's, not the driver's: at 5 kHz or less the check goes on to the
    devices (here a virtual bench that cannot start, so no process is needed)."""
    from rig.bench import virtual as sim_bench
    from rig.run.bench_check import check_bench

    def no_pty(self, bench, **kwargs):
        raise ConfigError("the virtual bench did not start: no pty left", hint="free some")

    monkeypatch.setattr(sim_bench.VirtualBenchProcess, "__init__", no_pty)
    result = check_bench(load_bench(fast_lpm_bench(tmp_path, rate)))
    assert result.device("virtual_bench").state == "error"
