"""Bench files: the wiring of one physical (or virtual) setup, loaded from TOML and validated.

Every problem is reported as a `ConfigError` naming the file, the key, what was expected and
what was found. A supply voltage above the bench limit is refused here, before any instrument
is touched.
"""

from __future__ import annotations

import os
import sys
import tomllib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drivers.emon import ranges
from drivers.emon.base import check_voltage
from drivers.errors import VoltageLimitError
from protocols.errors import quoted
from rig.bench.broker import check_power_rate, check_rig_name, parse_url
from rig.bench.numbers import Span, at_least, number, positive, refuse_non_finite
from rig.bench.worker import check_resources
from rig.errors import ConfigError

#: A port value that means "the virtual bench's pty for this device".
VIRTUAL_PORT = "virtual"
#: `[dut] port` of an emulated board: the pty of the QEMU the rig starts (`[qemu]`).
QEMU_PORT = "qemu"
#: `[dut] port` of a real bench's DUT that is reached only through its `[io_manager]` (the file
#: gives none: "virtual" would be the default, wrong in a real run's manifest).
IO_MANAGER_PORT = "through-io-manager"

DUT_KINDS = ("mlperf-tiny", "xylo")
EMON_DRIVERS = ("lpm01a", "joulescope", "n6705", "34465a", "ppk2", "otii", "rapl",
                "nvml", "none")
#: "<driver>-sim" is shorthand for that driver on the virtual bench (port = "virtual").
SIM_SUFFIX = "-sim"
TIMESTAMP_MODES = ("energy", "performance")
#: Where the DUT's timestamp line enters the monitor: "gpio" its own logic/trigger input (LPM01A
#: D7, Joulescope GPI0, a Keysight trigger, Otii GPI1), "aux" an N6781A/N6785A auxiliary voltage
#: input or an Otii's Sense+ input.
TIMESTAMP_INPUTS = ("gpio", "aux")
PPK2_MODES = ("source", "ampere")
DATASETS = ("synthetic-asc", "synthetic-dcase", "dcase2020")
#: "auto": the host-built C shim when it is built or gcc can build it, else the Python DUT.
SIM_DUTS = ("auto", "c-shim", "python")
SIM_IO_MANAGERS = ("python", "simavr")
#: How a DUT's firmware takes its inputs, fastest first: `bload` (raw bytes, CRC-32), `db` hex
#: checked by `db crc`, `db` hex read back by `db print` (all that plain MLPerf Tiny firmware
#: offers). The rig uses the fastest the DUT offers (`DutClient.load`).
DOWNLOADS = ("binary", "hex-crc", "hex-read-back")
#: Emulated boards with a DUT shim port (firmware/dut/<machine>).
QEMU_MACHINES = ("mps2-an386",)

if TYPE_CHECKING:  # typeshed's name for "a dataclass", for mypy only
    from _typeshed import DataclassInstance


@dataclass(frozen=True)
class DutConfig:
    """How to reach the device under test."""

    kind: str = "mlperf-tiny"
    port: str = VIRTUAL_PORT
    baud: int = 115200
    timestamp_mode: str = "energy"
    boot_timeout_s: float = 5.0
    #: kind = "xylo": the network spec file (relative paths: from the bench file's folder).
    spec: str = ""
    #: kind = "xylo": run on a Xylo Audio 2 HDK (needs samna) instead of XyloSim.
    hdk: bool = False
    #: kind = "xylo" on an HDK: how often the power rails are sampled [Hz]. 20 Hz as SynSense's
    #: power tutorial (rockpool docs/devices/quick-xylo/xylo-audio-power.ipynb); at Rockpool's
    #: 5 Hz a short evolve collects no sample.
    power_frequency_hz: float = 20.0
    #: Seconds one inference takes, as far as known (0: not declared). It only bounds the wait
    #: for the DUT's replies until the calibration run has measured the time.
    inference_time_s: float = 0.0
    #: How the firmware takes inputs (`DOWNLOADS`), as far as declared ("": not declared). It
    #: only prices the trace in the disk preflight; the run uses what `caps` offers and says
    #: so when that differs.
    download: str = ""
    #: The tolerance of the oscillator the DUT's timer runs on [ppm] (0: not declared; the
    #: DUT-timed budgets then name the DUT timer clock unknown). Needs `clock_source`.
    clock_ppm: float = 0.0
    #: Where `clock_ppm` comes from (the crystal's datasheet, a calibration), required with it.
    clock_source: str = ""


@dataclass(frozen=True)
class EmonAccuracyConfig:
    """`[emon.accuracy]`: accuracy figures the lab declares for its monitor where the vendor
    publishes none (or where the lab's calibration certificate is better): each one given
    overrides the driver's figure for that term only, and the manifest's declaration cites
    `source` (prefixed "lab: "). None: not given (the driver's figure stays)."""

    #: Where the figures come from, e.g. "calibration certificate 1234, 2026-03-01".
    source: str
    #: The current's gain error (a fraction of the reading), for every range.
    current_gain: float | None = None
    #: The current's offset error [A], for every range.
    current_offset_a: float | None = None
    #: The supply voltage's gain error (a fraction): the measured voltage's where the monitor
    #: measures it, else the set (or bench) supply's.
    voltage_gain: float | None = None
    #: The supply voltage's offset error [V].
    voltage_offset_v: float | None = None
    #: The monitor's sample clock tolerance [ppm].
    clock_ppm: float | None = None

    def given(self) -> list[str]:
        """The figures' keys given, in `EMON_ACCURACY_SPANS` order."""
        return [k for k in EMON_ACCURACY_SPANS if getattr(self, k) is not None]


