"""Wires a bench together for one measurement: ports, instruments, run store, procedure, and
the guarantee that the DUT is powered off and the run folder finished however the run ends.
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drivers.dut.client import DutClient, LoadResult
from drivers.dut.qemu import STALL_S, QemuBoard
from drivers.emon import check_current_range, monitor_class, open_monitor
from drivers.emon.accuracy import MonitorAccuracy, not_declared
from drivers.emon.base import EnergyMonitor
from drivers.emon.lpm01a import Lpm01a
from drivers.errors import DeviceTimeout, PortError
from drivers.io_manager import IoManager, IoManagerTransport
from drivers.process import ProcessTransport
from drivers.transport import SerialTransport
from protocols.dut.codec import DEFAULT_HEX_PER_COMMAND
from protocols.errors import ActionableError, quoted
from protocols.io_manager import DUT_BAUD as IO_DUT_BAUD
from protocols.io_manager import DUT_PREFIX as IO_DUT_PREFIX
from protocols.io_manager import HEX_PER_COMMAND as IO_HEX_PER_COMMAND
from protocols.io_manager import HOST_BAUD as IO_HOST_BAUD
from protocols.io_manager import PASSTHROUGH_PREFIX as IO_PASSTHROUGH_PREFIX
from rig.bench.config import DOWNLOADS, VIRTUAL_PORT, Bench, SimConfig
from rig.bench.images import bench_images, file_digest
from rig.bench.ports import device_fault
from rig.datasets.synthetic import CLASSES
from rig.errors import BENCH_ERRORS, ConfigError, RunInterrupted, StorageError
from rig.run import asc
from rig.run.events import (
    Event,
    EventBus,
    InstrumentInfo,
    Note,
    RunFinished,
    RunStarted,
    TraceSaved,
    instruments_simulated,
)
from rig.run.live_power import PowerPreview
from rig.run.recording import EmonRecorder, trace_voltage
from rig.run.stopping import StopRequest
from rig.run.store import REFUSED, RunStore
from rig.run.trace_deadline import ReplyDeadlinePassed
from rig.traces.space import binary_size, check_trace_space, projected_trace_bytes

EMON_TRACE = "emon.jls"
#: How long the DUT stays unpowered in the power cycle before its boot banner is awaited, so
#: that a board left on by a crashed run discharges and really reboots.
POWER_OFF_S = 0.2

# The trace-length estimate for the disk-space check (`asc_trace_seconds`), from the bench's
# own figures: it only decides whether to warn or refuse before the run starts.
#: Seconds per inference when the bench gives no number (no `[dut] inference_time_s`, no
#: `[sim]`); microcontroller ASC models take well under that.
DEFAULT_INFERENCE_S = 1.0
#: Largest input downloaded per test sample: 1 s of 8 kHz int16 audio (synthetic-asc).
INPUT_BYTES_GUESS = 16_000
#: UART characters (10 bits each) per input byte of a binary download (`bload`): the byte itself
#: (the command and its CRC reply are a few dozen characters per input). A hex download is
#: priced by its protocol's own lines (`hex_download_chars`).
BINARY_CHARS_PER_BYTE = 1.0
#: Test samples assumed when a bench asks for every sample (samples_per_class = 0) and the
#: split's csv cannot be counted: a generous guess.
ALL_TEST_SAMPLES_GUESS = 2000
#: One-second slices per DCASE clip (10 s clips).
SLICES_PER_CLIP = 10
#: The virtual bench's DUT boots this long after power-on (`virtual_bench.world.PowerParams
#: .boot_s`); a DUT on a port is priced at its `boot_timeout_s` (its boot is seen only then).
VIRTUAL_BOOT_S = 0.010
#: Host seconds one command exchange over the virtual bench's ptys takes (the rig's write, the
#: simulated device's loop, the reply read: 1-2 ms on an idle host). Its UART has no baud rate,
#: so downloads and commands cost host time, which simulated time runs `[sim] speed` times
#: faster than: each exchange adds speed x this to the trace (more on a loaded host).
VIRTUAL_EXCHANGE_S = 1.5e-3
#: The calibration's seconds per inference may differ from `[dut] inference_time_s` by this
#: fraction before the run suggests the measured figure for the bench file.
INFERENCE_ADVICE_TOLERANCE = 0.2
#: Command exchanges outside the method's steps: the boot banner, `caps`, `name`, `profile`.
IDENTIFY_EXCHANGES = 4
#: Host seconds between two deliveries of samples by the monitor (the rig sees a window's
#: closing edge only once the block holding it arrives, and the trace runs on meanwhile): the
#: simulated LPM01A's and PPK2's stream period and the Joulescope stand-in's block period
#: (virtual_bench/), the Otii's and the Keysight's polling (`POLL_S` of drivers/emon/otii.py and
#: keysight.py; copied, as drivers are imported only when opened).
DELIVERY_PERIOD_S = {"lpm01a": 0.005, "ppk2": 0.005, "joulescope": 0.02,
                     "otii": 0.05, "n6705": 0.02, "34465a": 0.02}


@dataclass
class Outcome:
    """How a measurement ended."""

    run_path: Path
    status: str
    summary: dict[str, Any]
    error: ActionableError | None = None


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """`kill` ends a run like Ctrl-C does: DUT off, folder marked interrupted."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt
    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def measure_asc(
    bench: Bench,
    *,
    device: str,
    runs_root: Path,
    subscribers: Sequence[Callable[[Event], None]] = (),
    scope: str = "all",
    stop: StopRequest | None = None,
    live: Sequence[Callable[[PowerPreview], None]] = (),
) -> Outcome:
    """Run the ASC procedure on `bench`; the run folder is complete whatever happens.

    `scope` picks the parts of the method (see `asc.SCOPES`). `stop`, set from another
    thread, ends the run like Ctrl-C at its next safe point. `live` callbacks get decimated
    power while the monitor records, on the monitor's thread (they must not block).

    A trace that cannot fit on the runs disk raises ConfigError before anything is opened or
    created.
    """
    if scope not in asc.SCOPES:  # before anything is opened or created
        raise ConfigError(f"unknown ASC scope {scope!r}",
                          hint=f"choose one of {', '.join(asc.SCOPES)}")
    check_bench_setup(bench)
    space_warning = _check_trace_space(bench, runs_root, scope)
    store = RunStore.create(runs_root, "asc", device)
    events: list[Event] = []
    bus = EventBus()
    bus.subscribe(store)
    bus.subscribe(events.append)
    for sub in subscribers:
        bus.subscribe(sub)
    # The images the bench names for the DUT, by digest: a path alone does not tell two apart.
    images = bench_images(bench)
    bus.publish(RunStarted(
        run_id=uuid.uuid4().hex, procedure="asc", device=device, simulated=bench.simulated,
        emulated=bench.emulated,
        manifest={"bench": bench.snapshot(), "run_folder": store.path.name, "scope": scope,
                  **({"images": images} if images else {})},
    ))
    if space_warning:
        bus.publish(Note(level="warning", text=space_warning))
    status, error, interrupted = "failed", None, False
    parts = BenchParts()
    checkpoint = stop.check if stop is not None else None

    def publish(event: Event) -> None:
        bus.publish(event)
        if checkpoint is not None:  # between two steps: a safe point to stop at
            checkpoint()

    def preview(p: PowerPreview) -> None:
        for tap in live:
            tap(p)

    try:
        with sigterm_as_interrupt():
            connect_bench(bench, parts, bus, trace_path=store.traces_dir / EMON_TRACE,
                          checkpoint=checkpoint, preview=preview if live else None)
            if checkpoint is not None:
                checkpoint()
            assert parts.dut is not None  # connect_bench connected it, or raised
            asc.AscProcedure(
                bench, parts.dut, parts.recorder, publish, scope=scope,
                simulated=bench.simulated or instruments_simulated(events),
                on_calibrated=lambda per_inference_s, loaded: _reproject(
                    bench, runs_root, scope, parts.recorder, per_inference_s, loaded),
            ).run()
        status = "complete"
    except KeyboardInterrupt:
        status, interrupted = "interrupted", True
    except BENCH_ERRORS as exc:
        if parts.recorder is not None and isinstance(exc, DeviceTimeout | ReplyDeadlinePassed):
            # A deadline passed: nothing the monitor delivers from now on is any window's (a
            # virtual bench holds its stream while its DUT hangs mid-run and delivers that
            # backlog when the DUT is powered off: speed x the deadline). The trace ends here.
            parts.recorder.stop_after = parts.recorder.samples
        status, error = REFUSED if parts.refused else "failed", emulator_cause(parts, exc)
    finally:
        cleanup_notes = parts.shutdown(error)
        try:
            for note in cleanup_notes:
                bus.publish(Note(level="warning", text=note))
            if parts.recorder is not None:
                lost, first_lost = parts.recorder.lost_in_trace()
                bus.publish(TraceSaved(
                    path=f"traces/{EMON_TRACE}", samples=parts.recorder.trace_samples,
                    sample_rate_hz=parts.recorder.sample_rate,
                    dropped=sum(max(0, b - a) for a, b in parts.recorder.gaps)
                    + (parts.emon.stats.dropped if parts.emon else 0) + lost,
                    clipped=int(getattr(parts.emon, "over_range_samples", 0) or 0),
                ))
                problem = parts.recorder.read_back_problem
                if problem:  # the file the writer left cannot be read (a full disk's debris)
                    raise StorageError(
                        f"trace file {parts.recorder.trace_path} was left unreadable: "
                        f"{problem}; none of its {lost:,} samples can be counted as kept",
                        hint="free space on that disk or write the runs to another one, and "
                        "measure again: this run's figures cannot be reproduced from its trace")
                if lost:  # the live figures stand, but the trace cannot show them
                    raise StorageError(
                        f"trace file {parts.recorder.trace_path} lost {lost:,} samples while it "
                        f"was written (the first at sample {first_lost:,}): its disk was "
                        "full, or failed, for a moment the free-space checks did not see",
                        hint="free space on that disk or write the runs to another one, and "
                        "measure again: this run's figures cannot be reproduced from its trace")
        except StorageError as exc:  # a full disk: the folder still gets its end (the store
            # gave back the room it kept for it), failed and naming the disk
            status = "interrupted" if interrupted else "failed"
            error = error or exc
        summary = asc.summarize(events, bench=bench.snapshot(), scope=scope)
        # The bench's word, or an instrument's own (a XyloSim DUT, a simulated monitor).
        summary["simulated"] = bench.simulated or instruments_simulated(events)
        if bench.emulated:
            summary["emulated"] = bench.emulated
        if status == "complete" and not asc.checks_passed(summary):
            status = "failed-checks"
        bus.publish(RunFinished(status=status, summary=summary,
                                error=str(error) if error else None))
    if interrupted:
        raise RunInterrupted(
            f"run interrupted; the DUT was powered off; run folder marked interrupted: "
            f"{store.path}"
        )
    return Outcome(store.path, status, summary, error)


