"""What the simulated world needs to know of a bench, read from the bench file itself.

The same `benches/*.toml` the rig reads; the virtual bench reads only its part: `[sim]` (power
levels, time per inference, speed, which DUT and IO manager, its noise), the DUT's timestamp
mode, the energy monitor it must be (driver, sample rate, supply) and whether an IO manager sits
in front of the DUT. The rig validates the whole file; this checks what the simulation relies on
and says what is wrong with a `BenchFileError`.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocols.errors import quoted
from virtual_bench.errors import BenchFileError

#: "auto": the host-built C shim when it is built or gcc can build it, else the Python DUT.
SIM_DUTS = ("auto", "c-shim", "python")
SIM_IO_MANAGERS = ("python", "simavr")
TIMESTAMP_MODES = ("energy", "performance")
#: `driver = "<name>-sim"` is the bench file's shorthand for that driver on the virtual bench.
SIM_SUFFIX = "-sim"
#: `[sim] speed`'s range, inclusive (the rig's `NUMBER_SPANS["sim.speed"]` is the same): below
#: 0.1 simulated seconds per host second the rig's host-time waits on the monitor (30 s + 10 x
#: idle_s) run out before simulated time gets there, and the stall looks like the DUT's; above
#: 10000 a monitor cannot stream its samples in time.
SPEED_RANGE = (0.1, 10_000.0)


@dataclass(frozen=True)
class BenchDescription:
    """The virtual bench's view of a bench file (defaults are the bench file's defaults)."""

    path: Path
    idle_power_mw: float = 1.20
    active_power_mw: float = 3.60
    inference_ms: float = 12.5
    #: Simulated seconds per host second.
    speed: float = 50.0
    dut: str = "auto"
    #: The simulated IO manager's kind, when the bench has one: "python" or "simavr".
    io_manager: str = "python"
    #: True when the bench routes the DUT through an IO manager (`[io_manager]`).
    has_io_manager: bool = False
    timestamp_mode: str = "energy"
    #: The energy monitor to simulate ("lpm01a", "joulescope", "n6705", "34465a", "otii",
    #: "ppk2"; anything else: none).
    emon_driver: str = "lpm01a"
    sample_rate_hz: float = 1000.0
    supply_voltage_v: float = 1.8
    #: The Python DUT's pty stands for a UART at this baud rate: downloads take its time
    #: (virtual_bench/dut.py). None: a pty's pace, the host's.
    uart_baud: float | None = None
    #: Standard deviation [A] of the white Gaussian noise on every current sample a simulated
    #: monitor reports (0: none, the closed-form answers are exact).
    current_noise_a: float = 0.0
    #: Run-to-run drift: each timed run's active power is active_power_mw x (1 + drift z),
    #: z ~ N(0, 1) drawn per run (a relative standard deviation; 0: none).
    drift: float = 0.0
    #: Seeds the noise and the drift: the same seed, the same noise.
    noise_seed: int = 0


def load_description(path: str | Path) -> BenchDescription:
    """Read the bench file at `path`; `BenchFileError` names the file and what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise BenchFileError(f"bench file does not exist: {path}",
                             hint="pass an existing bench TOML file (see benches/)")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BenchFileError(f"{path}: not valid TOML: {exc}", hint="fix the syntax") from exc
    return parse_description(raw, path)