@dataclass(frozen=True)
class EmonConfig:
    """The energy monitor and the supply it gives the DUT."""

    driver: str = "lpm01a"
    #: Serial port, device path or VISA resource: whatever reaches the instrument.
    port: str | None = VIRTUAL_PORT
    #: A VISA resource string; an alternative to `port` for the Keysight instruments.
    resource: str = ""
    sample_rate_hz: float = 1000.0
    supply_voltage_v: float = 1.8
    #: "auto", or a fixed current range as the driver names it (see `current_range_choices`):
    #: a Joulescope range ("18 mA"), amps for the Keysight instruments ("0.1").
    current_range: str = "auto"
    #: "gpio", or "aux": an N6705 logs the line on its N6781A/N6785A's auxiliary voltage input
    #: beside the current (drivers/emon/keysight.py), so it sees every edge (ASC energy).
    timestamp_input: str = "gpio"
    #: A PPK2's meter mode: "source" (it supplies the DUT from its regulator) or "ampere" (the
    #: bench's supply feeds the DUT through it; `supply_voltage_v` is that supply's voltage).
    ppk2_mode: str = "source"

    @property
    def address(self) -> str:
        """Where the instrument is reached."""
        return self.resource or self.port or ""


@dataclass(frozen=True)
class IoManagerConfig:
    """An Arduino UNO IO manager between the rig and the DUT (energy mode): the rig talks to
    the DUT through its pass-through, and `[dut] port` is then not opened by the rig."""

    port: str = VIRTUAL_PORT
    baud: int = 115200


@dataclass(frozen=True)
class DatasetConfig:
    """Which test set goes through the DUT."""

    name: str = "synthetic-asc"
    #: Test samples per class (0 = every sample of the split; DCASE layouts only).
    samples_per_class: int = 10
    seed: int = 0
    #: dcase2020: the TAU Urban Acoustic Scenes 2020 Mobile folder.
    path: str = ""
    #: Rate the DCASE audio is resampled to before pre-processing [Hz].
    rate_hz: int = 8000


@dataclass(frozen=True)
class AscOptions:
    """The ASC method's knobs (defaults are the spec's)."""

    runs: int = 5
    min_run_s: float = 10.0
    min_iterations: int = 10
    warmup: int = 1
    calibration_iterations: int = 10
    idle_s: float = 2.0
    replicability_tolerance: float = 0.05
    #: The largest relative expanded uncertainty an ASC figure may have: U (about 95 %) over
    #: the figure's magnitude (0: no bound, no check). The `uncertainty within bound` check
    #: fails the run naming each figure beyond it, and each figure whose budget has a term
    #: not published.
    max_relative_uncertainty: float = 0.0


@dataclass(frozen=True)
class SimConfig:
    """The virtual bench's power model and clock."""

    idle_power_mw: float = 1.20
    active_power_mw: float = 3.60
    inference_ms: float = 12.5
    speed: float = 50.0
    dut: str = "auto"
    #: The IO manager in front of the DUT: "python" (virtual_bench.io_manager) or "simavr" (the
    #: sketch's real AVR build on simavr, virtual_bench.simavr_uno; `make firmware-avr`).
    io_manager: str = "python"
    #: dut = "python" without an IO manager: its pty stands for a UART at this baud rate, so
    #: that downloads take a real line's time (0, unset: a pty's pace, the host's).
    uart_baud: float = 0.0
    #: White Gaussian noise added to every current sample each simulated monitor reports: its
    #: standard deviation in A (0, the default: none, so the closed-form answers stay exact).
    current_noise_a: float = 0.0
    #: Run-to-run drift: each timed run's active power is active_power_mw x (1 + drift z), z
    #: ~ N(0, 1) drawn once per run (a relative standard deviation; 0, the default: none).
    drift: float = 0.0
    #: Seeds the current noise and the drift: the same seed, the same noise.
    noise_seed: int = 0


@dataclass(frozen=True)
class QemuConfig:
    """`[qemu]`: the DUT firmware runs on an emulated board the rig starts (drivers/dut/qemu.py);
    every figure of such a run is labelled emulated."""

    machine: str = "mps2-an386"
    #: The firmware image (relative paths: from the bench file's folder).
    firmware: str = ""
    #: -icount shift: each guest instruction takes 2^shift ns of guest time.
    icount_shift: int = 5


@dataclass(frozen=True)
class MqttConfig:
    """`[mqtt]`: the lab's broker (see `rig.bench.broker`). Never a password: that comes from
    RIG_MQTT_PASSWORD or --mqtt-password-file."""

    url: str = ""
    #: The rig's name on the broker (default: the broker user name, else the host name).
    rig: str = ""
    #: PEM file of the CA that signed the broker's certificate (turns TLS on).
    ca_file: str = ""
    power_rate_hz: float = 2.0
    #: Run events held while the broker is away; more are dropped (and counted).
    queue: int = 1000


@dataclass(frozen=True)
class WorkerConfig:
    """`[worker]`: what `rig worker --bench` owns on a sweep cluster (rig/cluster): one unit of
    each resource (`rig.bench.worker.KNOWN_RESOURCES`), and the worker's name ("": the
    host name)."""

    resources: dict[str, int]
    name: str = ""