def emulator_cause(parts: BenchParts, exc: ActionableError) -> ActionableError:
    """`exc`, or, when the emulated board's QEMU died under it, an error naming that cause (a
    run's error, and `rig dut --bench`'s: call it before `parts.shutdown()` ends QEMU)."""
    why = parts.qemu.exit_reason() if parts.qemu is not None else None
    if why is None:
        return exc
    return PortError(f"QEMU {why} (the DUT's port then failed: {exc.message})",
                     hint="the emulated board stopped: is the image the DUT shim that "
                          "`make firmware-arm` builds?")


def records_trace(bench: Bench) -> bool:
    """Whether `measure_asc` records an EMON trace on this bench (see `_connect`)."""
    return bench.emon.driver != "none" and bench.dut.kind != "xylo"


def asc_trace_seconds(bench: Bench, scope: str = "all") -> float:
    """Estimate [s] of an ASC run's trace (scope "all"): the DUT's boot, the calibration run,
    idle (energy mode), the timed runs, the accuracy pass (a download and an inference per test
    sample), each input's download by the method the DUT offers, and on the virtual bench the
    host's command exchanges at its speed (`asc_trace_basis` says what it rests on). `scope`:
    the parts of the method the run does (`asc.SCOPES`)."""
    return sum(_asc_phase_trace_seconds(bench, scope).values())