def parse_description(raw: dict[str, Any], path: Path) -> BenchDescription:
    """The description in an already-parsed bench file."""
    sim = _table(raw, "sim", path)
    if sim is None:
        raise BenchFileError(f"{path}: no [sim] table", hint="a virtual bench needs [sim]")
    dut = _table(raw, "dut", path) or {}
    emon = _table(raw, "emon", path) or {}
    defaults = BenchDescription(path)
    driver = _text(emon, "driver", defaults.emon_driver, path, "emon")
    if driver.endswith(SIM_SUFFIX):
        driver = driver[: -len(SIM_SUFFIX)]
    description = BenchDescription(
        path=path,
        idle_power_mw=_positive(sim, "idle_power_mw", defaults.idle_power_mw, path, "sim"),
        active_power_mw=_positive(sim, "active_power_mw", defaults.active_power_mw, path, "sim"),
        inference_ms=_positive(sim, "inference_ms", defaults.inference_ms, path, "sim"),
        speed=_speed(sim, path),
        dut=_choice(sim, "dut", SIM_DUTS, path, "sim"),
        io_manager=_choice(sim, "io_manager", SIM_IO_MANAGERS, path, "sim"),
        has_io_manager=_table(raw, "io_manager", path) is not None,
        timestamp_mode=_choice(dut, "timestamp_mode", TIMESTAMP_MODES, path, "dut"),
        emon_driver=driver,
        sample_rate_hz=_positive(emon, "sample_rate_hz", defaults.sample_rate_hz, path, "emon"),
        supply_voltage_v=_positive(emon, "supply_voltage_v", defaults.supply_voltage_v, path,
                                   "emon"),
        uart_baud=(_positive(sim, "uart_baud", 115200, path, "sim")
                   if sim.get("uart_baud", 0) != 0 else None),  # 0: unset, as the rig writes it
        current_noise_a=_non_negative(sim, "current_noise_a", path, "sim"),
        drift=_non_negative(sim, "drift", path, "sim"),
        noise_seed=_seed(sim, "noise_seed", path, "sim"),
    )
    if description.uart_baud is not None and (description.dut != "python"
                                              or description.has_io_manager):
        raise BenchFileError(
            f"{path}: [sim] uart_baud paces the Python DUT's own line; this bench has "
            + ("an IO manager, whose line to the DUT is 9600 baud already"
               if description.has_io_manager else f"dut = {quoted(description.dut)}"),
            hint='set dut = "python" and drop [io_manager], or drop uart_baud')
    if description.active_power_mw < description.idle_power_mw:
        raise BenchFileError(
            f"{path}: [sim] active_power_mw ({description.active_power_mw}) is below "
            f"idle_power_mw ({description.idle_power_mw})",
            hint="a DUT draws at least its idle power while it computes",
        )
    return description


def _table(raw: dict[str, Any], key: str, path: Path) -> dict[str, Any] | None:
    table = raw.get(key)
    if table is not None and not isinstance(table, dict):
        raise BenchFileError(f"{path}: {key}: expected a table, found {type(table).__name__}",
                             hint=f"write it as [{key}]")
    return table


def _text(table: dict[str, Any], key: str, default: str, path: Path, where: str) -> str:
    value = table.get(key, default)
    if not isinstance(value, str):
        raise BenchFileError(f"{path}: [{where}] {key}: expected text, found {quoted(value)}",
                             hint=f'write it in quotes, e.g. {key} = "{default}"')
    return value


def _choice(table: dict[str, Any], key: str, choices: tuple[str, ...], path: Path,
            where: str) -> str:
    value = _text(table, key, choices[0], path, where)
    if value not in choices:
        raise BenchFileError(f"{path}: [{where}] {key}: expected one of {', '.join(choices)}, "
                             f"found {quoted(value)}", hint=f"use one of {', '.join(choices)}")
    return value


def _positive(table: dict[str, Any], key: str, default: float, path: Path, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BenchFileError(f"{path}: [{where}] {key}: expected a number, found {quoted(value)}",
                             hint=f"e.g. {key} = {default:g}")
    if not math.isfinite(value) or value <= 0:
        raise BenchFileError(f"{path}: [{where}] {key}: expected a positive number, "
                             f"found {quoted(value)}", hint=f"e.g. {key} = {default:g}")
    return float(value)


def _speed(table: dict[str, Any], path: Path) -> float:
    """`[sim] speed`, a number in `SPEED_RANGE`."""
    value = _positive(table, "speed", BenchDescription.speed, path, "sim")
    low, high = SPEED_RANGE
    if not low <= value <= high:
        raise BenchFileError(f"{path}: [sim] speed: expected a number in [{low:g}, {high:g}], "
                             f"found {quoted(value)}",
                             hint="simulated seconds per host second, e.g. speed = 50")
    return value


def _non_negative(table: dict[str, Any], key: str, path: Path, where: str) -> float:
    """A finite number >= 0 (default 0: off)."""
    value = table.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BenchFileError(f"{path}: [{where}] {key}: expected a number, found {quoted(value)}",
                             hint=f"e.g. {key} = 0 (off)")
    if not math.isfinite(value) or value < 0:
        raise BenchFileError(f"{path}: [{where}] {key}: expected a finite number >= 0, "
                             f"found {quoted(value)}", hint=f"e.g. {key} = 0 (off)")
    return float(value)


def _seed(table: dict[str, Any], key: str, path: Path, where: str) -> int:
    """An integer in [0, 2**32 - 1] (default 0), as the rig's seeds."""
    value = table.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise BenchFileError(f"{path}: [{where}] {key}: expected an integer in "
                             f"[0, 4294967295], found {quoted(value)}", hint=f"e.g. {key} = 0")
    return value