@dataclass(frozen=True)
class Bench:
    """A validated bench file. A worker file (benches/workers/: `[worker]` and no DUT-side
    table) drives no DUT: `worker_only`, voltage limit 0 V and no monitor."""

    name: str
    path: Path
    voltage_limit_v: float
    dut: DutConfig
    emon: EmonConfig
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    asc: AscOptions = field(default_factory=AscOptions)
    sim: SimConfig | None = None
    io_manager: IoManagerConfig | None = None
    mqtt: MqttConfig | None = None
    #: True for the virtual bench and for benches attached to one: every number is simulated.
    simulated: bool = False
    qemu: QemuConfig | None = None
    worker: WorkerConfig | None = None
    #: A worker file: what a cluster worker owns, no DUT to measure.
    worker_only: bool = False
    #: `[emon.accuracy]`: the lab's own accuracy figures for its monitor (None: none given).
    emon_accuracy: EmonAccuracyConfig | None = None

    def require_dut(self) -> None:
        """ConfigError for a worker file given where a DUT is to be driven."""
        if self.worker_only:
            raise ConfigError(f"{self.path} is a worker file: it names what a cluster worker "
                              "owns, not a DUT to measure",
                              hint=f"serve it with `rig worker --scheduler ADDRESS --bench "
                                   f"{self.path}`, or pass a bench file with [dut] and [emon]")

    @property
    def emulated(self) -> str:
        """The emulated label of a bench whose DUT runs under QEMU ("" for any other)."""
        from drivers.dut.qemu import emulated_label

        q = self.qemu
        return "" if q is None else emulated_label(q.machine, q.icount_shift)

    def snapshot(self) -> dict[str, Any]:
        """Every setting, as plain data, for the run manifest."""
        data = asdict(self)
        data["path"] = str(self.path)
        return data


#: Where every number of a bench file may lie, by "table.key" (`rig.bench.numbers.number` checks
#: each when the file is loaded). Every int or float field of the tables above has an entry
#: (tests/rig/test_file_numbers.py checks it): wide enough for any real bench, narrow enough
#: that nothing downstream overflows or waits forever.
SEED_SPAN = at_least(0, 2**32 - 1)
BAUD_SPAN = positive(20e6, "baud")
NUMBER_SPANS: dict[str, Span] = {
    "bench.voltage_limit_v": positive(60.0, "V"),
    "dut.baud": BAUD_SPAN,
    "dut.boot_timeout_s": positive(3600.0, "s"),
    "dut.power_frequency_hz": positive(1e3, "Hz"),
    # The DUT's declared time per inference (0: not declared; the deadlines then use [sim] or
    # the calibration run).
    "dut.inference_time_s": at_least(0.0, 3600.0, "s"),
    # The DUT oscillator's tolerance (0: not declared).
    "dut.clock_ppm": at_least(0.0, 1e6, "ppm"),
    "emon.sample_rate_hz": positive(10e6, "Hz"),
    "emon.supply_voltage_v": positive(60.0, "V"),
    "io_manager.baud": BAUD_SPAN,
    "dataset.samples_per_class": at_least(0, 1_000_000),
    "dataset.seed": SEED_SPAN,
    "dataset.rate_hz": positive(384_000, "Hz"),
    "procedure.asc.runs": at_least(1, 10_000),
    "procedure.asc.min_run_s": positive(86_400.0, "s"),
    "procedure.asc.min_iterations": at_least(1, 10**9),
    "procedure.asc.warmup": at_least(0, 10**6),
    "procedure.asc.calibration_iterations": at_least(1, 10**6),
    "procedure.asc.idle_s": positive(3600.0, "s"),
    "procedure.asc.replicability_tolerance": Span(0.0, 1.0, low_open=True),
    # A bound in (0, 1], or 0: no bound (the default; a saved bench writes every key, so the
    # "unset" value must load back, as `dut.inference_time_s`'s 0 does).
    "procedure.asc.max_relative_uncertainty": at_least(0.0, 1.0),
    "sim.idle_power_mw": positive(1e6, "mW"),
    "sim.active_power_mw": positive(1e6, "mW"),
    "sim.inference_ms": positive(3.6e6, "ms"),
    # Simulated seconds per host second: below 0.1 the rig's host-time waits on the monitor
    # (30 s + 10 x idle_s) run out before simulated time gets there (virtual_bench/description.py
    # SPEED_RANGE is the same).
    "sim.speed": at_least(0.1, 10_000.0),
    "sim.uart_baud": at_least(0.0, 20e6, "baud"),  # 0: unset
    "sim.current_noise_a": at_least(0.0, 10.0, "A"),  # 0: off
    "sim.drift": at_least(0.0, 1.0),  # 0: off
    "sim.noise_seed": SEED_SPAN,
    "mqtt.power_rate_hz": positive(10.0, "Hz"),
    "mqtt.queue": at_least(1, 10**7),
}
#: What a refused number means, for the keys whose span alone does not say why.
SPEED_HINT = ("simulated seconds per host second: below 0.1 the rig's waits on the monitor run "
              "out before simulated time gets there, and the stall reads as the DUT's; e.g. "
              "speed = 50")
NUMBER_HINTS: dict[str, str] = {"sim.speed": SPEED_HINT}
#: `[emon.accuracy]`'s figures and where each may lie (half-widths: >= 0; `source` is text).
EMON_ACCURACY_SPANS: dict[str, Span] = {
    "current_gain": at_least(0.0, 1.0),
    "current_offset_a": at_least(0.0, 10.0, "A"),
    "voltage_gain": at_least(0.0, 1.0),
    "voltage_offset_v": at_least(0.0, 60.0, "V"),
    "clock_ppm": at_least(0.0, 1e6, "ppm"),
}
#: The words a text key of a bench file takes, by "table.key" (`_choice` checks each; `[emon]
#: driver` also takes "<driver>-sim", the virtual bench's).
CHOICES: dict[str, tuple[str, ...]] = {
    "dut.kind": DUT_KINDS,
    "dut.timestamp_mode": TIMESTAMP_MODES,
    "dut.download": DOWNLOADS,
    "emon.driver": EMON_DRIVERS,
    "emon.timestamp_input": TIMESTAMP_INPUTS,
    "emon.ppk2_mode": PPK2_MODES,
    "dataset.name": DATASETS,
    "sim.dut": SIM_DUTS,
    "sim.io_manager": SIM_IO_MANAGERS,
    "qemu.machine": QEMU_MACHINES,
}
#: Keys of the `[bench]` and `[worker]` tables (the other tables' keys are their dataclasses').
BENCH_KEYS = ("name", "voltage_limit_v", "simulated")
WORKER_KEYS = ("name", "resources")
#: `[worker] resources` counts: one unit each (one instrument measures one point at a time).
WORKER_RESOURCE_SPAN = Span(1, 1)
#: Tables of a bench that drives a DUT; a file with `[worker]` and none of them is a worker file.
DUT_TABLES = ("dut", "emon", "dataset", "sim", "io_manager", "qemu", "procedure")