def asc_trace_basis(bench: Bench) -> str:
    """What `asc_trace_seconds` rests on, for the preflight's message: the virtual bench's
    figures, or a DUT's that are known only after connecting (boot, inference time)."""
    method = DOWNLOAD_WORDS[asc_download_method(bench)]
    if _virtual_dut(bench) and bench.io_manager is not None and _sim(bench).io_manager == "simavr":
        return (f"estimated from the [sim] timing and {method} through the emulated UNO "
                f"at {IO_DUT_BAUD} baud (the bench's time follows the UNO's while it works) "
                f"and {VIRTUAL_EXCHANGE_S * 1e3:g} ms of host time per other command x speed "
                f"{_sim(bench).speed:g}; a loaded host records longer")
    if _virtual_dut(bench) and bench.io_manager is not None:
        return (f"estimated from the [sim] timing, {method} through the IO manager "
                f"at {IO_DUT_BAUD} baud (the virtual one charges its line's time, not the "
                f"host's) and {VIRTUAL_EXCHANGE_S * 1e3:g} ms of host time per other command x "
                f"speed {_sim(bench).speed:g}; a loaded host records longer")
    if _virtual_dut(bench):
        line = (f"at its [sim] uart_baud {_sim(bench).uart_baud:g}" if _sim(bench).uart_baud
                else "over ptys")
        return (f"estimated from the [sim] timing, {method} {line} and "
                f"{VIRTUAL_EXCHANGE_S * 1e3:g} ms of host time per command x speed "
                f"{_sim(bench).speed:g}; a loaded host records longer")
    inference = (f"[dut] inference_time_s {bench.dut.inference_time_s:g} s"
                 if bench.dut.inference_time_s > 0 else
                 f"an assumed {DEFAULT_INFERENCE_S:g} s per inference ([dut] inference_time_s "
                 "not set)")
    declared = ("as [dut] download declares" if bench.dut.download else
                "all that plain MLPerf Tiny firmware offers ([dut] download not set)")
    return (f"estimated: the DUT's timing is known only after connecting, so boot_timeout_s "
            f"{bench.dut.boot_timeout_s:g} s, {inference} and {method} at "
            f"{_line_baud(bench):g} baud, {declared}, are assumed")


def measures_voltage(bench: Bench) -> bool:
    """Whether the bench's monitor measures the supply voltage (its trace then stores a
    voltage signal: `trace_space.bytes_per_sample`) rather than setting it."""
    return monitor_class(bench.emon.driver).measures_voltage_with(**_monitor_options(bench))


def records_range(bench: Bench) -> bool:
    """Whether the bench's monitor tells each sample's current range (its trace then stores a
    range signal: `trace_space.bytes_per_sample`)."""
    return monitor_class(bench.emon.driver).records_range_with(
        current_range=bench.emon.current_range, **_monitor_options(bench))


def asc_trace_bytes(bench: Bench, scope: str = "all") -> int:
    """Projected size [bytes] of an ASC run's trace (0 when the bench records none)."""
    if not records_trace(bench):
        return 0
    return projected_trace_bytes(asc_trace_seconds(bench, scope), bench.emon.sample_rate_hz,
                                 voltage_measured=measures_voltage(bench),
                                 range_recorded=records_range(bench))


def asc_phase_seconds(bench: Bench, scope: str = "all") -> dict[str, float]:
    """Rough host seconds each ASC phase takes, for a remaining-time display before a phase
    has progress of its own (on the virtual bench, divided by its speed)."""
    speed = bench.sim.speed if bench.sim else 1.0
    phases = _asc_phase_trace_seconds(bench, scope)
    del phases["boot"], phases["finish"]  # no phase of the procedure's
    return {phase: seconds / speed for phase, seconds in phases.items()}


def asc_rest_trace_seconds(bench: Bench, scope: str, *, inference_s: float,
                           loaded: LoadResult) -> float:
    """Seconds of trace an ASC run records after its calibration, from what the calibration
    found out: the DUT's measured seconds per inference, and how its first input went down
    (method, check, size), which the preflight could only assume for a DUT on a port."""
    phases = _asc_phase_trace_seconds(bench, scope, inference_s=inference_s,
                                      load_s=_known_download_s(bench, loaded))
    return sum(t for phase, t in phases.items() if phase not in ("boot", "calibrate"))


def download_kind(loaded: LoadResult) -> str:
    """The `DOWNLOADS` name of how an input went down (its method and check)."""
    if loaded.method == "binary":
        return "binary"
    return "hex-crc" if loaded.check == "crc" else "hex-read-back"


def _known_download_s(bench: Bench, loaded: LoadResult) -> float:
    """Seconds one input's download takes, by the method, check and size it turned out to
    have."""
    return _download_s(bench, download_kind(loaded), loaded.n_bytes)


def _asc_phase_trace_seconds(bench: Bench, scope: str, *, inference_s: float | None = None,
                             load_s: float | None = None) -> dict[str, float]:
    """Seconds of trace each ASC phase records: the DUT's own times (from the bench, or as
    measured: `inference_s`), the downloads by their method (or as known: `load_s`), and the
    virtual bench's host exchanges at its speed."""
    o = bench.asc
    inference_s = _inference_s(bench) if inference_s is None else inference_s
    load_s = _download_s(bench) if load_s is None else load_s
    exchange_s = window_s = _exchange_s(bench)
    if records_trace(bench) and bench.dut.timestamp_mode == "energy":
        # Each timed window ends when the monitor has delivered its closing edge.
        window_s += _delivery_s(bench)
    # As the procedure does: enough iterations for min_run_s with its margin, after a warmup.
    iterations = max(o.min_iterations, math.ceil(o.min_run_s * asc.RUN_MARGIN / inference_s))
    run_s = (iterations + o.warmup) * inference_s + window_s
    boot_s = VIRTUAL_BOOT_S if _virtual_dut(bench) else bench.dut.boot_timeout_s
    phases = {"boot": boot_s + IDENTIFY_EXCHANGES * exchange_s}
    if scope != "accuracy":
        phases["calibrate"] = load_s + o.calibration_iterations * inference_s + window_s
        if scope != "performance" and bench.dut.timestamp_mode == "energy":
            # Two `timestamp` pulses around idle_s, the second once the monitor has delivered
            # the samples, each awaited from the monitor.
            phases["idle"] = o.idle_s + 3 * window_s
        elif scope != "performance" and bench.dut.kind == "xylo" and bench.dut.hdk:
            phases["idle"] = o.idle_s + exchange_s  # `idle` on the HDK's rails: no trace
        phases["runs"] = o.runs * run_s
    if scope in ("all", "accuracy"):
        phases["accuracy"] = _asc_test_samples(bench) * (load_s + inference_s + window_s)
    # After the last window: the DUT's power-off, then the monitor's last delivery as it stops.
    phases["finish"] = exchange_s + (_delivery_s(bench) if records_trace(bench) else 0.0)
    return phases


#: How the preflight's message names each of `DOWNLOADS`.
DOWNLOAD_WORDS = {"binary": "binary downloads (bload)",
                  "hex-crc": "hex downloads checked by db crc",
                  "hex-read-back": "hex downloads read back (db print)"}


def asc_download_method(bench: Bench) -> str:
    """How the rig will download the inputs (one of `DOWNLOADS`), as far as known before
    connecting: the bench's `[dut] download`; else the virtual bench's DUT's ("binary" on its
    own line, "hex-crc" behind an IO manager, whose pass-through carries no raw bytes); else
    "hex-read-back", all that plain MLPerf Tiny firmware offers (the run says when the DUT
    offered better: `_reproject`)."""
    if bench.dut.download:
        return bench.dut.download
    if _virtual_dut(bench):
        return "hex-crc" if bench.io_manager else "binary"
    return "hex-read-back"


def _line_baud(bench: Bench) -> float:
    """Baud rate of the line a download crosses to the DUT: the UNO's SoftwareSerial link
    behind an IO manager (real or the virtual bench's), the virtual DUT's `[sim] uart_baud`,
    else the DUT's own port's."""
    if bench.io_manager is not None:
        return IO_DUT_BAUD
    if _virtual_dut(bench):
        return _sim(bench).uart_baud
    return bench.dut.baud


def _download_s(bench: Bench, download: str | None = None,
                n_bytes: int = INPUT_BYTES_GUESS) -> float:
    """Seconds one download of `n_bytes` takes by `download` (default `asc_download_method`):
    its characters on the DUT's line at `_line_baud` (behind an IO manager also the rig's
    115200-baud line to it), or on the virtual bench's unpaced ptys its command exchanges."""
    download = download or asc_download_method(bench)
    per_command = IO_HEX_PER_COMMAND if bench.io_manager else DEFAULT_HEX_PER_COMMAND
    if _virtual_dut(bench) and bench.io_manager is None and not _sim(bench).uart_baud:
        # bload and its data; or db load, one db per per_command bytes, and the check.
        exchanges = 2 if download == "binary" else 2 + math.ceil(n_bytes / per_command)
        return exchanges * _exchange_s(bench)
    # A real line, or the virtual bench's that takes a line's time: simulated time is held
    # while the host sends and then charged (virtual_bench/line_time.py), or follows the
    # emulated UNO's (virtual_bench/simavr_uno.py).
    baud = _line_baud(bench)
    if download == "binary":
        return n_bytes * BINARY_CHARS_PER_BYTE * 10 / baud
    dut_chars, host_chars = hex_download_chars(n_bytes, per_command,
                                               read_back=download == "hex-read-back")
    seconds = dut_chars * 10 / baud
    return seconds + (host_chars * 10 / IO_HOST_BAUD if bench.io_manager else 0.0)


def hex_download_chars(n_bytes: int, per_command: int, *, read_back: bool
                       ) -> tuple[int, int]:
    """UART characters of one hex download of `n_bytes`: on the DUT's line, and on the rig's
    line to an IO manager when there is one (its 115200-baud USB serial).

    Every exchange as the protocol writes it: `db load`, the `db <hex>` commands of
    `per_command` bytes (the last one shorter, answered with `m-load-done`), then the check,
    `db crc` or (`read_back`) a `db print` of 16 bytes a line; each command with its "%", each
    reply line with CR LF, then `m-ready`. Through an IO manager each command also goes
    "dut <cmd>%" to the UNO, which answers "m-dut-passthrough(<cmd>)" and `m-ready`, and
    relays every DUT line with "[dut]: ".
    """
    sizes = [per_command] * (n_bytes // per_command) + [n_bytes % per_command] * bool(
        n_bytes % per_command)
    exchanges = [(f"db load {n_bytes}", [f"m-[Expecting {n_bytes} bytes]"])]
    exchanges += [("db " + "00" * k, ["m-load-done"] if i == len(sizes) - 1 else [])
                  for i, k in enumerate(sizes)]
    if read_back:
        rows = [min(16, n_bytes - i) for i in range(0, n_bytes, 16)]
        exchanges.append(("db print", ["m-buffer-" + "-".join(["00"] * k) for k in rows]))
    else:
        exchanges.append(("db crc", [f"m-db-crc-{n_bytes}-00000000"]))
    dut = host = 0
    for command, lines in exchanges:
        replies = sum(len(line) + 2 for line in [*lines, "m-ready"])
        dut += len(command) + 1 + replies
        host += (len(IO_PASSTHROUGH_PREFIX) + len(command) + 1
                 + len(f"m-dut-passthrough({command})\r\nm-ready\r\n")
                 + replies + (len(lines) + 1) * len(IO_DUT_PREFIX))
    return dut, host