_SECTIONS: dict[str, type] = {
    "dut": DutConfig,
    "emon": EmonConfig,
    "dataset": DatasetConfig,
    "sim": SimConfig,
    "io_manager": IoManagerConfig,
    "mqtt": MqttConfig,
    "qemu": QemuConfig,
}


#: The folder the rig's own benches/, sweeps/ and firmware/ sit in: the repository in a checkout,
#: site-packages in an installed copy (the wheel keeps the checkout's layout).
SHIPPED_ROOT = Path(__file__).resolve().parents[2]
#: The file `rig init` writes at the top of a lab folder; the rig finds it from the working
#: folder upwards.
LAB_MARKER = "rig-lab.toml"
#: An environment variable naming the lab folder; it wins over the marker search.
LAB_ENV = "RIG_LAB"
#: Where a bench named by `--device NAME` is looked for, in this order.
ORIGINS = ("./benches", "lab", "package")


@dataclass(frozen=True)
class BenchEntry:
    """One bench file the rig can see: its name, its file and where that came from."""

    name: str
    path: Path
    #: "./benches" (the working folder's), "lab" (the lab folder's) or "package" (shipped).
    origin: str


def lab_folder() -> Path | None:
    """The lab folder: $RIG_LAB, else the nearest folder from the working folder upwards that
    holds `rig-lab.toml` (what `rig init` writes), else None."""
    named = os.environ.get(LAB_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_dir():
            raise ConfigError(f"{LAB_ENV}={named}: not a folder",
                              hint="make one with `rig init DIR`, or unset RIG_LAB")
        return path.resolve()
    cwd = Path.cwd()
    return next((d for d in (cwd, *cwd.parents) if (d / LAB_MARKER).is_file()), None)


def bench_folders() -> list[tuple[str, Path]]:
    """(origin, folder) of every benches folder there is, in lookup order; a folder reached two
    ways (the checkout's own, or a lab entered with cd) counts once, under its first origin."""
    lab = lab_folder()
    here: Path | None = Path.cwd() / "benches"
    if lab is not None and here is not None and here.resolve() == (lab / "benches").resolve():
        here = None  # working in the lab: its benches are the lab's
    candidates = [("./benches", here), ("lab", lab / "benches" if lab else None),
                  ("package", SHIPPED_ROOT / "benches")]
    out: list[tuple[str, Path]] = []
    seen: set[Path] = set()
    for origin, folder in candidates:
        if folder is None or not folder.is_dir() or folder.resolve() in seen:
            continue
        seen.add(folder.resolve())
        out.append((origin, folder))
    return out


def bench_entries() -> list[BenchEntry]:
    """Every named bench the rig can see, by name, then in lookup order (the first one of a name
    is the one `--device NAME` takes)."""
    found = [BenchEntry(p.stem, p, origin) for origin, folder in bench_folders()
             for p in sorted(folder.glob("*.toml"))]
    order = {origin: i for i, origin in enumerate(ORIGINS)}
    return sorted(found, key=lambda e: (e.name, order[e.origin]))


def benches_dir() -> Path:
    """The first benches folder in lookup order (./benches, the lab's, the package's): where the
    GUI opens and saves bench files."""
    folders = bench_folders()
    return folders[0][1] if folders else SHIPPED_ROOT / "benches"


def sweeps_dir() -> Path:
    """The first sweeps folder there is: ./sweeps, the lab's, else the package's."""
    lab = lab_folder()
    candidates = [Path.cwd() / "sweeps", *([lab / "sweeps"] if lab else []),
                  SHIPPED_ROOT / "sweeps"]
    return next((d for d in candidates if d.is_dir()), candidates[-1])


def known_devices() -> list[str]:
    """Names accepted by `--device` (bench files in any of `bench_folders()`)."""
    return sorted({e.name for e in bench_entries()})


def resolve_device(name: str) -> Path:
    """Map `--device NAME` to its bench file: ./benches, then the lab folder, then the package.
    A name found in more than one place takes the first and says so on stderr (a note, not an
    error); an unknown name is a ConfigError listing the names there are."""
    found = [e for e in bench_entries() if e.name == name]
    if not found:
        known = ", ".join(known_devices()) or "(none)"
        raise ConfigError(
            f"unknown device {quoted(name)}",
            hint=f"known devices: {known}; or pass --bench FILE (`rig benches` lists them)",
        )
    if len(found) > 1:
        others = "; ".join(f"{e.origin}: {e.path}" for e in found[1:])
        print(f"note: bench {name!r} found in {len(found)} places; using {found[0].path} "
              f"({found[0].origin}), not {others}", file=sys.stderr)
    return found[0].path


def bench_relative(bench_file: Path, value: str, key: str = "path") -> Path:
    """A path a bench file gives (`[dut] spec`, `[qemu] firmware`): from the file's folder; where
    nothing is there, from the shipped benches folder, so that a lab's copy (`rig init`) of a
    shipped bench still finds `../firmware/...` in the installed package. Absolute as given.
    ConfigError naming `key` for a path the system cannot even look up (a name too long)."""
    try:
        own = (bench_file.parent / value).resolve()
        if own.exists() or Path(value).is_absolute():
            return own
        shipped = (SHIPPED_ROOT / "benches" / value).resolve()
        return shipped if shipped.exists() else own
    except OSError as exc:
        raise ConfigError(f"{bench_file}: {key} {quoted(value)}: {exc.strerror or exc}",
                          hint="give the path of an existing file") from None


def read_toml(path: Path, missing: str, hint: str) -> dict[str, Any]:
    """A TOML file's tables; a missing file or bad syntax is a ConfigError naming the file."""
    if not path.is_file():
        raise ConfigError(f"{missing}: {path}", hint=hint)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}", hint="fix the syntax") from exc