def _virtual_dut(bench: Bench) -> bool:
    """Whether the DUT is the virtual bench's (simulated time, ptys without a baud rate)."""
    return bench.sim is not None and bench.dut.port == VIRTUAL_PORT


def _sim(bench: Bench) -> SimConfig:
    """`bench.sim`, where `_virtual_dut(bench)` said the bench has one."""
    assert bench.sim is not None
    return bench.sim


def _delivery_s(bench: Bench) -> float:
    """Trace seconds the rig waits for the monitor's next delivery of samples (x speed on the
    virtual bench, whose host waits run that much faster in simulated time)."""
    period = DELIVERY_PERIOD_S.get(bench.emon.driver.removesuffix("-sim"), 0.005)
    return period * (_sim(bench).speed if _virtual_dut(bench) else 1.0)


def _exchange_s(bench: Bench) -> float:
    """Trace seconds one command exchange adds: host time x speed on the virtual bench; on a
    real UART a few dozen characters, within the other figures' margins."""
    return VIRTUAL_EXCHANGE_S * _sim(bench).speed if _virtual_dut(bench) else 0.0


def _inference_s(bench: Bench) -> float:
    """Seconds per inference: the bench's declaration, the virtual bench's, else a guess."""
    if bench.dut.inference_time_s > 0:
        return bench.dut.inference_time_s
    return bench.sim.inference_ms / 1e3 if bench.sim else DEFAULT_INFERENCE_S


def _asc_test_samples(bench: Bench) -> int:
    """Test samples the accuracy pass sends (an upper bound), without loading any audio."""
    per_class = bench.dataset.samples_per_class
    if per_class > 0:
        return per_class * len(CLASSES)
    if bench.dataset.name == "dcase2020":
        from rig.datasets import dcase

        with contextlib.suppress(*BENCH_ERRORS, OSError):
            return len(dcase.split_clips(Path(bench.dataset.path), "test")) * SLICES_PER_CLIP
    return ALL_TEST_SAMPLES_GUESS


def _check_trace_space(bench: Bench, runs_root: Path, scope: str = "all") -> str | None:
    """Refuse a run whose trace cannot fit under `runs_root`; a warning text if it is tight."""
    if not records_trace(bench):
        return None
    seconds, rate = asc_trace_seconds(bench, scope), bench.emon.sample_rate_hz
    return check_trace_space(
        runs_root, seconds, rate, voltage_measured=measures_voltage(bench),
        range_recorded=records_range(bench),
        what=f"an ASC run's trace (about {seconds:.0f} s at {rate:g} Hz, "
        f"{asc_trace_basis(bench)})",
        hint=_space_hint(bench),
    )


def _space_hint(bench: Bench) -> str:
    """What to do when an ASC run's trace does not fit."""
    return (f"lower [emon] sample_rate_hz or measure fewer runs or test samples in "
            f"{bench.path}, or give a --runs-dir on another disk")


def _reproject(bench: Bench, runs_root: Path, scope: str, recorder: EmonRecorder | None,
               per_inference_s: float, loaded: LoadResult) -> Note | None:
    """After the calibration: the rest of the run's trace from what it measured (before, a DUT
    on a port is priced at its bench's assumptions); ConfigError if that cannot fit on the
    runs disk now (the run then ends like any failed one: DUT off, folder kept)."""
    if recorder is None or not records_trace(bench):
        return None
    rest_s = asc_rest_trace_seconds(bench, scope, inference_s=per_inference_s, loaded=loaded)
    rate, voltage = recorder.sample_rate, measures_voltage(bench)
    ranged = records_range(bench)
    warning = check_trace_space(
        runs_root, rest_s, rate, voltage_measured=voltage, range_recorded=ranged,
        what=f"the rest of this ASC run's trace (about {rest_s:.0f} s at {rate:g} Hz, "
        "projected from the calibration)",
        hint=_space_hint(bench))
    so_far_s = recorder.samples / rate
    total = projected_trace_bytes(so_far_s + rest_s, rate, voltage_measured=voltage,
                                  range_recorded=ranged)
    text = (f"trace projected after calibration: {total} B = {binary_size(total)} "
            f"({so_far_s:.1f} s recorded and "
            f"{rest_s:.1f} s to come at {rate:g} Hz, from {per_inference_s * 1e3:.4g} ms per "
            f"inference and {loaded.method} downloads checked by {loaded.check}; the preflight "
            f"projected {asc_trace_bytes(bench, scope)} B from the bench file)")
    advice, slower = _bench_advice(bench, per_inference_s, loaded)
    return Note(level="warning" if warning or slower else "info",
                text=text + (f"; {warning}" if warning else "") + advice)


def _bench_advice(bench: Bench, per_inference_s: float, loaded: LoadResult) -> tuple[str, bool]:
    """What the bench file of a DUT on a port should declare for the next run's preflight to
    price it as measured ("" when it does), and whether the DUT's download is slower than
    the preflight priced (this run's trace then grows past the preflight's projection)."""
    if _virtual_dut(bench):
        return "", False  # its figures are the [sim] ones
    lines, slower = [], False
    offered, priced = download_kind(loaded), asc_download_method(bench)
    if offered != priced:
        lines.append(f'download = "{offered}"')
        slower = DOWNLOADS.index(offered) > DOWNLOADS.index(priced)
    declared = bench.dut.inference_time_s
    if not declared or abs(per_inference_s / declared - 1) > INFERENCE_ADVICE_TOLERANCE:
        lines.append(f"inference_time_s = {per_inference_s:.3g}")
    if not lines:
        return "", False
    why = (f" (the DUT takes inputs by {DOWNLOAD_WORDS[offered]}, slower than the preflight's "
           f"{DOWNLOAD_WORDS[priced]})" if slower else "")
    return (f"; for the next run's preflight to price this DUT as measured, set in [dut] of "
            f"{bench.path}: {'; '.join(lines)}{why}"), slower


class BenchParts:
    """What `connect_bench` opened, so that shutdown closes exactly that, in a safe order."""

    def __init__(self) -> None:
        self.vbench: Any = None
        self.dut: DutClient | None = None
        self.emon: EnergyMonitor | None = None
        self.recorder: EmonRecorder | None = None
        self.acquiring = False
        #: The emulator running the DUT firmware (a `[qemu]` bench), ended by its pid.
        self.qemu: QemuBoard | None = None
        #: The monitor refused the bench's settings (`connect_bench`): nothing was powered.
        self.refused = False

    def shutdown(self, error: BaseException | None = None) -> list[str]:
        """Power the DUT off first, then stop and close everything; never raises.

        A step that fails with `error`, the one the run already ended with, is not noted again
        (an LPM01A's `stop` raises the stream fault, e.g. a lost D7 event, its `fault` gave)."""
        notes: list[str] = []
        steps = []
        if self.emon is not None:
            steps.append(("power off the DUT", self.emon.power_off))
            if self.acquiring:
                steps.append(("stop the energy monitor", self.emon.stop))
            steps.append(("close the energy monitor", self.emon.close))
        if self.dut is not None:
            steps.append(("close the DUT port", self.dut.close))
        if self.recorder is not None:
            steps.append(("finish the trace file", self.recorder.close))
        if self.vbench is not None:
            steps.append(("stop the virtual bench", self.vbench.close))
        if self.qemu is not None:
            steps.append(("stop QEMU", self.qemu.close))
        for what, step in steps:
            try:
                step()
            except (Exception, KeyboardInterrupt) as exc:  # keep going: power-off matters most
                if exc is not error:
                    notes.append(f"could not {what}: {exc}")
        return notes


def connect_bench(
    bench: Bench,
    parts: BenchParts,
    bus: EventBus,
    *,
    trace_path: Path | None = None,
    checkpoint: Callable[[], None] | None = None,
    preview: Callable[[PowerPreview], None] | None = None,
) -> None:
    """Open ports, configure and start the monitor, power the DUT and read its boot banner.

    What was opened is in `parts` even when this raises: `parts.shutdown()` undoes it. The
    monitor's stream goes to `trace_path` (JLS) when given; `checkpoint` is called while
    waiting on the DUT or the monitor and may raise to stop.
    """
    # Before any port or the virtual bench: what the bench alone says the monitor cannot do
    # (an LPM01A's rate is known only after `configure`, too late for the instance's word).
    check_timestamp_edges(bench)
    dut_port, emon_port = bench.dut.port, bench.emon.address
    io_port = bench.io_manager.port if bench.io_manager else None
    uses_emon = bench.emon.driver != "none"
    if bench.sim is not None and VIRTUAL_PORT in (
        dut_port, emon_port if uses_emon else None, io_port
    ):
        from rig.bench.virtual import VirtualBenchProcess  # only a virtual bench needs it

        parts.vbench = VirtualBenchProcess(bench)
        ports = parts.vbench.ports
        dut_port = ports["dut"] if dut_port == VIRTUAL_PORT else dut_port
        emon_port = ports.get("emon", "") if emon_port == VIRTUAL_PORT else emon_port
        if io_port == VIRTUAL_PORT:
            io_port = ports["io_manager"]
        bus.publish(Note(text=f"virtual bench: DUT {parts.vbench.dut_impl} on {dut_port}, "
                              f"{bench.emon.driver} at {emon_port}"))
        images = {role: file_digest(p) for role, p in parts.vbench.images.items()}
        bus.publish(InstrumentInfo(role="virtual_bench", info={
            "dut": parts.vbench.dut_impl, "ports": ports, "simulated": True,
            **({"images": images} if images else {})}))

    if bench.dut.kind == "xylo":
        _connect_xylo(bench, parts, bus, checkpoint)
        return
    if bench.qemu is not None:
        check_emulator(bench)
        q = bench.qemu
        parts.qemu = QemuBoard(q.firmware, machine=q.machine, icount_shift=q.icount_shift)
        dut_port = parts.qemu.port
        bus.publish(Note(text=f"QEMU {q.machine} (pid {parts.qemu.pid}) runs {q.firmware}; "
                              f"its UART is {dut_port}: every time is {bench.emulated}"))
        bus.publish(InstrumentInfo(role="emulator", info={
            "emulator": "qemu-system-arm", "machine": q.machine, "firmware": q.firmware,
            "icount_shift": q.icount_shift, "port": dut_port, "emulated": bench.emulated}))
    if bench.io_manager is not None:
        # The DUT's UART is the UNO's; the rig talks through its pass-through, same client API.
        assert io_port is not None  # bench.io_manager's port, or the virtual bench's
        io = IoManager(SerialTransport(io_port, bench.io_manager.baud, name="IO manager"))
        parts.dut = DutClient(IoManagerTransport(io))
        bus.publish(InstrumentInfo(role="io_manager", info={
            "name": io.handshake(), "version": io.version(), "port": io_port}))
    elif parts.qemu is not None:
        # An emulator is paced by the host's scheduler: it gets longer to take bytes and reply.
        parts.dut = DutClient(parts.qemu.transport(bench.dut.baud), command_timeout_s=STALL_S)
    else:
        parts.dut = DutClient(SerialTransport(dut_port, bench.dut.baud, name="DUT"))
    parts.dut.checkpoint = checkpoint
    if parts.qemu is not None:
        # The emulated board starts once its port is open: its banner is seen, as on a board
        # the monitor powers.
        parts.qemu.power_on()
        parts.dut.wait_for_boot(bench.dut.boot_timeout_s)
        parts.dut.require_mode(bench.dut.timestamp_mode)
        return
    if not uses_emon:
        bus.publish(Note(level="warning", text="no energy monitor: the rig cannot power-cycle "
                         "the DUT, so its boot banner is not checked"))
        _mode_without_banner(bench, parts.dut, bus)
        return
    parts.emon = open_bench_monitor(bench, emon_port,
                                    virtual=bench.emon.address == VIRTUAL_PORT)
    try:  # what only the instrument can tell (its model, its module): a refusal, not a failure
        if bench.dut.timestamp_mode == "energy" and not parts.emon.sees_every_edge:
            raise _every_edge_refusal(bench, parts.emon)
        parts.emon.configure(bench.emon.supply_voltage_v, bench.emon.sample_rate_hz)
    except (DeviceTimeout, PortError):
        raise
    except BENCH_ERRORS:
        parts.refused = True
        raise
    set_voltage = parts.emon.set_voltage()
    settings = with_lab_accuracy(parts.emon.settings(), bench, measured=set_voltage is None)
    bus.publish(InstrumentInfo(role="emon", info={**parts.emon.self_test(), **settings,
                                                  "trace_voltage": trace_voltage(set_voltage)}))
    emon = parts.emon
    parts.recorder = EmonRecorder(
        emon.sample_rate, trace_path, set_voltage=set_voltage, instrument=settings,
        simulated=bench.simulated or bool(getattr(emon, "simulated", False)),
        fault=lambda: getattr(emon, "fault", None), checkpoint=checkpoint, preview=preview,
    )
    # The DUT's waits end at once too when the monitor failed or the trace cannot be written.
    parts.dut.checkpoint = parts.recorder.check
    powers_dut = getattr(parts.emon, "powers_dut", True)
    if powers_dut:
        # A known state whatever a crashed run left: the DUT off (a DUT left powered would not
        # reboot at power-on, so no banner), its unread replies dropped, then a power cycle.
        off_at = time.monotonic()
        parts.emon.power_off()
        parts.dut.discard_input()
        time.sleep(max(0.0, off_at + POWER_OFF_S - time.monotonic()))
    parts.emon.start(parts.recorder.on_chunk)
    parts.acquiring = True
    parts.emon.power_on()
    if powers_dut:
        parts.dut.wait_for_boot(bench.dut.boot_timeout_s)
    else:  # the supply is the bench's, not the monitor's: the DUT booted before we listened
        _mode_without_banner(bench, parts.dut, bus)
    parts.dut.require_mode(bench.dut.timestamp_mode)