def load_bench(path: str | Path, overrides: dict[str, dict[str, Any]] | None = None) -> Bench:
    """Read and validate a bench file; `overrides` ({section: {key: value}}, e.g. from the
    command line) replace the file's values before validation, so they are checked alike."""
    path = Path(path)
    raw = read_toml(path, "bench file does not exist",
                    "pass an existing TOML file, or --device NAME (see benches/)")
    for section, values in (overrides or {}).items():
        table = raw.setdefault(section, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: {section}: expected a table, found {type(table).__name__}")
        table.update(values)
    return parse_bench(raw, path)


def parse_bench(raw: dict[str, Any], path: Path) -> Bench:
    """Validate an already-parsed bench table."""
    # [worker]: what `rig worker --bench` owns on a sweep cluster (read by rig/cluster).
    known_top = {"bench", "procedure", "worker", *_SECTIONS}
    _no_unknown(raw, known_top, path, "")
    top = raw.get("bench", {})
    _is_table(top, path, "bench")
    _no_unknown(top, set(BENCH_KEYS), path, "bench")
    name = _typed(top, "name", str, path, "bench", default=path.stem)
    worker = _worker(raw["worker"], path) if "worker" in raw else None
    if worker is not None and not any(t in raw for t in DUT_TABLES):
        return _worker_bench(raw, top, name, worker, path)
    if "voltage_limit_v" not in top:
        raise ConfigError(
            f"{path}: [bench] voltage_limit_v is missing",
            hint="state the highest supply voltage the DUT may get, e.g. voltage_limit_v = 3.3",
        )
    limit = number(top["voltage_limit_v"], path=path, table="bench", key="voltage_limit_v",
                   span=NUMBER_SPANS["bench.voltage_limit_v"],
                   hint="the highest supply voltage the DUT may get, e.g. voltage_limit_v = 3.3")

    sections: dict[str, Any] = {}
    emon_accuracy: EmonAccuracyConfig | None = None
    for key, cls in _SECTIONS.items():
        table = raw.get(key)
        if table is None:
            sections[key] = None if key in ("sim", "io_manager", "mqtt", "qemu") else cls()
            continue
        _is_table(table, path, key)
        if key == "mqtt":
            _check_mqtt_table(table, path)
        if key == "emon":
            table = _range_as_text(table)
            if "accuracy" in table:
                table = dict(table)
                emon_accuracy = _emon_accuracy(table.pop("accuracy"), path)
        sections[key] = _dataclass_from(cls, table, path, key)

    proc = raw.get("procedure", {})
    _is_table(proc, path, "procedure")
    _no_unknown(proc, {"asc"}, path, "procedure")
    asc_raw = proc.get("asc", {})
    _is_table(asc_raw, path, "procedure.asc")
    asc = _dataclass_from(AscOptions, asc_raw, path, "procedure.asc")

    dut: DutConfig = sections["dut"]
    emon: EmonConfig = sections["emon"]
    dataset: DatasetConfig = sections["dataset"]
    sim: SimConfig | None = sections["sim"]
    io_manager: IoManagerConfig | None = sections["io_manager"]
    _choice(dut.kind, path, "dut.kind")
    _choice(dut.timestamp_mode, path, "dut.timestamp_mode")
    _check_download(dut, io_manager, path)
    if dut.clock_ppm > 0 and not dut.clock_source.strip():
        raise ConfigError(f"{path}: [dut] clock_ppm is given without clock_source",
                          hint='say where the tolerance comes from, e.g. clock_source = '
                               '"crystal datasheet ABM8-8.000MHZ, +-20 ppm"')
    if io_manager is not None and sim is None and "port" not in raw.get("dut", {}):
        dut = replace(dut, port=IO_MANAGER_PORT)
    if emon.driver.endswith(SIM_SUFFIX) and emon.driver[: -len(SIM_SUFFIX)] in EMON_DRIVERS:
        if emon.port not in (VIRTUAL_PORT, None, "") or emon.resource:
            raise ConfigError(
                f"{path}: [emon] driver {quoted(emon.driver)} is simulated but port/resource is "
                "set",
                hint=f'drop the port, or use driver = "{emon.driver[: -len(SIM_SUFFIX)]}"',
            )
        emon = replace(emon, driver=emon.driver[: -len(SIM_SUFFIX)], port=VIRTUAL_PORT)
    _choice(emon.driver, path, "emon.driver")
    emon = replace(emon, current_range=_current_range(emon, path))
    _check_timestamp_input(emon, path)
    _check_ppk2_mode(emon, path)
    _choice(dataset.name, path, "dataset.name")
    if dataset.name == "synthetic-asc":
        _positive(dataset.samples_per_class, path, "dataset.samples_per_class")
    if dataset.name == "dcase2020" and not dataset.path:
        raise ConfigError(f"{path}: [dataset] path is missing",
                          hint="the TAU Urban Acoustic Scenes 2020 Mobile folder")
    if dut.kind == "xylo":
        if not dut.spec:
            raise ConfigError(f"{path}: [dut] spec is missing",
                              hint="the Xylo network spec file, e.g. "
                              "firmware/xylo/models/asc_synthetic.npz")
        spec_path = bench_relative(path, dut.spec, "[dut] spec")
        if not spec_path.is_file():
            raise ConfigError(f"{path}: [dut] spec {quoted(dut.spec)} does not exist "
                              f"({quoted(str(spec_path))})",
                              hint="train one with `rig model train xylo --out FILE`")
        dut = replace(dut, spec=str(spec_path))
        if dataset.name == "synthetic-asc":
            raise ConfigError(f"{path}: [dataset] name: a Xylo takes spike rasters from its "
                              "analog front end; found 'synthetic-asc' (audio for the C shim)",
                              hint='use name = "synthetic-dcase" or "dcase2020"')
    if emon.driver != "none":
        if not emon.address:
            raise ConfigError(f"{path}: [emon] port is missing", hint="the monitor's serial port")
        try:
            check_voltage(emon.supply_voltage_v, limit, who=f"{path}: [emon] supply_voltage_v")
        except VoltageLimitError as exc:
            raise VoltageLimitError(exc.message, hint=exc.hint) from None
    if sim is not None:
        _choice(sim.dut, path, "sim.dut")
        _choice(sim.io_manager, path, "sim.io_manager")
        if sim.uart_baud and (sim.dut != "python" or io_manager is not None):
            raise ConfigError(
                f"{path}: [sim] uart_baud paces the Python DUT's own line; this bench has "
                + ("an IO manager, whose line to the DUT is 9600 baud already"
                   if io_manager is not None else f"dut = {quoted(sim.dut)}"),
                hint='set dut = "python" and drop [io_manager], or drop uart_baud')
        if sim.active_power_mw < sim.idle_power_mw:
            raise ConfigError(
                f"{path}: [sim] active_power_mw ({sim.active_power_mw}) is below idle_power_mw "
                f"({sim.idle_power_mw})",
                hint="a DUT draws at least its idle power while it computes",
            )
    uses_virtual = (
        (dut.port == VIRTUAL_PORT and io_manager is None)
        or (emon.driver != "none" and emon.port == VIRTUAL_PORT)
        or (io_manager is not None and io_manager.port == VIRTUAL_PORT)
    )
    if uses_virtual and sim is None:
        raise ConfigError(
            f'{path}: port = "{VIRTUAL_PORT}" needs a [sim] table',
            hint="add [sim] to run on the virtual bench, or give the real serial port",
        )
    qemu = _check_qemu(sections["qemu"], dut, emon, path)
    flagged = bool(_typed(top, "simulated", bool, path, "bench", default=False))
    refuse_non_finite(raw, path)  # the backstop: no nan/inf anywhere, known key or not
    simulated = flagged or sim is not None
    return Bench(
        name=name,
        path=path,
        voltage_limit_v=limit,
        dut=dut,
        emon=emon,
        dataset=dataset,
        asc=asc,
        sim=sim,
        io_manager=io_manager,
        mqtt=_mqtt_paths(sections["mqtt"], path),
        simulated=simulated,
        qemu=qemu,
        worker=worker,
        emon_accuracy=emon_accuracy,
    )


def _emon_accuracy(table: Any, path: Path) -> EmonAccuracyConfig | None:
    """`[emon.accuracy]`: known keys, each figure finite and >= 0, and `source` whenever a
    figure is given; None when it gives no figure."""
    section = "emon.accuracy"
    _is_table(table, path, section)
    _no_unknown(table, {"source", *EMON_ACCURACY_SPANS}, path, section)
    source = _typed(table, "source", str, path, section, default="")
    figures = {key: number(table[key], path=path, table=section, key=key,
                           span=EMON_ACCURACY_SPANS[key])
               for key in EMON_ACCURACY_SPANS if key in table}
    if not figures:
        return None
    if not source.strip():
        raise ConfigError(f"{path}: [emon.accuracy] source is missing: every figure a lab "
                          "declares cites where it comes from",
                          hint='e.g. source = "calibration certificate 1234, 2026-03-01"')
    return EmonAccuracyConfig(source=source.strip(), **figures)


def _worker(table: Any, path: Path) -> WorkerConfig:
    """`[worker]`: known keys, a resources table of known names, one unit each."""
    _is_table(table, path, "worker")
    _no_unknown(table, set(WORKER_KEYS), path, "worker")
    name = _typed(table, "name", str, path, "worker", default="")
    if "name" in table and not name.strip():
        raise ConfigError(f"{path}: [worker] name: expected a non-empty string, found "
                          f"{quoted(name)}",
                          hint="drop it to use the host name")
    if "resources" not in table:
        raise ConfigError(f"{path}: [worker] resources is missing",
                          hint="name what this host owns, e.g. resources = { cpu-tabu = 1 }")
    resources = table["resources"]
    if not isinstance(resources, dict):
        raise ConfigError(f"{path}: [worker] resources: expected a table such as "
                          f"{{ cpu-tabu = 1 }}, found {quoted(resources)}")
    where = f"{path}: [worker] resources"
    check_resources(dict.fromkeys(resources, 1), where)  # the names, before their counts
    for key, value in resources.items():
        number(value, path=path, table="worker.resources", key=key, kind=int,
               span=WORKER_RESOURCE_SPAN,
               hint="one instrument measures one point at a time; a second instrument of the "
                    "same kind is a second worker (on its own host)")
    return WorkerConfig(resources=check_resources(resources, where), name=name)


def _worker_bench(raw: dict[str, Any], top: dict[str, Any], name: str, worker: WorkerConfig,
                  path: Path) -> Bench:
    """A worker file: no DUT, no monitor, nothing may be powered (voltage limit 0 V unless the
    file states one)."""
    limit = 0.0
    if "voltage_limit_v" in top:
        limit = number(top["voltage_limit_v"], path=path, table="bench", key="voltage_limit_v",
                       span=NUMBER_SPANS["bench.voltage_limit_v"])
    mqtt = raw.get("mqtt")
    if mqtt is not None:
        _is_table(mqtt, path, "mqtt")
        _check_mqtt_table(mqtt, path)
        mqtt = _mqtt_paths(_dataclass_from(MqttConfig, mqtt, path, "mqtt"), path)
    flagged = bool(_typed(top, "simulated", bool, path, "bench", default=False))
    refuse_non_finite(raw, path)
    return Bench(name=name, path=path, voltage_limit_v=limit, dut=DutConfig(port=""),
                 emon=EmonConfig(driver="none", port=None), mqtt=mqtt, simulated=flagged,
                 worker=worker, worker_only=True)


def _check_download(dut: DutConfig, io_manager: IoManagerConfig | None, path: Path) -> None:
    """`[dut] download`: one of `DOWNLOADS`, for firmware that takes inputs over its UART."""
    if not dut.download:
        return
    _choice(dut.download, path, "dut.download")
    if dut.kind == "xylo":
        raise ConfigError(f"{path}: [dut] download: a Xylo's inputs go through Rockpool/samna, "
                          "not a UART download", hint="drop the line")
    if dut.download == "binary" and io_manager is not None:
        raise ConfigError(f'{path}: [dut] download = "binary" behind an IO manager, whose '
                          "pass-through carries commands, not raw bytes",
                          hint='use "hex-crc" (firmware offering db crc) or "hex-read-back"')


def _check_qemu(qemu: QemuConfig | None, dut: DutConfig, emon: EmonConfig,
                path: Path) -> QemuConfig | None:
    """`[qemu]` and `[dut] port = "qemu"` go together; the image path is made absolute."""
    if qemu is None:
        if dut.port == QEMU_PORT:
            raise ConfigError(f'{path}: [dut] port = "{QEMU_PORT}" needs a [qemu] table',
                              hint='add [qemu] with machine = "mps2-an386" and the firmware '
                                   "image, or give the DUT's real serial port")
        return None
    if dut.port != QEMU_PORT:
        raise ConfigError(f"{path}: [qemu] is set but [dut] port is {quoted(dut.port)}",
                          hint=f'use port = "{QEMU_PORT}" to reach the emulated board')
    _choice(qemu.machine, path, "qemu.machine")
    if not qemu.firmware:
        raise ConfigError(f"{path}: [qemu] firmware is missing",
                          hint="the ELF image `make firmware-arm` builds, e.g. "
                               '"../build/firmware/arm/dut-mps2-an386.elf"')
    if not 0 <= qemu.icount_shift <= 10:
        raise ConfigError(f"{path}: [qemu] icount_shift: expected an integer 0..10, found "
                          f"{qemu.icount_shift}", hint="5: 32 ns per guest instruction")
    if dut.timestamp_mode != "performance" or emon.driver != "none":
        raise ConfigError(f"{path}: the emulated {qemu.machine} serves performance timestamp "
                          "mode without an energy monitor (it has no supply or timestamp line "
                          "to measure)",
                          hint='set [dut] timestamp_mode = "performance" and [emon] driver = '
                               '"none"')
    return replace(qemu, firmware=str(bench_relative(path, qemu.firmware, "[qemu] firmware")))


def current_range_choices(driver: str) -> tuple[str, ...] | None:
    """Every `[emon] current_range` value `driver` takes, or None when it takes amps in a span
    (the Keysight instruments: see `current_range_help`)."""
    return ranges.choices(driver[: -len(SIM_SUFFIX)] if driver.endswith(SIM_SUFFIX) else driver)


def current_range_help(driver: str) -> str:
    """What `[emon] current_range` takes for `driver`, in words."""
    return ranges.accepted(driver[: -len(SIM_SUFFIX)] if driver.endswith(SIM_SUFFIX) else driver)


def normalize_current_range(driver: str, value: str | float) -> str:
    """`value` spelled the way `driver` takes it ("18mA" -> "18 mA" for a Joulescope, "1e-3" ->
    "0.001" for a Keysight); `ConfigError` listing what the driver takes otherwise."""
    name = driver[: -len(SIM_SUFFIX)] if driver.endswith(SIM_SUFFIX) else driver
    try:
        return ranges.normalize(name, value)
    except ranges.RangeError as exc:
        raise ConfigError(f"[emon] current_range: {exc.message}", hint=exc.hint) from None


def _current_range(emon: EmonConfig, path: Path) -> str:
    try:
        return ranges.normalize(emon.driver, emon.current_range)
    except ranges.RangeError as exc:
        raise ConfigError(f"{path}: [emon] current_range: {exc.message}",
                          hint=exc.hint) from None


#: Why a monitor other than the N6705 takes no "aux" timestamp input, and what to do instead.
_NO_AUX = {
    "34465a": ("the 34465A has no input sampled alongside the current (the line reaches it only "
               "as a trigger)",
               "for ASC energy use an N6705 with an N6781A/N6785A and its auxiliary input, an "
               "LPM01A or a Joulescope"),
    "lpm01a": ("the LPM01A has no auxiliary voltage input; it samples the line on its own D7 "
               "input", 'use timestamp_input = "gpio"'),
    "joulescope": ("the Joulescope has no auxiliary voltage input; it samples the line on GPI0",
                   'use timestamp_input = "gpio"'),
}


def _check_timestamp_input(emon: EmonConfig, path: Path) -> None:
    """``[emon] timestamp_input``: one of `TIMESTAMP_INPUTS`; "aux" only on an N6705 (an
    N6781A/N6785A's auxiliary input) or an Otii (its Sense+ input)."""
    _choice(emon.timestamp_input, path, "emon.timestamp_input")
    if emon.timestamp_input != "aux" or emon.driver in ("n6705", "otii"):
        return
    why, hint = _NO_AUX.get(emon.driver, (f"the {emon.driver} monitor has no auxiliary voltage "
                                          "input", 'use timestamp_input = "gpio"'))
    raise ConfigError(
        f'{path}: [emon] timestamp_input = "aux" needs an N6705 with an N6781A/N6785A SMU (its '
        f"auxiliary voltage input): {why}", hint=hint)


def _check_ppk2_mode(emon: EmonConfig, path: Path) -> None:
    """``[emon] ppk2_mode``: one of `PPK2_MODES`; "ampere" only on a PPK2."""
    _choice(emon.ppk2_mode, path, "emon.ppk2_mode")
    if emon.ppk2_mode != "source" and emon.driver != "ppk2":
        raise ConfigError(
            f'{path}: [emon] ppk2_mode = "{emon.ppk2_mode}" is a PPK2 setting, but the monitor '
            f"is {quoted(emon.driver)}", hint='drop ppk2_mode, or use driver = "ppk2"')


def _range_as_text(table: dict[str, Any]) -> dict[str, Any]:
    """`current_range = 0.1` (a TOML number) means the same as "0.1"."""
    value = table.get("current_range")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {**table, "current_range": repr(value)}
    return table


def _mqtt_paths(mqtt: MqttConfig | None, path: Path) -> MqttConfig | None:
    """A CA file named in the bench is found beside the bench file, as a Xylo spec is."""
    if mqtt is None or not mqtt.ca_file:
        return mqtt
    return replace(mqtt, ca_file=str((path.parent / mqtt.ca_file).resolve()))


def _check_mqtt_table(table: dict[str, Any], path: Path) -> None:
    """Refuse a password in the file before anything else; check the URL and the rates."""
    for secret in ("password", "passwd", "pass"):
        if secret in table:
            raise ConfigError(f"{path}: [mqtt] {secret}: a bench file never holds the broker "
                              "password (it is copied into every run's manifest)",
                              hint="remove it; set RIG_MQTT_PASSWORD or pass "
                              "--mqtt-password-file FILE")
    if not table.get("url"):
        raise ConfigError(f"{path}: [mqtt] url is missing",
                          hint='e.g. url = "mqtt://rig-a@broker.lab:1883"')
    parse_url(str(table["url"]), where=f"{path}: [mqtt] url")
    if table.get("rig"):
        check_rig_name(str(table["rig"]), where=f"{path}: [mqtt] rig")
    if "power_rate_hz" in table:
        rate = number(table["power_rate_hz"], path=path, table="mqtt", key="power_rate_hz")
        check_power_rate(rate, where=f"{path}: [mqtt] power_rate_hz")


# -- validation helpers ---------------------------------------------------------------------------
def _where(path: Path, section: str) -> str:
    return f"{path}: [{section}]" if section else f"{path}:"


def _is_table(value: Any, path: Path, section: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(
            f"{path}: {section}: expected a table, found {type(value).__name__}",
            hint=f"write it as a [{section}] section",
        )


def _no_unknown(table: dict[str, Any], known: set[str], path: Path, section: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(
            f"{_where(path, section)} unknown key {quoted(unknown[0])}",
            hint=f"known keys here: {', '.join(sorted(known))}",
        )


def _dataclass_from(cls: type[DataclassInstance], table: dict[str, Any], path: Path,
                    section: str) -> Any:
    fields = cls.__dataclass_fields__
    _no_unknown(table, set(fields), path, section)
    values = {}
    for key, value in table.items():
        expected = key_type(cls, key)
        if expected in (int, float):  # every number: its type, finite, in its span
            values[key] = number(value, path=path, table=section, key=key, kind=expected,
                                 span=NUMBER_SPANS.get(f"{section}.{key}"),
                                 hint=NUMBER_HINTS.get(f"{section}.{key}"))
        else:
            values[key] = _coerce(value, expected, path, section, key)
    return cls(**values)


def key_type(cls: type[DataclassInstance], key: str) -> type:
    """The type a bench file's value for `key` of the table read into `cls` must have: its
    default's (a key whose default is None takes text)."""
    default = cls.__dataclass_fields__[key].default
    return type(default) if default is not None else str


def _coerce(value: Any, expected: type, path: Path, section: str, key: str) -> Any:
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and "\x00" in value:  # no path, port or name holds one
        raise ConfigError(f"{_where(path, section)} {key}: {quoted(value)} holds a NUL character",
                          hint="remove the \\u0000 from the value")
    # TOML booleans are ints to Python; a bool is never a number here.
    ok = isinstance(value, expected) and not (isinstance(value, bool) and expected is not bool)
    if not ok:
        raise ConfigError(
            f"{_where(path, section)} {key}: expected {_type_name(expected)}, "
            f"found {quoted(value)} ({_type_name(type(value))})"
        )
    return value


def _type_name(t: type) -> str:
    return {float: "a number", int: "an integer", str: "a string", bool: "true or false"}.get(
        t, t.__name__
    )


def _typed(table: dict, key: str, expected: type, path: Path, section: str, default: Any) -> Any:
    if key not in table:
        return default
    return _coerce(table[key], expected, path, section, key)


def _positive(value: float, path: Path, dotted: str) -> None:
    if not value > 0:
        section, _, key = dotted.rpartition(".")
        raise ConfigError(f"{_where(path, section)} {key}: expected > 0, found {value}")


def _choice(value: str, path: Path, dotted: str) -> None:
    allowed = CHOICES[dotted]
    if value not in allowed:
        section, _, key = dotted.rpartition(".")
        raise ConfigError(
            f"{_where(path, section)} {key}: expected one of {', '.join(allowed)}; "
            f"found {quoted(value)}"
        )