def _connect_xylo(bench: Bench, parts: BenchParts, bus: EventBus,
                  checkpoint: Callable[[], None] | None) -> None:
    """Start the Xylo shim (firmware/xylo) as the DUT: XyloSim, or a Xylo Audio 2 HDK."""
    shim = Path(__file__).resolve().parents[2] / "firmware" / "xylo" / "shim.py"
    argv = [sys.executable, str(shim), "--spec", bench.dut.spec]
    if bench.dut.hdk:
        argv += ["--hdk", "--power-frequency", f"{bench.dut.power_frequency_hz:g}"]
    parts.dut = DutClient(ProcessTransport(argv, name="Xylo shim"))
    parts.dut.checkpoint = checkpoint
    where = "a Xylo Audio 2 HDK" if bench.dut.hdk else "XyloSim (simulated Xylo Audio 2)"
    bus.publish(Note(text=f"Xylo shim on {where}, network {bench.dut.spec}"))
    parts.dut.wait_for_boot(bench.dut.boot_timeout_s)


def check_bench_setup(bench: Bench) -> None:
    """Refuse, from the bench alone, what the monitor would refuse once opened: a supply or
    sample rate no such instrument gives (its driver's `check_setup`), or a monitor that does
    not see every timestamp edge for ASC energy. Called before any run folder or port exists;
    what needs the instrument itself is refused in `connect_bench` (status "refused"). An
    emulated board's QEMU and firmware image are checked here too, and the serial port the
    rig opens for the DUT (or its IO manager) must be a device."""
    bench.require_dut()
    check_serial_ports(bench)
    check_emulator(bench)
    if not records_trace(bench):
        return
    check_timestamp_edges(bench)
    options = _monitor_options(bench)
    try:
        monitor_class(bench.emon.driver).check_setup(
            bench.emon.supply_voltage_v, bench.emon.sample_rate_hz,
            voltage_limit_v=bench.voltage_limit_v, **options)
    except BENCH_ERRORS as exc:
        raise _in_emon_table(bench, exc) from None


def check_serial_ports(bench: Bench) -> None:
    """Refuse a `[dut] port` (or `[io_manager] port`) the rig would open that is no serial
    device: a name that does not exist ("none", "abc", "12", an unplugged board's path) or a
    file that is not one (`rig.bench.ports.device_fault`). Nothing is opened."""
    if bench.io_manager is not None:
        table, port = "io_manager", bench.io_manager.port
    elif bench.dut.kind == "xylo" or bench.qemu is not None:
        return  # the Xylo shim and the emulated board are started, not opened
    else:
        table, port = "dut", bench.dut.port
    if port == VIRTUAL_PORT and bench.sim is not None:
        return
    why = device_fault(port)
    if why:
        raise ConfigError(f"{bench.path}: [{table}] port {quoted(port)} {why}",
                          hint="check the cable and the port name (`rig devices` lists serial "
                               'ports); port = "virtual" with a [sim] table is the virtual '
                               "bench's")


def check_emulator(bench: Bench) -> None:
    """Refuse, before QEMU starts, an emulated board without QEMU, without its image or with an
    image it cannot run (`QemuBoard.check_image`: not a 32-bit ARM ELF, cut short, a segment
    outside the board's memory, no vector table): QEMU would abort with "Lockup" later."""
    if bench.qemu is None:
        return
    q = bench.qemu
    QemuBoard.check_setup(q.firmware, machine=q.machine)
    try:
        QemuBoard.check_image(q.firmware, machine=q.machine)
    except PortError as exc:
        raise ConfigError(f"{bench.path}: [qemu] firmware: {exc.message}",
                          hint=exc.hint) from None


def check_timestamp_edges(bench: Bench) -> None:
    """Refuse, from the bench alone, ASC energy windows on a monitor that would not see every
    edge of the DUT's timestamp line with the bench's options and sample rate (an LPM01A above
    its ascii_dec limit). `check_bench_setup` and `connect_bench` both call it, so a
    measurement, `rig devices --check`, the GUI's bench check and `rig dut --bench` refuse such
    a bench alike, before any port is opened."""
    if not records_trace(bench) or bench.dut.timestamp_mode != "energy":
        return
    try:
        cls = monitor_class(bench.emon.driver)
        if not cls.sees_every_edge_with(sample_rate_hz=bench.emon.sample_rate_hz,
                                        **_monitor_options(bench)):
            raise _every_edge_refusal(bench, cls)
    except BENCH_ERRORS as exc:
        raise _in_emon_table(bench, exc) from None


def _in_emon_table(bench: Bench, exc: ActionableError) -> ConfigError:
    """`exc` as a ConfigError naming the bench file's [emon] table."""
    where = f"{bench.path}: [emon] "
    message = exc.message if exc.message.startswith(where) else where + exc.message
    return ConfigError(message, hint=exc.hint)


def _every_edge_refusal(bench: Bench, monitor: Any) -> ConfigError:
    """ASC energy windows on a monitor that sees the timestamp line only as a trigger."""
    reason = getattr(monitor, "every_edge_reason", None) or (
        f"the {bench.emon.driver} sees the DUT's timestamp line only as a trigger (one edge "
        "per capture)")
    return ConfigError(
        f"{reason}, but ASC energy windows need both edges of every run",
        hint=getattr(monitor, "every_edge_hint", "use an LPM01A or a Joulescope for ASC "
                     "energy; record traces with `rig emon record`"),
    )


def _monitor_options(bench: Bench) -> dict[str, Any]:
    """The driver options `open_bench_monitor` opens the bench's monitor with."""
    options: dict[str, Any] = {}
    if bench.emon.timestamp_input == "aux":
        options["timestamp_input"] = "aux"
    if bench.emon.driver == "ppk2":
        options["mode"] = bench.emon.ppk2_mode
    return options


def open_bench_monitor(bench: Bench, address: str, *, virtual: bool) -> EnergyMonitor:
    """The bench's energy monitor, opened at `address`, in the bench's current range."""
    if bench.emon.driver == "joulescope" and virtual:
        # No USB on the virtual bench: the stand-in for pyjoulescope_driver.Driver reads the
        # bench's samples over loopback; the driver code above it is the real one.
        from drivers.emon.joulescope import Joulescope
        from drivers.emon.joulescope_socket import FakeJoulescopeDriver, SocketSource
        from protocols.joulescope_bridge import BASE_RATES

        # A JS220 samples at 1 MS/s at most; above that the stand-in is the 2 MS/s JS110.
        model = "js110" if bench.emon.sample_rate_hz > BASE_RATES["js220"] else "js220"
        return Joulescope.open(
            "", voltage_limit_v=bench.voltage_limit_v, simulated=True,
            driver_factory=lambda: FakeJoulescopeDriver(SocketSource(address),
                                                        device_path=f"u/{model}/000415"),
            current_range=bench.emon.current_range,
        )
    if bench.emon.driver == "lpm01a":
        check_current_range("lpm01a", bench.emon.current_range)  # it auto-ranges: only "auto"
        return Lpm01a.open(address, voltage_limit_v=bench.voltage_limit_v,
                           simulated=bench.simulated)
    return open_monitor(bench.emon.driver, address, voltage_limit_v=bench.voltage_limit_v,
                        simulated=bench.simulated, current_range=bench.emon.current_range,
                        **_monitor_options(bench))


def _mode_without_banner(bench: Bench, dut: DutClient, bus: EventBus) -> None:
    """Learn the timestamp mode from `caps` when the boot banner could not be seen."""
    dut.negotiate()
    if dut.timestamp_mode is None:
        dut.timestamp_mode = bench.dut.timestamp_mode
        bus.publish(Note(level="warning", text="the DUT's timestamp mode could not be read "
                         f"(plain MLPerf Tiny firmware, no boot banner): taking "
                         f"{bench.dut.timestamp_mode!r} from the bench file"))


def with_lab_accuracy(settings: dict[str, Any], bench: Bench, *, measured: bool
                      ) -> dict[str, Any]:
    """The monitor's `settings()` with the bench's `[emon.accuracy]` figures in its declared
    accuracy: each figure the lab gives replaces the driver's for that term only (citing the
    lab's source, "lab: ..."); the driver's published figures stay for the rest. `measured`:
    the trace's voltage is measured (the lab's voltage figure is then the measurement's)."""
    lab = bench.emon_accuracy
    if lab is None:
        return settings
    try:
        declared = MonitorAccuracy.from_json(settings["accuracy"])
    except (KeyError, TypeError, ValueError):
        declared = not_declared(str(settings.get("driver") or bench.emon.driver))
    current = voltage = None
    if lab.current_gain is not None or lab.current_offset_a is not None:
        current = (lab.current_gain or 0.0, lab.current_offset_a or 0.0)
    if lab.voltage_gain is not None or lab.voltage_offset_v is not None:
        voltage = (lab.voltage_gain or 0.0, lab.voltage_offset_v or 0.0)
    merged = declared.with_lab_figures(lab.source, current=current, voltage=voltage,
                                       voltage_measured=measured, clock_ppm=lab.clock_ppm)
    return {**settings, "accuracy": merged.to_json()}
