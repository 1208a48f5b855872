"""A night of faults (issue 39): QUBO sweeps and ASC runs across a Dask cluster for H hours, with
broker, cluster, rig, instrument, disk and dashboard faults injected on a schedule drawn from a
seed; then an audit of what was lost, doubled, left failed without a reason, or leaked.

    benchmarks/soak.py --hours H --seed S [--json FILE]        (make soak HOURS=1 SEED=1)

What runs (everything on 127.0.0.1, started here, each process by its pid):
- a real mosquitto with passwords and the ACL of docs/mqtt/aclfile.example (tests/mqtt/broker.py);
- a Dask scheduler and three `rig worker`s, each given a bench file of its own: a virtual bench
  (LPM01A, PPK2, Otii) with a `[worker]` table naming the SUTs it owns (cpu-tabu and cpu-sa;
  the third also loihi2, the Lava stand-in, where .venv-lava exists);
- QUBO sweeps dispatched to the cluster (`rig sweep qubo --cluster`, reporting to the broker as
  rig-b), back to back, each resumed with `rig sweep resume --cluster` when it stops;
- one rig under `rig serve` (rig-a), started over MQTT (`start` commands as the operator) for ASC
  runs on those three benches, and ASC runs started directly (`rig measure asc`), over and over;
- `rig dashboard`, with an HTTP client polling /api/state and holding /api/stream open (a page).

Faults, at times drawn from numpy.random.default_rng(SEED), every kind at least once however
short the soak (each round is a permutation of the kinds, one every half hour, spread out):
broker_restart (SIGKILL, restarted on its port), scheduler_restart (SIGKILL, restarted on its
port, workers back, the sweep resumed), worker_kill (SIGKILL, restarted), serve_kill (SIGKILL of
`rig serve` during a run, restarted), dut_unplug and monitor_unplug (SIGUSR2 / SIGUSR1 to the
run's virtual bench process: its DUT or monitor port goes away; the next run on that bench is the
replug), dut_stop (SIGSTOP of the DUT firmware past its reply deadline, then SIGCONT), disk_full
(the runs volume, a tmpfs of its own when run as root, filled, then freed) and dashboard_restart.

The audit (printed as a table; `--json FILE` writes it): every sweep point exactly once in its
sweep's events (the rig's own reader); every ASC run complete, or ended by an injected fault that
its folder names (manifest status and error; `incomplete`, the rig's word for a process killed
outright, for a run whose `rig serve` was SIGKILLed); every complete run passes `rig analyze
RUN`, and a bundle of complete runs `rig verify`; RSS, open fds and threads of every long-lived
process sampled on a fixed period, each process judged over its own life after its start-up (the
faults restart every role): flat when its last third's mean (its last hour's, for lives of 3 h or
more) is within 10 % of its second third's (its second hour's), `rig serve`'s samples between
runs and in a run judged apart (it holds a run's data only during one); no process outlives the
soak (every process started carries RIG_SOAK_ID in its environment, so that its children are found
too); no temporary file outlives it (the children's TMPDIR is inside the soak's one temp folder).
A soak killed outright (SIGKILL) can clean nothing up: the next soak clears what it left (its
processes, its mounted runs volume, its temp folder), found by the owner file in that folder.

Recovery, per fault, from the moment it was injected: the broker and `rig serve` until an
operator's `status` command gets rig serve's reply again; the scheduler until the resumed sweep
records a point; a worker until it has joined the scheduler again; the dashboard until the page
reads /api/state again; an unplugged or stopped DUT or monitor until a run on that bench (its
replug) completes; the full disk until a run started after it was freed completes. Resources:
the first 10 % of the soak (at most 5 min) after each (re)start of a process is left out.

The runs volume is kept under a third full: runs read back (and analysed) lose their traces and
move off it, the last two complete runs of each bench staying whole for the bundle. `--keep DIR`
copies the logs and the run folders there before the temp folder is removed.

Host time schedules the faults and the samples: this is an orchestration, not a measurement.
Bad input (`--hours` not a positive number or under 0.02, a negative seed, a port or the soak's
lock already held): one line on stderr, exit 2, nothing started. Exit 0 when the audit's
exactly-once, explained-runs and no-leftovers parts hold, 1 when one does not, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import http.client
import json
import math
import os
import queue
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.mqtt: the broker and MQTT client the tests use

#: Every kind of fault the soak injects, in no particular order (the seed orders them).
FAULT_KINDS = ("broker_restart", "scheduler_restart", "worker_kill", "serve_kill", "dut_unplug",
               "monitor_unplug", "dut_stop", "disk_full", "dashboard_restart")
#: Faults injected into a run by the track that runs it ("any": whichever takes it first; the
#: others by the fault thread).
RUN_FAULTS = {"serve_kill": "serve", "dut_unplug": "any", "monitor_unplug": "any",
              "dut_stop": "any"}
#: The shortest soak [h]: every kind of fault once, a DUT stop waiting out a 30 s deadline.
MIN_HOURS = 0.02
MAX_HOURS = 24.0 * 7
#: Marks every process the soak starts (and, inherited, every process those start).
MARKER_ENV = "RIG_SOAK_ID"
#: In each soak's temp folder: its pid and marker, so that a later soak can tell the folder of
#: a soak killed outright (SIGKILL: no cleanup ran), with its mounted runs volume and the
#: processes its marker names, and clear them (`clear_killed_soaks`).
OWNER_FILE = "soak.owner"
#: The source name of the runs volume's tmpfs (as /proc/mounts lists it).
VOLUME_SOURCE = "rig-soak-runs"
#: The soak's lock: an abstract unix socket of this name (no file to leave behind; the kernel
#: drops it when the process dies). The environment may name another (tests).
LOCK_ENV = "RIG_SOAK_LOCK"
DEFAULT_LOCK = "neurobench-rig-soak"
EXIT_BAD_INPUT, EXIT_AUDIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130
#: Flat: the later window's mean within this share of the earlier one's.
FLAT_SHARE = 0.10
#: ... and, for the counts (open fds, threads), within one of it: an integer cannot move by
#: less, and a process with 8 threads is not "growing" when a 9th comes and goes.
FLAT_COUNT_SLACK = 1
#: A process is judged flat or not over its own life from this many samples after its
#: start-up (two in each third); one that lived shorter (a fault restarted it) is not judged.
MIN_LIFE_SAMPLES = 6
#: Dask's shared lock files in the temp folder: made by every Dask worker, by design never
#: removed (two files, however many workers came and went); listed apart from leftovers.
DASK_LOCK_FILES = ("dask-scratch-space/global.lock", "dask-scratch-space/purge.lock")
#: The benches of the soak: (name, bench file it is made from, the worker it belongs to).
BENCHES = (("lpm01a", "sim.toml"), ("ppk2", "sim-ppk2.toml"), ("otii", "sim-otii.toml"))
#: Monitors that power the DUT over USB and can be unplugged (the Otii has its own supply).
UNPLUGGABLE = ("lpm01a", "ppk2")
RIG = "rig-a"  # the rig under `rig serve`
SWEEP_RIG = "rig-b"  # the sweeps' telemetry
#: What a run folder says when each fault ended it (manifest error, warning notes, status).
EXPLAINS: dict[str, re.Pattern[str]] = {
    "dut_unplug": re.compile(r"DUT.*(unplugged|reset or closed|closed|Input/output error|EIO)",
                             re.I),
    "monitor_unplug": re.compile(
        r"(LPM01A|PPK2|Otii|energy monitor|monitor).*(unplugged|read from|stream stopped|"
        r"closed|Input/output error|connection|reset)", re.I),
    "dut_stop": re.compile(r"never said|within [\d.]+ s|did not finish|did not answer|timed out",
                           re.I),
    "disk_full": re.compile(r"no space left|ENOSPC|disk|free space|space on|is full|full",
                            re.I),
}


class BadInput(Exception):
    """One line saying what to fix (exit 2, nothing started)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own: usage and two lines; ours: one
        raise BadInput(message)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(prog="benchmarks/soak.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--hours", type=float, required=True,
                   help=f"how long the load and the faults last, start-up included "
                        f"(>= {MIN_HOURS}; 0.1 is six minutes)")
    p.add_argument("--seed", type=int, required=True,
                   help="draws the fault schedule (numpy default_rng; >= 0)")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the audit here as JSON")
    for name in ("broker", "scheduler", "dashboard"):
        p.add_argument(f"--{name}-port", type=int, default=0, metavar="PORT",
                       help=f"the {name}'s port on 127.0.0.1 (default 0: a free one)")
    p.add_argument("--keep", type=Path, metavar="DIR",
                   help="copy the logs and the run folders here before the temp folder goes "
                        "(DIR must not exist)")
    args = p.parse_args(argv)
    if not math.isfinite(args.hours) or args.hours <= 0:
        raise BadInput(f"--hours {args.hours!r}: expected a positive number of hours "
                       "(0.1 is six minutes)")
    if args.hours < MIN_HOURS:
        raise BadInput(f"--hours {args.hours:g}: at least {MIN_HOURS} (72 s) to inject every "
                       "kind of fault once")
    if args.hours > MAX_HOURS:
        raise BadInput(f"--hours {args.hours:g}: at most {MAX_HOURS:g} (a week)")
    if args.seed < 0 or args.seed >= 2**63:
        raise BadInput(f"--seed {args.seed}: expected 0 .. 2**63-1 (numpy's default_rng takes "
                       "no negative seed)")
    if args.json is not None and not args.json.parent.is_dir():
        raise BadInput(f"--json {args.json}: {args.json.parent} is not a folder")
    if args.keep is not None and (args.keep.exists() or not args.keep.parent.is_dir()):
        raise BadInput(f"--keep {args.keep}: expected a new folder in an existing one")
    for name in ("broker", "scheduler", "dashboard"):
        port = getattr(args, f"{name}_port")
        if port and not 1024 <= port <= 65535:
            raise BadInput(f"--{name}-port {port}: expected 1024..65535, or 0 for a free one")
        if port and not port_free(port):
            raise BadInput(f"--{name}-port {port}: 127.0.0.1:{port} is in use (another soak?)")
    return args


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def take_lock() -> socket.socket:
    """The soak's lock (an abstract unix socket), or BadInput naming who holds it."""
    name = os.environ.get(LOCK_ENV) or DEFAULT_LOCK
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind("\0" + name)
    except OSError:
        sock.close()
        raise BadInput(f"another soak is running on this machine (it holds the lock "
                       f"'@{name}'); wait for it to end") from None
    return sock


def check_tools() -> None:
    """What the soak needs, before anything starts."""
    from tests.mqtt.broker import mosquitto_binary

    if mosquitto_binary() is None or shutil.which("mosquitto_passwd") is None:
        raise BadInput("mosquitto is not installed (make system-deps installs it)")
    for module, extra in (("distributed", "cluster"), ("aiomqtt", "mqtt"),
                          ("uvicorn", "dashboard"), ("psutil", "cluster"), ("numpy", "")):
        try:
            __import__(module)
        except ImportError:
            raise BadInput(f"{module} is not installed (pip install -e '.[{extra or 'test'}]')"
                           ) from None


# -- the schedule ------------------------------------------------------------------------------
@dataclass
class Fault:
    """One planned fault, and what happened when it was injected."""

    kind: str
    #: When it is due, seconds after the soak started.
    due_s: float
    params: dict[str, Any] = field(default_factory=dict)
    injected_s: float | None = None
    injected_wall: float | None = None
    #: When it was over (the process back, the disk freed), seconds after the start.
    cleared_s: float | None = None
    recovery_s: float | None = None
    target: str = ""
    note: str = ""

    @property
    def injected(self) -> bool:
        return self.injected_s is not None


def draw_schedule(rng: Any, start_s: float, end_s: float, short: bool) -> list[Fault]:
    """Rounds of every kind of fault in an order drawn from `rng`, spread over [start, end):
    one round every half hour (at least one), so that each kind comes about twice an hour. A
    DUT stop waits out its reply deadline: in the final 60 s it comes first of the faults
    injected into runs."""
    kinds = list(FAULT_KINDS)
    span = end_s - start_s
    rounds = max(1, round(span / 1800.0))
    slot = span / (rounds * len(kinds))
    faults: list[Fault] = []
    for r in range(rounds):
        order = [kinds[i] for i in rng.permutation(len(kinds))]
        for i, kind in enumerate(order):
            at = start_s + (r * len(kinds) + i + float(rng.uniform(0.1, 0.6))) * slot
            faults.append(Fault(kind, round(at, 2), _params(rng, kind, short)))
    # A DUT stop late in the soak would run past it (it waits out a 30 s deadline): in a short
    # soak, and in the last minute of a long one, it is the first of its round's faults
    # injected into runs (their kinds and parameters swapped).
    last_round = faults[-len(kinds):]
    stop = next(f for f in last_round if f.kind == "dut_stop")
    in_runs = [f for f in last_round if f.kind in RUN_FAULTS]
    if stop is not in_runs[0] and (short or end_s - stop.due_s < 60.0):
        first = in_runs[0]
        first.kind, stop.kind = stop.kind, first.kind
        first.params, stop.params = stop.params, first.params
    return sorted(faults, key=lambda f: f.due_s)


def _params(rng: Any, kind: str, short: bool) -> dict[str, Any]:
    """How long a process stays down, which worker or bench, when in a run: drawn now, so that
    one seed is one schedule."""
    def down(lo: float, hi: float) -> float:
        return round(float(rng.uniform(lo, hi)), 2)

    if kind in ("broker_restart", "scheduler_restart", "dashboard_restart"):
        return {"down_s": down(0.3, 1.5) if short else down(1.0, 10.0)}
    if kind == "worker_kill":
        return {"worker": int(rng.integers(3)),
                "down_s": down(0.3, 1.5) if short else down(1.0, 20.0)}
    if kind == "serve_kill":
        return {"after_runs": int(rng.integers(1, 3)),
                "down_s": down(0.3, 1.0) if short else down(1.0, 5.0)}
    if kind == "disk_full":
        return {"hold_s": down(2.0, 4.0) if short else down(10.0, 60.0)}
    if kind == "monitor_unplug":
        return {"bench": UNPLUGGABLE[int(rng.integers(len(UNPLUGGABLE)))],
                "after_runs": int(rng.integers(1, 3))}
    bench = BENCHES[int(rng.integers(len(BENCHES)))][0]
    if kind == "dut_stop":  # during a timed run, past its reply deadline (30 s at least)
        return {"bench": bench, "after_runs": 1 if short else int(rng.integers(1, 4))}
    return {"bench": bench, "after_runs": int(rng.integers(1, 3))}


# -- files -------------------------------------------------------------------------------------
def toml_text(data: dict[str, Any]) -> str:
    """A bench or sweep file's tables as TOML (scalars, lists of scalars, nested tables; a
    `resources` table inline)."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + " }"
        return repr(v)

    lines: list[str] = []

    def table(name: str, body: dict[str, Any]) -> None:
        lines.append(f"[{name}]")
        subs = {k: v for k, v in body.items() if isinstance(v, dict) and k != "resources"}
        lines.extend(f"{json.dumps(k)} = {value(v)}" for k, v in body.items() if k not in subs)
        lines.append("")
        for k, v in subs.items():
            table(f"{name}.{json.dumps(k)}", v)

    for name, body in data.items():
        table(json.dumps(name), body)
    return "\n".join(lines)


def soak_bench(base: str, *, worker: str | None, lava: bool) -> str:
    """benches/<base> for the soak (a run in a few seconds), with a [worker] table when it is a
    cluster worker's bench."""
    raw = tomllib.loads((ROOT / "benches" / base).read_text())
    raw["bench"]["name"] = f"soak: {raw['bench']['name']}"
    # The method as the bench file has it (rig verify checks its 5 timed runs of 10 s); one
    # test sample per class keeps the accuracy pass short.
    raw.setdefault("dataset", {})["samples_per_class"] = 1
    if worker is not None:
        owned = {"cpu-tabu": 1, "cpu-sa": 1, **({"loihi2": 1} if lava else {})}
        raw["worker"] = {"name": worker, "resources": owned}
    return toml_text(raw)


def sweep_file(batch: int, seeds: int, lava: bool) -> str:
    """One batch of the soak's sweep: small graphs, short timeouts, host power off (the three
    workers share one host), the seeds of this batch."""
    suts = ["cpu-tabu", "cpu-sa", *(["loihi2"] if lava else [])]
    options: dict[str, Any] = {"cpu-tabu": {"power_source": "none"},
                               "cpu-sa": {"power_source": "none"}}
    if lava:
        options["loihi2"] = {"python": str(ROOT / ".venv-lava" / "bin" / "python")}
    return toml_text({"sweep": {
        "suts": suts, "nodes": [10, 25], "densities": [0.05, 0.1],
        "seeds": list(range(batch * seeds, (batch + 1) * seeds)), "timeouts": [0.05],
        "targets": "compute", "sut_options": options}})


# -- processes ---------------------------------------------------------------------------------
@dataclass
class Child:
    """A long-lived process of the soak (its current incarnation)."""

    role: str
    popen: subprocess.Popen | None = None
    started_s: float = 0.0
    incarnations: int = 0
    #: A fault is handling it (its death is expected, its restart is the fault's).
    expected_down: bool = False
    #: Its output (a worker's says when it joined).
    log: Path | None = None


class Soak:
    """One soak: start everything, run the load and the faults, stop everything, audit."""

    def __init__(self, args: argparse.Namespace) -> None:
        import numpy as np

        self.args = args
        self.hours = float(args.hours)
        self.total_s = self.hours * 3600.0
        self.short = self.hours < 0.1
        self.rng = np.random.default_rng(args.seed)
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self.marker = uuid.uuid4().hex
        self.tmp = Path(tempfile.mkdtemp(prefix="rig-soak-"))
        (self.tmp / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(),
                                                       "marker": self.marker}) + "\n")
        self.tmp_entries_before = _tmp_rig_entries()
        self.children_tmp = self.tmp / "tmp"
        self.logs = self.tmp / "logs"
        self.work = self.tmp / "work"
        for d in (self.children_tmp, self.logs, self.work):
            d.mkdir()
        self.lava = (ROOT / ".venv-lava" / "bin" / "python").is_file()
        self.stop_load = threading.Event()
        #: The load's time is up (set when the drain starts).
        self.load_over = threading.Event()
        self.lock = threading.RLock()
        self.pids: set[int] = set()
        self.children: dict[str, Child] = {}
        self.faults: list[Fault] = []
        self.runs: list[RunRecord] = []
        self.sweeps: list[Path] = []
        self.sweep_sessions = 0
        self.sweep_failures: list[str] = []
        self.unexpected_exits: list[dict[str, Any]] = []
        self.samples: list[tuple[float, str, int, int, int, int]] = []
        #: The runs volume's use over time: (seconds, used bytes, free bytes).
        self.volume_samples: list[tuple[float, int, int]] = []
        self.analysis: dict[str, tuple[int, str]] = {}
        self.analyze_queue: queue.Queue[Path | None] = queue.Queue()
        self.disk_full = threading.Event()
        self.volume: Path | None = None
        self.volume_note = ""
        self.fillers: list[Path] = []
        self.stopped_pids: set[int] = set()
        self.log_lines: list[str] = []
        self.threads: list[threading.Thread] = []
        self.address = ""
        self.broker: Any = None
        self.operator: Any = None
        self.poller: DashboardPoller | None = None
        self.tracks: dict[str, AscTrack] = {}
        #: Faults for whichever track's run comes first (the DUT's and the monitor's).
        self.run_faults: queue.Queue[Fault] = queue.Queue()
        self.sweep_runner: SweepRunner | None = None
        self._rid = 0
        self.next_due_s = 0.0

    # -- small things ----------------------------------------------------------------------
    def now(self) -> float:
        """Seconds since the soak started."""
        return time.monotonic() - self.t0

    def run_length(self, bench: str) -> float:
        """How long a complete run on `bench` took so far (the mean; 10 s before the first)."""
        with self.lock:
            took = [r.ended_s - r.started_s for r in self.runs
                    if r.bench == bench and r.status == "complete"]
        return statistics.fmean(took) if took else 10.0

    def say(self, text: str) -> None:
        line = f"[{self.now():8.1f} s] {text}"
        with self.lock:
            self.log_lines.append(line)
        print(line, file=sys.stderr, flush=True)

    def env(self) -> dict[str, str]:
        return {**os.environ, MARKER_ENV: self.marker, "TMPDIR": str(self.children_tmp),
                "RIG_HOST_POWER_LOCK": str(self.tmp / "host-power.lock"),
                "PYTHONUNBUFFERED": "1"}

    def spawn(self, argv: list[str], log: Path, *, stdin: Any = subprocess.DEVNULL
              ) -> subprocess.Popen:
        """A process of the soak: marked, its output to `log`, its own session (a Ctrl-C in the
        terminal reaches the soak, which stops it by pid)."""
        with open(log, "ab") as out:
            popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=stdin,
                                     env=self.env(), cwd=self.work, start_new_session=True)
        with self.lock:
            self.pids.add(popen.pid)
        return popen

    def rig(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "rig.cli", *args]

    def next_id(self, what: str) -> str:
        with self.lock:
            self._rid += 1
            return f"soak-{what}-{self._rid}"

    # -- start -----------------------------------------------------------------------------
    def run(self) -> None:
        """Start, load and inject until the end, then drain (the audit's raw material)."""
        os.environ[MARKER_ENV] = self.marker  # the broker and scheduler helpers inherit it
        os.environ["TMPDIR"] = str(self.children_tmp)
        for line in clear_killed_soaks(self.tmp.parent):
            self.say(line)
        self.mount_volume()
        self.write_files()
        self.start_all()
        ready_s = self.now()
        self.say(f"everything up in {ready_s:.1f} s; load and faults until "
                 f"{self.total_s:.0f} s")
        # The schedule depends on the seed and the hours only (a fault due before everything
        # is up waits for it).
        tail = max(8.0, min(300.0, 0.08 * self.total_s))
        start = max(8.0, 0.04 * self.total_s)
        self.faults = draw_schedule(self.rng, start, self.total_s - tail, self.short)
        self.say("schedule: " + ", ".join(f"{f.kind}@{f.due_s:.0f}s" for f in self.faults))
        self.start_threads()
        self.inject_faults()
        self.drain()
        self.say("drained")

    def mount_volume(self) -> None:
        """The runs volume: a tmpfs of its own (root), else a plain folder (no disk_full)."""
        mount = self.tmp / "volume"
        mount.mkdir()
        size_mb = 256 if self.short else 512
        if os.geteuid() != 0:
            self.volume_note = "not root: no filesystem of its own, disk_full not injected"
        else:
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755",
                                   VOLUME_SOURCE, str(mount)],
                                  capture_output=True, text=True, timeout=30, check=False)
            if done.returncode == 0:
                self.volume = mount
                self.volume_note = f"tmpfs of {size_mb} MB"
            else:
                self.volume_note = ("mount -t tmpfs failed (" + (done.stderr.strip() or
                                    str(done.returncode)) + "): disk_full not injected")
        self.runs_dir = mount / "runs"
        self.runs_dir.mkdir()
        self.archive = self.tmp / "archive"
        self.archive.mkdir()
        self.say(f"runs volume: {self.volume_note}")

    def write_files(self) -> None:
        self.benches = self.tmp / "benches"
        self.direct_benches = self.tmp / "benches-direct"
        self.sweeps_dir = self.tmp / "sweeps"
        for d in (self.benches, self.direct_benches, self.sweeps_dir):
            d.mkdir()
        for i, (name, base) in enumerate(BENCHES):
            (self.benches / f"soak-{name}.toml").write_text(
                soak_bench(base, worker=f"soak-w{i + 1}", lava=self.lava and i == 2))
            (self.direct_benches / f"direct-{name}.toml").write_text(
                soak_bench(base, worker=None, lava=False))
        from tests.mqtt.broker import USERS

        self.passwords = self.tmp / "passwords"
        self.passwords.mkdir()
        for user in (RIG, SWEEP_RIG, "viewer"):
            (self.passwords / user).write_text(USERS[user] + "\n")

    def start_all(self) -> None:
        from tests.mqtt.broker import Broker
        from tests.mqtt.listener import Listener

        self.broker = Broker(self.tmp / "broker", port=self.args.broker_port).start()
        self.pids.add(self.broker.proc.pid)
        self.children["broker"] = Child("broker", self.broker.proc, self.now(), 1)
        self.start_scheduler()
        for i in range(3):
            self.start_worker(i)
        self.dashboard_port = self.args.dashboard_port or _free_port()
        self.start_dashboard()
        self.start_serve()
        self.operator = Listener(self.broker, "operator",
                                 filters=(f"neurobench/{RIG}/cmd/reply",
                                          f"neurobench/{RIG}/status"))
        self.operator.__enter__()
        deadline = time.monotonic() + 120.0
        for i in range(3):
            self.wait_worker(i, deadline)
        # rig serve takes commands once it has subscribed: asked again until it answers.
        while self.ask({"action": "status"}, timeout=2.0) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("rig serve did not answer a status command in time:\n"
                                   + _tail(self.logs / "serve.log"))
        if not _http_ok(self.dashboard_port, deadline):
            raise RuntimeError("the dashboard did not answer in time:\n"
                               + _tail(self.logs / "dashboard.log"))

    def start_scheduler(self) -> None:
        from rig.cluster.local import start_scheduler

        child = self.children.setdefault("scheduler", Child("scheduler"))
        folder = self.logs / f"scheduler-{child.incarnations + 1}"
        port = int(self.address.rsplit(":", 1)[1]) if self.address else \
            (self.args.scheduler_port or 0)
        address, proc = start_scheduler(folder, port=port)
        self.address = address
        with self.lock:
            self.pids.add(proc.pid)
            child.popen, child.started_s = proc.popen, self.now()
            child.incarnations += 1

    def start_worker(self, i: int) -> None:
        name = f"soak-w{i + 1}"
        child = self.children.setdefault(f"worker-{i + 1}", Child(f"worker-{i + 1}"))
        log = self.logs / f"worker-{i + 1}.{child.incarnations + 1}.log"
        bench = self.benches / f"soak-{BENCHES[i][0]}.toml"
        popen = self.spawn(self.rig("worker", "--scheduler", self.address, "--bench", str(bench),
                                    "--name", name, "--listen-host", "127.0.0.1",
                                    "--nthreads", "1"), log)
        with self.lock:
            child.popen, child.started_s = popen, self.now()
            child.incarnations += 1
            child.log = log

    def wait_worker(self, i: int, deadline: float) -> float:
        """Until worker i says it joined (its log's first line); seconds waited."""
        child = self.children[f"worker-{i + 1}"]
        t = time.monotonic()
        marker = f"rig worker soak-w{i + 1} at "
        log = child.log
        assert log is not None
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if marker in log.read_text(errors="replace"):
                    return time.monotonic() - t
            if child.popen is not None and child.popen.poll() is not None:
                raise RuntimeError(f"worker {i + 1} exited ({child.popen.returncode}):\n"
                                   + _tail(log))
            time.sleep(0.1)
        raise RuntimeError(f"worker {i + 1} did not join in time:\n" + _tail(log))

    def start_dashboard(self) -> None:
        child = self.children.setdefault("dashboard", Child("dashboard"))
        popen = self.spawn(self.rig("dashboard", "--mqtt", self.broker.url("viewer"),
                                    "--mqtt-password-file", str(self.passwords / "viewer"),
                                    "--port", str(self.dashboard_port)),
                           self.logs / "dashboard.log")
        with self.lock:
            child.popen, child.started_s = popen, self.now()
            child.incarnations += 1

    def start_serve(self) -> None:
        child = self.children.setdefault("serve", Child("serve"))
        popen = self.spawn(self.rig("serve", "--mqtt", self.broker.url(RIG),
                                    "--mqtt-password-file", str(self.passwords / RIG),
                                    "--benches-dir", str(self.benches),
                                    "--sweeps-dir", str(self.sweeps_dir),
                                    "--runs-dir", str(self.runs_dir)),
                           self.logs / "serve.log")
        with self.lock:
            child.popen, child.started_s = popen, self.now()
            child.incarnations += 1

    def ask(self, command: dict[str, Any], timeout: float = 10.0) -> dict[str, Any] | None:
        """A command to rig serve as the operator; its reply, or None (none in time: the
        broker or the rig is down, or the message was lost)."""
        rid = self.next_id(command["action"])
        with self.operator._lock:  # a night of replies and statuses: the last few are enough
            del self.operator.messages[:-200]
        self.operator.send(f"neurobench/{RIG}/cmd", {"request_id": rid, **command})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in reversed(self.operator.received(f"neurobench/{RIG}/cmd/reply")):
                with contextlib.suppress(ValueError, AttributeError):
                    reply = m.json()
                    if reply.get("request_id") == rid:
                        return reply
            time.sleep(0.05)
        return None

    # -- the load --------------------------------------------------------------------------
    def start_threads(self) -> None:
        self.poller = DashboardPoller(self.dashboard_port, self.now)
        self.sweep_runner = SweepRunner(self)
        self.tracks = {"serve": ServeTrack(self), "direct": DirectTrack(self)}
        for target, name in ((self.sample_loop, "sampler"), (self.watch_loop, "watchdog"),
                             (self.analyze_loop, "analyzer")):
            self.threads.append(threading.Thread(target=target, name=name, daemon=True))
        self.threads += [self.poller, self.sweep_runner, *self.tracks.values()]
        for t in self.threads:
            t.start()

    def sample_loop(self) -> None:
        """RSS, open fds and threads of every long-lived process, on a fixed period."""
        import psutil

        # Every 10 s (at least each minute, as asked): `rig serve`'s RSS is ~140 MB between
        # runs and ~205 MB in one, so a third's mean of one sample a minute (20 in a 1 h soak)
        # moved with how many landed in runs (149 -> 174 MB at 0e70476, its lowest and highest
        # samples flat); 120 a third hold that share to a few %.
        period = 10.0 if self.hours >= 1 else min(10.0, max(2.0, self.total_s / 60.0))
        self.sample_period = period
        next_at = time.monotonic()
        while not self.stop_load.is_set():
            with self.lock:
                current = [(c.role, c.popen.pid, c.started_s) for c in self.children.values()
                           if c.popen is not None and c.popen.poll() is None]
            t = self.now()
            with contextlib.suppress(OSError):
                usage = shutil.disk_usage(self.runs_dir)
                self.volume_samples.append((round(t, 1), usage.used, usage.free))
            for role, pid, _ in current:
                with contextlib.suppress(psutil.Error):
                    p = psutil.Process(pid)
                    with p.oneshot():
                        self.samples.append((t, role, pid, p.memory_info().rss, p.num_fds(),
                                             p.num_threads()))
            next_at += period
            self.stop_load.wait(max(0.0, next_at - time.monotonic()))

    def watch_loop(self) -> None:
        """A long-lived process that died with no fault handling it: noted, started again."""
        while not self.stop_load.is_set():
            for role in ("dashboard", "serve", "worker-1", "worker-2", "worker-3"):
                with self.lock:
                    child = self.children.get(role)
                    gone = (child is not None and not child.expected_down and
                            child.popen is not None and child.popen.poll() is not None)
                if not gone:
                    continue
                assert child is not None and child.popen is not None
                self.unexpected_exits.append({"role": role, "at_s": round(self.now(), 1),
                                              "code": child.popen.returncode})
                self.say(f"{role} exited by itself ({child.popen.returncode}): started again")
                with contextlib.suppress(Exception):
                    self.restart_role(role)
            self.stop_load.wait(1.0)

    def restart_role(self, role: str) -> None:
        if role == "dashboard":
            self.start_dashboard()
        elif role == "serve":
            self.start_serve()
        elif role.startswith("worker-"):
            self.start_worker(int(role[-1]) - 1)

    def analyze_loop(self) -> None:
        """`rig analyze RUN` on every complete run as it ends."""
        while True:
            run = self.analyze_queue.get()
            if run is None:
                return
            try:
                done = subprocess.run(self.rig("analyze", str(run)), capture_output=True,
                                      text=True, timeout=300, env=self.env(), cwd=self.work,
                                      check=False)
                said = (done.stderr.strip() or done.stdout.strip()).splitlines()
                self.analysis[run.name] = (done.returncode, said[-1] if said else "")
            except subprocess.TimeoutExpired:
                self.analysis[run.name] = (-1, "rig analyze did not finish in 300 s")
            self.archive_old_runs()

    def archive_old_runs(self) -> None:
        """Keep the runs volume under a third full: runs read back (and analysed, when
        complete) lose their traces and move to the archive (on the temp folder's disk); the
        last two complete runs of each bench stay whole for the bundle."""
        if self.volume is None:
            return
        usage = shutil.disk_usage(self.volume)
        if usage.used < usage.total / 3 or self.disk_full.is_set():
            return
        with self.lock:
            ended = [r for r in self.runs if r.folder is not None and r.evaluated
                     and r.folder.parent == self.runs_dir]
        keep: dict[str, list[RunRecord]] = {}
        for r in reversed(ended):
            if r.status == "complete" and len(keep.setdefault(r.bench, [])) < 2:
                keep[r.bench].append(r)
        kept = {id(r) for rs in keep.values() for r in rs}
        for r in ended:
            if id(r) in kept or (r.status == "complete" and r.folder.name not in self.analysis):
                continue
            assert r.folder is not None
            with contextlib.suppress(OSError, shutil.Error):
                shutil.rmtree(r.folder / "traces")  # a night of traces would fill any disk
                target = self.archive / r.folder.name
                shutil.move(str(r.folder), str(target))
                r.folder = target
            usage = shutil.disk_usage(self.volume)
            if usage.used < usage.total / 5:
                break

    # -- faults ----------------------------------------------------------------------------
    def inject_faults(self) -> None:
        """Each fault when it is due (run faults handed to their track), until the end."""
        for n, fault in enumerate(self.faults):
            #: When the next fault is due: a fault waits for its moment no longer.
            self.next_due_s = self.faults[n + 1].due_s if n + 1 < len(self.faults) else \
                self.total_s
            while self.now() < fault.due_s:
                if self.now() >= self.total_s:
                    break
                time.sleep(min(0.2, max(0.0, fault.due_s - self.now())))
            if self.now() >= self.total_s:
                break
            track = RUN_FAULTS.get(fault.kind)
            if track == "any":
                self.run_faults.put(fault)
                continue
            if track is not None:
                self.tracks[track].assign(fault)
                continue
            try:
                getattr(self, f"fault_{fault.kind}")(fault)
            except Exception as exc:  # the soak goes on; the audit shows the fault's note
                fault.note = f"{type(exc).__name__}: {exc}"
                self.say(f"{fault.kind}: {fault.note}")
        while self.now() < self.total_s:
            time.sleep(0.2)

    def mark(self, fault: Fault, target: str = "") -> None:
        fault.injected_s, fault.injected_wall, fault.target = self.now(), time.time(), target
        self.say(f"fault {fault.kind} {target} {fault.params}")

    def fault_broker_restart(self, fault: Fault) -> None:
        with self.lock:
            self.children["broker"].expected_down = True
        self.mark(fault, "mosquitto")
        self.broker.kill()
        time.sleep(fault.params["down_s"])
        self.broker.start()
        with self.lock:
            self.pids.add(self.broker.proc.pid)
            child = self.children["broker"]
            child.popen, child.started_s, child.expected_down = self.broker.proc, self.now(), False
            child.incarnations += 1
        fault.cleared_s = self.now()
        # Recovered: the operator's command reaches rig serve and its reply comes back.
        deadline = time.monotonic() + 120.0
        while time.monotonic() < deadline and self.ask({"action": "status"}, 2.0) is None:
            pass
        fault.recovery_s = round(self.now() - fault.injected_s, 2)  # type: ignore[operator]

    def fault_scheduler_restart(self, fault: Fault) -> None:
        # A sweep session with points under way, so that the resume has something to do (if
        # one comes before the load's end).
        runner = self.sweep_runner
        deadline = time.monotonic() + min(10.0, max(0.0, self.next_due_s - self.now() - 1.0),
                                          max(0.0, self.total_s - self.now() - 5.0))
        while runner is not None and not runner.busy() and time.monotonic() < deadline:
            time.sleep(0.2)
        fault.params["sweep_under_way"] = runner is not None and runner.busy()
        with self.lock:
            for role in ("scheduler", "worker-1", "worker-2", "worker-3"):
                self.children[role].expected_down = True
            proc = self.children["scheduler"].popen
        self.mark(fault, self.address)
        assert proc is not None
        _kill(proc, signal.SIGKILL)
        time.sleep(fault.params["down_s"])
        self.start_scheduler()
        # The workers close when their scheduler goes away: each one started again.
        deadline = time.monotonic() + 60.0
        for i in range(3):
            child = self.children[f"worker-{i + 1}"]
            assert child.popen is not None
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(max(0.1, deadline - time.monotonic()))
            if child.popen.poll() is None:
                stop_pid(child.popen)
            self.start_worker(i)
        for i in range(3):
            self.wait_worker(i, time.monotonic() + 90.0)
        with self.lock:
            for role in ("scheduler", "worker-1", "worker-2", "worker-3"):
                self.children[role].expected_down = False
        fault.cleared_s = self.now()
        # Recovered: the resumed sweep records a point again (found in its folder by the
        # audit); with no sweep under way, once the workers are back.
        if not fault.params["sweep_under_way"]:
            fault.recovery_s = round(fault.cleared_s - (fault.injected_s or 0.0), 2)

    def fault_worker_kill(self, fault: Fault) -> None:
        i = fault.params["worker"]
        role = f"worker-{i + 1}"
        with self.lock:
            child = self.children[role]
            child.expected_down = True
            popen = child.popen
        assert popen is not None
        self.mark(fault, f"soak-w{i + 1} (pid {popen.pid})")
        _kill(popen, signal.SIGKILL)
        time.sleep(fault.params["down_s"])
        self.start_worker(i)
        fault.cleared_s = self.now()
        with contextlib.suppress(RuntimeError):
            self.wait_worker(i, time.monotonic() + 90.0)
            fault.recovery_s = round(self.now() - fault.injected_s, 2)  # type: ignore[operator]
        with self.lock:
            child.expected_down = False

    def kill_serve(self, fault: Fault) -> None:
        """rig serve SIGKILLed (by its track, during a run) and started again."""
        with self.lock:
            child = self.children["serve"]
            child.expected_down = True
            popen = child.popen
        assert popen is not None
        self.mark(fault, f"rig serve (pid {popen.pid})")
        _kill(popen, signal.SIGKILL)
        time.sleep(fault.params["down_s"])
        self.start_serve()
        with self.lock:
            child.expected_down = False
        fault.cleared_s = self.now()
        deadline = time.monotonic() + 120.0
        while time.monotonic() < deadline and self.ask({"action": "status"}, 2.0) is None:
            pass
        fault.recovery_s = round(self.now() - fault.injected_s, 2)  # type: ignore[operator]

    def fault_dashboard_restart(self, fault: Fault) -> None:
        with self.lock:
            child = self.children["dashboard"]
            child.expected_down = True
            popen = child.popen
        assert popen is not None and self.poller is not None
        self.mark(fault, f"rig dashboard (pid {popen.pid})")
        _kill(popen, signal.SIGKILL)
        time.sleep(fault.params["down_s"])
        self.start_dashboard()
        with self.lock:
            child.expected_down = False
        fault.cleared_s = self.now()
        at = self.poller.ok_after(fault.injected_s or 0.0, 60.0)
        if at is not None:
            fault.recovery_s = round(at - (fault.injected_s or 0.0), 2)

    def fault_disk_full(self, fault: Fault) -> None:
        if self.volume is None:
            fault.note = f"skipped: {self.volume_note}"
            self.say(f"disk_full {fault.note}")
            return
        self.mark(fault, str(self.volume))
        self.disk_full.set()
        try:
            free = shutil.disk_usage(self.volume).free
            filled = self.fill(self.volume)
            fault.note = (f"{free / 2**20:.1f} MiB free filled ({filled / 2**20:.1f} MiB); "
                          f"{shutil.disk_usage(self.volume).free} B left")
            time.sleep(fault.params["hold_s"])
        finally:
            self.free()
            self.disk_full.clear()
        fault.cleared_s = self.now()
        fault.note += f"; freed: {shutil.disk_usage(self.volume).free / 2**20:.1f} MiB free"
        self.say(f"disk_full over: {fault.note}")

    def fill(self, volume: Path) -> int:
        """Fill the volume to the last block (fallocate, then small writes)."""
        total = 0
        chunk = shutil.disk_usage(volume).free
        n = 0
        while chunk >= 4096:
            path = volume / f".filler-{n}"
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            except OSError:
                break
            self.fillers.append(path)
            n += 1
            try:
                os.posix_fallocate(fd, 0, chunk)
                total += chunk
            except OSError:
                chunk //= 2
            finally:
                os.close(fd)
        with contextlib.suppress(OSError), open(volume / ".filler-tail", "wb") as f:
            self.fillers.append(volume / ".filler-tail")
            for _ in range(4096):
                f.write(b"\0" * 512)
                f.flush()
                total += 512
        return total

    def free(self) -> None:
        for path in self.fillers:
            with contextlib.suppress(OSError):
                path.unlink()
        self.fillers.clear()

    # -- the end ---------------------------------------------------------------------------
    def drain(self) -> None:
        """No more faults: the tracks end their runs, the sweep finishes its points."""
        self.say("load over: the tracks end their runs, the sweep finishes")
        self.load_over.set()
        for track in self.tracks.values():
            track.stopping.set()
        grace = time.monotonic() + max(60.0, 0.05 * self.total_s)
        for track in self.tracks.values():
            track.join(max(0.1, grace - time.monotonic()))
        for track in self.tracks.values():
            if track.is_alive():
                track.abort()
                track.join(30.0)
        if self.sweep_runner is not None:
            self.sweep_runner.finishing.set()
            self.sweep_runner.join(max(60.0, 0.05 * self.total_s))
            if self.sweep_runner.is_alive():
                self.sweep_runner.abort()
                self.sweep_runner.join(30.0)
        self.stop_load.set()
        if self.poller is not None:
            self.poller.stop.set()
        self.analyze_queue.put(None)
        for t in self.threads:
            if t not in (*self.tracks.values(), self.sweep_runner):
                t.join(330.0 if t.name == "analyzer" else 15.0)

    def cleanup(self) -> dict[str, Any]:
        """Stop every process by pid (the rig's own first, cleanly), then count what is left:
        processes carrying the soak's marker, files in the children's TMPDIR. Then kill what is
        left, unmount the volume and remove the temp folder."""
        import psutil

        self.say("stopping every process")
        self.stop_load.set()
        with contextlib.suppress(Exception):
            self.free()
        for pid in list(self.stopped_pids):  # a stopped DUT must be able to die
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        for track in self.tracks.values():
            track.abort()
        if self.sweep_runner is not None:
            self.sweep_runner.abort()
        if self.poller is not None:
            self.poller.stop.set()
        with contextlib.suppress(Exception):
            if self.operator is not None:
                self.operator.__exit__(None, None, None)
        order = ["serve", "dashboard", "worker-1", "worker-2", "worker-3", "scheduler"]
        for role in order:
            child = self.children.get(role)
            if child is not None and child.popen is not None:
                stop_pid(child.popen, grace_s=20.0 if role == "serve" else 10.0)
        if self.broker is not None:
            with contextlib.suppress(Exception):
                self.broker.stop()
        self.say("stopped; looking for leftovers")
        # What the rig left: processes of the soak still there once the rig's were stopped.
        deadline = time.monotonic() + 5.0
        left: list[Any] = []
        while True:
            left = _marked(self.marker, psutil)
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        leftovers = []
        for p in left:
            with contextlib.suppress(psutil.Error):
                leftovers.append({"pid": p.pid, "cmdline": " ".join(p.cmdline())[:200]})
        for pid in self.pids | {p.pid for p in left}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if pid != os.getpid():
                    os.kill(pid, signal.SIGKILL)
        temp_left = sorted(str(p.relative_to(self.children_tmp))
                           for p in self.children_tmp.rglob("*") if p.is_file())
        by_design = [p for p in temp_left if p in DASK_LOCK_FILES]
        temp_left = [p for p in temp_left if p not in DASK_LOCK_FILES]
        if self.args.keep is not None:
            with contextlib.suppress(OSError, shutil.Error):
                self.args.keep.mkdir()
                shutil.copytree(self.logs, self.args.keep / "logs")
                shutil.copytree(self.runs_dir, self.args.keep / "runs", symlinks=True)
                shutil.copytree(self.archive, self.args.keep / "archive", symlinks=True)
                (self.args.keep / "soak.log").write_text("\n".join(self.log_lines) + "\n")
        kept = self.keep_unexplained()
        if self.volume is not None:
            done = subprocess.run(["umount", str(self.volume)], capture_output=True, timeout=30,
                                  check=False)
            if done.returncode != 0:
                subprocess.run(["umount", "-l", str(self.volume)], capture_output=True,
                               timeout=30, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)
        new_tmp = sorted(set(_tmp_rig_entries()) - set(self.tmp_entries_before))
        return {"leftover_processes": len(leftovers), "leftover_process_list": leftovers,
                "leftover_temp_files": len(temp_left), "leftover_temp_file_list": temp_left[:50],
                "temp_files_by_design": by_design,
                "temp_folder_removed": not self.tmp.exists(),
                "new_tmp_rig_entries": new_tmp[:50],
                **({"unexplained_kept": str(kept)} if kept is not None else {})}

    def keep_unexplained(self) -> Path | None:
        """The folders of runs nothing explained, and the processes' logs, copied beside the
        audit's JSON (`NAME.unexplained/`) before the runs volume goes: without them a rare
        failure cannot be read once the soak has ended. Traces are kept up to `KEEP_TRACE_MB`
        each (a damaged one is what there is to read); None when there is nothing to keep or
        no --json."""
        runs = [r for r in self.runs if r.folder is not None and r.status != "complete"
                and not r.explained_by]
        if not runs or self.args.json is None:
            return None
        dest = self.args.json.with_suffix(".unexplained")
        with contextlib.suppress(OSError, shutil.Error):
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir()
            for r in runs:
                assert r.folder is not None
                if r.folder.is_dir():
                    shutil.copytree(r.folder, dest / r.folder.name, symlinks=True,
                                    ignore=_too_big_to_keep)
            shutil.copytree(self.logs, dest / "logs")
        return dest

    # -- the audit -------------------------------------------------------------------------
    def audit(self) -> dict[str, Any]:
        """Exactly-once of the sweep points, the runs explained, analysed and verified, the
        faults and their recovery, the resources (before the processes are stopped)."""
        out: dict[str, Any] = {"hours": self.hours, "seed": self.args.seed,
                               "lava": self.lava, "runs_volume": self.volume_note,
                               "audit_errors": []}
        for part in (self.audit_sweeps, self.audit_runs, self.bundle_and_verify,
                     self.audit_faults, self.audit_resources):
            try:
                found = part()
            except Exception as exc:  # said, and the other parts still audited
                out["audit_errors"].append(f"{part.__name__}: {type(exc).__name__}: {exc}")
                self.say(f"audit: {part.__name__} failed: {type(exc).__name__}: {exc}")
                continue
            out.update({"verify": found} if part == self.bundle_and_verify else found)
        self.say(f"audit done (rig verify {out.get('verify', {}).get('status')})")
        out["unexpected_exits"] = self.unexpected_exits
        return out

    def audit_sweeps(self) -> dict[str, Any]:
        from rig.qubo.sweep import SweepPointDone, read_sweep
        from rig.run.store import load_run

        total = lost = doubled = failed = 0
        sweeps = []
        for path in self.sweeps:
            try:
                record = read_sweep(path, check_running=False)
            except Exception as exc:  # a folder no reader can take is a finding, not a crash
                sweeps.append({"folder": path.name, "status": "unreadable",
                               "error": f"{type(exc).__name__}: {exc}"})
                continue
            counts: dict[str, int] = {}
            why: dict[str, int] = {}  # a failed point's SUT and error -> how many
            for event in load_run(path).events:
                if isinstance(event, SweepPointDone):
                    counts[event.key] = counts.get(event.key, 0) + 1
                    if event.status != "ok":
                        text = f"{event.sut}: {(event.error or '')[:160]}"
                        why[text] = why.get(text, 0) + 1
            keys = [p.key for p in record.spec.points()]
            n_lost = sum(1 for k in keys if counts.get(k, 0) == 0)
            n_doubled = sum(1 for k in keys if counts.get(k, 0) > 1)
            total += len(keys)
            lost += n_lost
            doubled += n_doubled
            failed += record.failed
            sweeps.append({"folder": path.name, "status": record.status, "points": len(keys),
                           "lost": n_lost, "doubled": n_doubled, "failed": record.failed,
                           "failed_why": why, "sessions": record.sessions})
        return {"points_total": total, "points_lost": lost, "points_doubled": doubled,
                "points_failed": failed, "sweeps": sweeps,
                "sweep_sessions": self.sweep_sessions,
                "sweep_stops": self.sweep_failures[-20:]}

    def audit_runs(self) -> dict[str, Any]:
        runs = [r for r in self.runs if r.folder is not None]
        complete = [r for r in runs if r.status == "complete"]
        unexplained = [r for r in runs if r.status != "complete" and not r.explained_by]
        analysed = [r for r in complete if r.folder and r.folder.name in self.analysis]
        bad = [{"run": r.folder.name, "code": self.analysis[r.folder.name][0],
                "said": self.analysis[r.folder.name][1]} for r in analysed
               if r.folder and self.analysis[r.folder.name][0] != 0]
        return {
            "runs_total": len(runs), "runs_complete": len(complete),
            "runs_failed_explained": len(runs) - len(complete) - len(unexplained),
            "runs_failed_unexplained": len(unexplained),
            "runs_unexplained": [r.summary() for r in unexplained],
            "runs_by_fault": _count(r.explained_by for r in runs if r.explained_by),
            "starts_without_folder": sum(1 for r in self.runs if r.folder is None),
            "runs_analyzed": len(analysed), "runs_analyze_failed": len(bad),
            "analyze_failures": bad,
            "runs": [r.summary() for r in self.runs],
        }

    def bundle_and_verify(self) -> dict[str, Any]:
        """`rig keys new`, `rig bundle` of the complete runs still on the runs volume (the last
        two of each bench), `rig verify --key`."""
        picked: dict[str, list[Path]] = {}
        for r in reversed(self.runs):
            if (r.status == "complete" and r.folder is not None
                    and r.folder.parent == self.runs_dir
                    and len(picked.setdefault(r.bench, [])) < 2):
                picked[r.bench].append(r.folder)
        folders = sorted(p for ps in picked.values() for p in ps)
        if not folders:
            return {"status": "skipped", "detail": "no complete run to bundle"}
        keys = self.tmp / "keys"
        keys.mkdir(exist_ok=True)
        bundle = self.tmp / "bundle.zip"
        steps = [("keys", self.rig("keys", "new", "--out", str(keys / "lab"))),
                 ("bundle", self.rig("bundle", *map(str, folders), "--key",
                                     str(keys / "lab.key"), "--out", str(bundle))),
                 ("verify", self.rig("verify", str(bundle), "--key", str(keys / "lab.pub"),
                                     "--json"))]
        for what, argv in steps:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=900,
                                  env=self.env(), cwd=self.work, check=False)
            said = [x for x in (done.stderr + done.stdout).splitlines() if x.strip()]
            if what == "verify" and done.returncode == 1:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    failed = [f"{c.get('run') or '(bundle)'}: {c['item']}: {c['detail']}"
                              for c in json.loads(done.stdout)["checks"] if c["ok"] is False]
                    return {"status": "failed", "runs": len(folders),
                            "detail": f"{len(failed)} checks failed", "failed_checks": failed}
            if done.returncode != 0:
                last = next((x for x in reversed(said) if x.startswith("rig: ")), said[-1]
                            if said else str(done.returncode))
                if "invalid choice" in last:
                    return {"status": "skipped", "runs": len(folders),
                            "detail": f"rig {what} does not exist here: {last[:300]}"}
                return {"status": "failed", "runs": len(folders),
                        "detail": f"rig {what} exited {done.returncode}: {last[:400]}"}
        return {"status": "ok", "runs": len(folders),
                "detail": f"{len(folders)} runs bundled, rig verify --key: every check holds"}

    def audit_faults(self) -> dict[str, Any]:
        # Recovery of the faults inside runs: the next complete run on that bench (the replug),
        # or, for the disk, the next complete run that started after it was freed.
        for f in self.faults:
            if not f.injected or f.recovery_s is not None:
                continue
            if f.kind in ("dut_unplug", "monitor_unplug", "dut_stop"):
                after = [r for r in self.runs if r.status == "complete"
                         and r.bench == f.params.get("bench") and r.started_s > f.injected_s]
                if after:
                    f.recovery_s = round(after[0].ended_s - f.injected_s, 2)  # type: ignore[operator]
            elif f.kind == "scheduler_restart" and f.injected_wall is not None:
                later = [t for path in self.sweeps for t in _point_times(path)
                         if t > f.injected_wall]
                if later:
                    f.recovery_s = round(min(later) - f.injected_wall, 2)
            elif f.kind == "disk_full" and f.cleared_s is not None:
                after = [r for r in self.runs if r.status == "complete"
                         and r.started_s >= f.cleared_s]
                if after:
                    f.recovery_s = round(min(r.ended_s for r in after) - f.injected_s, 2)  # type: ignore[operator]
        counts = {k: sum(1 for f in self.faults if f.kind == k and f.injected)
                  for k in FAULT_KINDS}
        recovery: dict[str, dict[str, Any]] = {}
        for k in FAULT_KINDS:
            times = [f.recovery_s for f in self.faults if f.kind == k and f.recovery_s is not None]
            recovery[k] = {"count": counts[k], "recovered": len(times),
                           "times_s": times,
                           "mean_s": round(statistics.fmean(times), 2) if times else None,
                           "max_s": max(times) if times else None}
        return {"faults": counts, "recovery": recovery,
                "fault_log": [{**asdict(f), "due_s": f.due_s} for f in self.faults]}

    def audit_resources(self) -> dict[str, Any]:
        """Per long-lived role, each process (pid) judged over its own life: a fault restarts
        every role, and a fresh process has not yet grown to its working size, so a role's
        mean across restarts mixes start-ups into it. Each process's samples after its
        start-up (the first 10 % of the soak, at most 5 min; and before the last sample of a
        process that was stopped before the soak ended) are split like the soak's: the
        last third's mean against the second third's (the last hour against the second hour,
        for lives of 3 h or more); flat within 10 % (counts: or within one). A process with
        fewer than `MIN_LIFE_SAMPLES` such samples is too short-lived to judge. `rig serve`
        holds a run's samples only while it runs one, so its samples are two populations:
        each is judged on its own (`_serve_states`), or a third's mean would move with how
        many samples landed in a run. A role shows the figures of its part that moved most."""
        warmup = min(300.0, 0.1 * self.total_s)
        by_pid: dict[int, list[tuple[Any, ...]]] = {}
        for sample in self.samples:
            by_pid.setdefault(sample[2], []).append(sample)
        # A process that ended before the sampling did was stopped (a fault, a restart): its
        # last sample may catch it closing its files and threads, which says nothing of a leak
        # (a 1 h soak at 5ff61ff: a worker's last third 19.8 fds against 22, from one sample
        # of 4 as the scheduler's restart took it down). That sample is left out.
        end = max((sample[0] for sample in self.samples), default=0.0)
        period = float(getattr(self, "sample_period", 10.0))
        for pid, life in by_pid.items():
            if len(life) > 1 and life[-1][0] < end - 0.5 * period:
                by_pid[pid] = life[:-1]
        busy = sorted((r.started_s, r.ended_s) for r in getattr(self, "runs", [])
                      if r.track == "serve" and r.ended_s > r.started_s)
        roles: dict[str, Any] = {}
        flat_all: list[bool] = []
        for role in sorted({s[1] for s in self.samples}):
            pids = sorted({s[2] for s in self.samples if s[1] == role})
            entry: dict[str, Any] = {"samples": sum(1 for s in self.samples if s[1] == role),
                                     "incarnations": self.children[role].incarnations,
                                     "judged": 0}
            # (state, its samples, the span of the process's grown life)
            parts: list[tuple[str, list[tuple[Any, ...]], tuple[float, float]]] = []
            judged: set[int] = set()
            for pid in pids:
                life = by_pid[pid]
                born = life[0][0]
                grown = [x for x in life if x[0] - born >= warmup]
                if len(grown) < MIN_LIFE_SAMPLES:
                    continue
                span = (grown[0][0], grown[-1][0])
                states = _serve_states(grown, busy) if role == "serve" else {"": grown}
                for state, samples in states.items():
                    if _life_windows(samples, 3, span) is not None:
                        parts.append((state, samples, span))
                        judged.add(pid)
            entry["judged"] = len(judged)
            if role == "serve":
                entry["states"] = sorted({state for state, _, _ in parts})
            for index, metric in ((3, "rss_mb"), (4, "fds"), (5, "threads")):
                slack = FLAT_COUNT_SLACK if metric != "rss_mb" else 0
                worst: tuple[float, float, float, str] | None = None  # moved, 2nd, last, state
                flats = []
                for state, samples, span in parts:
                    windows = _life_windows(samples, index, span)
                    assert windows is not None  # checked above
                    second, last = windows
                    flats.append(abs(last - second) <= max(FLAT_SHARE * second, slack))
                    moved = abs(last - second) / max(second, 1e-9)
                    if worst is None or moved > worst[0]:
                        worst = (moved, second, last, state)
                flat = all(flats) if flats else None
                if flat is not None:
                    flat_all.append(flat)
                scale = 2**20 if metric == "rss_mb" else 1
                entry[metric] = {"second": None if worst is None else round(worst[1] / scale, 1),
                                 "last": None if worst is None else round(worst[2] / scale, 1),
                                 "flat": flat}
                if worst is not None and worst[3]:
                    entry[metric]["state"] = worst[3]
            roles[role] = entry
        series: dict[str, list[list[float]]] = {}
        for t, role, pid, rss, fds, threads in self.samples:
            series.setdefault(role, []).append([round(t, 1), pid, round(rss / 2**20, 1), fds,
                                                threads])
        return {"resources": roles, "resources_flat": bool(flat_all) and all(flat_all),
                "resource_series": {"columns": ["t_s", "pid", "rss_mb", "fds", "threads"],
                                    **series},
                "runs_volume_use": [(t, round(u / 2**20, 1), round(f / 2**20, 1))
                                    for t, u, f in self.volume_samples],
                "resource_samples": len(self.samples),
                "sample_period_s": getattr(self, "sample_period", None)}


#: A sample this close to a run's start or end (s) is in neither state: rig serve takes its
#: run's size within a second of the start (runs of 3 s are common) and frees it at the end.
SERVE_EDGE_S = 1.0


def _serve_states(samples: list[tuple[Any, ...]], busy: list[tuple[float, float]]
                  ) -> dict[str, list[tuple[Any, ...]]]:
    """`rig serve`'s samples split into those taken between runs and those taken in one
    (`busy`: the serve track's runs, start and end in soak seconds, sorted)."""
    starts = [b[0] for b in busy]
    states: dict[str, list[tuple[Any, ...]]] = {"between runs": [], "in a run": []}
    for x in samples:
        t = x[0]
        i = bisect.bisect_right(starts, t + SERVE_EDGE_S) - 1  # the last run begun by t+edge
        near = [busy[j] for j in (i - 1, i) if 0 <= j < len(busy)]
        if any(s + SERVE_EDGE_S <= t <= e - SERVE_EDGE_S for s, e in near):
            states["in a run"].append(x)
        elif not any(s - SERVE_EDGE_S <= t <= e + SERVE_EDGE_S for s, e in near):
            states["between runs"].append(x)
    return states


def _life_windows(samples: list[tuple[Any, ...]], index: int, span: tuple[float, float]
                  ) -> tuple[float, float] | None:
    """The means of metric `index` over the second and last thirds (by time) of a process's
    life `span` (its second and last hours when it lived 3 h or more), of the `samples` taken
    in them (all of the process's, or those of one state); None when a window holds fewer than
    a third of `MIN_LIFE_SAMPLES`."""
    born, end = span
    if end - born >= 3 * 3600.0:
        edges = (born + 3600.0, born + 7200.0, end - 3600.0)
    else:
        edges = (born + (end - born) / 3, born + 2 * (end - born) / 3, born + 2 * (end - born) / 3)
    second = [x[index] for x in samples if edges[0] <= x[0] < edges[1]]
    last = [x[index] for x in samples if x[0] >= edges[2]]
    if min(len(second), len(last)) < MIN_LIFE_SAMPLES // 3:
        return None
    return statistics.fmean(second), statistics.fmean(last)


# -- runs --------------------------------------------------------------------------------------
@dataclass
class RunRecord:
    """One ASC run the soak started: where, when, what was done to it, how it ended."""

    track: str
    bench: str
    started_s: float
    folder: Path | None = None
    ended_s: float = 0.0
    code: int | None = None
    status: str = ""
    error: str = ""
    faults: list[str] = field(default_factory=list)
    explained_by: str = ""
    evaluated: bool = False
    #: What the rig said of the run where its folder cannot (a direct run's last error line,
    #: rig serve's error status).
    said: str = ""

    def summary(self) -> dict[str, Any]:
        return {"track": self.track, "bench": self.bench,
                "folder": self.folder.name if self.folder else None,
                "started_s": round(self.started_s, 1), "ended_s": round(self.ended_s, 1),
                "code": self.code, "status": self.status, "error": self.error[:300],
                "faults": self.faults, "explained_by": self.explained_by}


class AscTrack(threading.Thread):
    """ASC runs one after another on the soak's benches; a fault handed to it goes into its
    next run (on the bench the fault names)."""

    track = ""

    def __init__(self, soak: Soak) -> None:
        super().__init__(name=f"track-{self.track}", daemon=True)
        self.soak = soak
        self.pending: queue.Queue[Fault] = queue.Queue()
        self.stopping = threading.Event()
        self.aborted = threading.Event()
        self.turn = 0 if self.track == "serve" else 1
        #: Seconds between runs: none in a short soak, some in a long one (the disk).
        self.gap_s = 0.5 if soak.short else 5.0
        #: The bench whose DUT or monitor a fault just took away: the next run is its replug.
        self.replug: str | None = None

    def assign(self, fault: Fault) -> None:
        self.pending.put(fault)

    def abort(self) -> None:
        self.stopping.set()
        self.aborted.set()

    def run(self) -> None:
        shared = self.soak.run_faults
        while not self.stopping.is_set() or not (self.pending.empty() and shared.empty()):
            if self.aborted.is_set():
                return
            fault: Fault | None = None
            source = self.pending
            for source in (self.pending, shared):
                with contextlib.suppress(queue.Empty):
                    fault = source.get_nowait()
                    break
            if fault is not None and "bench" in fault.params:
                bench = fault.params["bench"]
            elif self.replug is not None:
                bench, self.replug = self.replug, None
            else:
                bench = BENCHES[self.turn % len(BENCHES)][0]
                self.turn += 1
            if fault is None and self.soak.now() + self.soak.run_length(bench) > \
                    self.soak.total_s:
                self.aborted.wait(0.5)  # no time left for a whole run: none is started
                continue
            record = RunRecord(self.track, bench, self.soak.now())
            try:
                self.one_run(record, fault)
            except Exception as exc:  # the soak's own trouble: said, and the track goes on
                self.soak.say(f"{self.track} track: {type(exc).__name__}: {exc}")
                time.sleep(1.0)
            if fault is not None and not fault.injected and not self.stopping.is_set():
                source.put(fault)  # the run ended before its moment came: the next one
            if fault is not None and fault.injected and fault.kind != "serve_kill":
                self.replug = bench
            self.finish(record)
            self.aborted.wait(self.gap_s)

    def one_run(self, record: RunRecord, fault: Fault | None) -> None:
        raise NotImplementedError

    def finish(self, record: RunRecord) -> None:
        """Read the run folder back (the rig's reader); explain a run that did not complete."""
        record.ended_s = record.ended_s or self.soak.now()
        if record.folder is None:
            with self.soak.lock:
                self.soak.runs.append(record)
            return
        if not record.folder.is_dir():
            # Seen, then gone: the rig removes the folder of a run that could not start (not
            # one line of it reached the disk) and says so; what it said is the run's error.
            record.status = "removed"
            record.error = record.said or "the folder was removed (nothing said)"
            notes = ""
        else:
            record.status, record.error, notes = self.read_back(record.folder)
            deadline = time.monotonic() + LINE_SETTLES_S
            while (record.status == "incomplete" and _finished(record.folder)
                   and time.monotonic() < deadline):
                # Its run_finished line was being written as we read (a 1 h soak at 5ff61ff
                # read a serve run's torn last line: "incomplete", run_finished in the file
                # moments later): read it again once the line is whole.
                time.sleep(0.2)
                record.status, record.error, notes = self.read_back(record.folder)
            if record.status != "complete" and not record.error:
                record.error = record.said  # the folder could not say (e.g. rig serve died)
        if record.status != "complete":
            record.explained_by = explain(self.soak, record, notes)
        record.evaluated = True
        with self.soak.lock:
            self.soak.runs.append(record)
        if record.status == "complete":
            self.soak.analyze_queue.put(record.folder)
        mark = "" if record.status == "complete" else (
            f" ({record.explained_by or 'UNEXPLAINED'}: {record.error[:160]})")
        self.soak.say(f"{self.track} run {record.bench}: {record.status}{mark}")

    @staticmethod
    def read_back(folder: Path) -> tuple[str, str, str]:
        """(status, error, warning notes) of a run folder, read by the rig's reader."""
        from rig.run.events import Note
        from rig.run.store import load_run

        try:
            run = load_run(folder)
            status = run.status
            error = str(run.manifest.get("error")
                        or (run.finished.error if run.finished else "") or "")
            notes = " | ".join(e.text for e in run.events
                               if isinstance(e, Note) and e.level == "warning")
        except Exception as exc:
            return "unreadable", f"{type(exc).__name__}: {exc}", ""
        return status, error, notes

    # -- watching a run ----------------------------------------------------------------------
    def new_folder(self, device: str, before: set[str]) -> Path | None:
        found = sorted(p for p in self.soak.runs_dir.glob(f"*_asc_{device}")
                       if p.name not in before)
        return found[-1] if found else None

    def folders(self, device: str) -> set[str]:
        return {p.name for p in self.soak.runs_dir.glob(f"*_asc_{device}")}

    def reached(self, folder: Path, fault: Fault) -> bool:
        """Whether the run reached the moment `fault` is injected at."""
        try:
            text = (folder / "events.jsonl").read_text(errors="replace")
        except OSError:
            return False
        return text.count('"event": "latency_run"') >= int(fault.params.get("after_runs", 1))

    def inject(self, fault: Fault, parent: int) -> bool:
        """Unplug or stop what `fault` names in the virtual bench under process `parent`."""
        import psutil

        try:
            children = psutil.Process(parent).children(recursive=True)
        except psutil.Error:
            return False
        benches = [p for p in children if _is_virtual_bench(p)]
        if not benches:
            return False
        vb = benches[0]
        if fault.kind == "dut_stop":
            shims = [p for p in vb.children() if "dut-host" in p.name()]
            if not shims:
                return False
            pid = shims[0].pid
            os.kill(pid, signal.SIGSTOP)
            self.soak.stopped_pids.add(pid)
            self.soak.mark(fault, f"{fault.params['bench']} DUT firmware (pid {pid})")
            return True
        os.kill(vb.pid, signal.SIGUSR2 if fault.kind == "dut_unplug" else signal.SIGUSR1)
        self.soak.mark(fault, f"{fault.params['bench']} virtual bench (pid {vb.pid})")
        return True

    def cont(self, fault: Fault, record: RunRecord) -> None:
        """SIGCONT the stopped DUT (the run gave up on it: past its reply deadline). A run that
        completed all the same needed its DUT no more: the stop did not bite, and is injected
        again into a later run."""
        for pid in list(self.soak.stopped_pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            self.soak.stopped_pids.discard(pid)
        fault.cleared_s = self.soak.now()
        if record.folder is not None and _sweep_status(record.folder) == "complete":
            self.soak.say(f"dut_stop on {fault.params['bench']}: its run completed all the same "
                          "(the DUT was needed no more); stopped again in a later run")
            fault.injected_s = fault.injected_wall = fault.cleared_s = None
            record.faults.remove(fault.kind)


class DirectTrack(AscTrack):
    """`rig measure asc --bench FILE` in a process of its own, run after run."""

    track = "direct"

    def one_run(self, record: RunRecord, fault: Fault | None) -> None:
        soak = self.soak
        device = f"direct-{record.bench}"
        before = self.folders(device)
        log = soak.logs / "direct-runs.log"
        with open(log, "ab") as out:
            out.write(f"\n== {soak.now():.1f} s {device}\n".encode())
            offset = out.tell()
        popen = soak.spawn(soak.rig("measure", "asc", "--bench",
                                    str(soak.direct_benches / f"{device}.toml"),
                                    "--runs-dir", str(soak.runs_dir)), log)
        self.current = popen
        deadline = time.monotonic() + 300.0
        try:
            while popen.poll() is None and time.monotonic() < deadline:
                if self.aborted.is_set():
                    break
                if record.folder is None:
                    record.folder = self.new_folder(device, before)
                if (fault is not None and not fault.injected and record.folder is not None
                        and self.reached(record.folder, fault) and self.inject(fault, popen.pid)):
                    record.faults.append(fault.kind)
                time.sleep(0.05)
        finally:
            if popen.poll() is None:  # past its bound, or the soak is ending
                stop_pid(popen, grace_s=30.0)
            if fault is not None and fault.kind == "dut_stop" and fault.injected:
                self.cont(fault, record)
        record.code = popen.returncode
        record.ended_s = soak.now()
        record.folder = record.folder or self.new_folder(device, before)
        with open(log, "rb") as f:  # its own lines: the runs of this track go one at a time
            f.seek(offset)
            lines = f.read().decode(errors="replace").splitlines()
        record.said = next((line for line in reversed(lines) if "error" in line.lower()), "")


class ServeTrack(AscTrack):
    """`start` commands to rig serve over MQTT, one run at a time; rig serve SIGKILLed during
    a run when a serve_kill is handed to it."""

    track = "serve"

    def one_run(self, record: RunRecord, fault: Fault | None) -> None:
        soak = self.soak
        device = f"soak-{record.bench}"
        before = self.folders(device)
        sent = time.perf_counter()
        reply = soak.ask({"action": "start", "procedure": "asc", "bench": device}, timeout=5.0)
        if reply is None or not reply.get("ok"):
            why = "no reply" if reply is None else reply.get("reason", "refused")
            if reply is not None and "a run is going" in str(why):
                self.wait_idle(60.0)
            record.error = f"start: {why}"
            time.sleep(0.5)
            return
        with soak.lock:
            serve = soak.children["serve"].popen
        started = asked = time.monotonic()
        died = ""
        while time.monotonic() < started + 300.0 and not self.aborted.is_set():
            if record.folder is None:
                record.folder = self.new_folder(device, before)
                if record.folder is None and (self.refused_since(sent)
                                              or time.monotonic() > started + 30.0):
                    break  # an accepted start that failed before a folder (a full disk)
            if record.folder is not None and _finished(record.folder):
                break
            if record.folder is not None and time.monotonic() - asked > 2.0:  # a run that
                asked = time.monotonic()  # could not write its end (a full disk) is over
                # when rig serve says so
                reply = soak.ask({"action": "status"}, 2.0)
                state = (reply or {}).get("status", {}).get("state")
                if state is not None and state != "running":
                    break
            with soak.lock:
                now_serving = soak.children["serve"].popen
            if now_serving is not serve or (serve is not None and serve.poll() is not None):
                # rig serve died with the run: it stays incomplete. Not by our kill: say how
                # (a short soak's serve died in pyjls's C code on a full disk, no traceback).
                code = serve.poll() if serve is not None else None
                if code is not None and "serve_kill" not in record.faults:
                    how = (signal.Signals(-code).name if code < 0 and -code in
                           signal.valid_signals() else f"exit status {code}")
                    died = f"rig serve died during the run ({how}; see its log)"
                break
            if (fault is not None and not fault.injected and record.folder is not None
                    and self.reached(record.folder, fault)):
                if fault.kind == "serve_kill":
                    record.faults.append(fault.kind)
                    soak.kill_serve(fault)
                    break
                if serve is not None and self.inject(fault, serve.pid):
                    record.faults.append(fault.kind)
            time.sleep(0.05)
        if fault is not None and fault.kind == "dut_stop" and fault.injected:
            self.cont(fault, record)
        record.ended_s = soak.now()
        record.said = self.error_since(sent) or died

    def refused_since(self, sent: float) -> bool:
        """Whether rig serve said `error` (a run that failed) since `sent` (perf_counter)."""
        return self.error_since(sent) is not None

    def error_since(self, sent: float) -> str | None:
        """What rig serve's last `error` status since `sent` (perf_counter) said; None: none."""
        said = None
        for m in self.soak.operator.received(f"neurobench/{RIG}/status"):
            with contextlib.suppress(ValueError, AttributeError):
                status = m.json()
                if m.at > sent and status.get("state") == "error":
                    said = str(status.get("error") or "error")
        return said

    def wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.aborted.is_set():
            reply = self.soak.ask({"action": "status"}, 3.0)
            if reply and reply.get("status", {}).get("state") != "running":
                return
            time.sleep(0.5)


# -- the sweep ---------------------------------------------------------------------------------
class SweepRunner(threading.Thread):
    """Sweeps on the cluster, back to back (one batch of seeds each); a sweep that stops (its
    scheduler lost, its disk full) is resumed until it is complete."""

    def __init__(self, soak: Soak) -> None:
        super().__init__(name="sweeps", daemon=True)
        self.soak = soak
        self.finishing = threading.Event()
        self.aborted = threading.Event()
        self.proc: subprocess.Popen | None = None
        self.folder: Path | None = None
        self.session_points = 0
        #: Seeds a batch: a short soak's take ~15 s, so that one is under way most of the time.
        self.seeds = 1 if soak.short else 20
        #: How long each complete batch took (start to complete, resumes included).
        self.took: list[float] = []
        self.batch_started = 0.0

    def abort(self) -> None:
        self.finishing.set()
        self.aborted.set()
        proc = self.proc
        if proc is not None and proc.poll() is None:
            stop_pid(proc)

    def busy(self) -> bool:
        """A session is under way and has recorded a point."""
        proc, folder = self.proc, self.folder
        return (proc is not None and proc.poll() is None and folder is not None
                and _count_points(folder) > self.session_points)

    def run(self) -> None:
        soak = self.soak
        batch, complete, failures = 0, True, 0
        while not self.aborted.is_set():
            if complete:
                if self.finishing.is_set():
                    return
                if batch and soak.now() + statistics.fmean(self.took) > soak.total_s:
                    self.aborted.wait(0.5)  # no time left for a whole batch: none is started
                    continue
                name = f"soak-b{batch}"
                self.batch_started = soak.now()
                (soak.sweeps_dir / f"{name}.toml").write_text(
                    sweep_file(batch, self.seeds, soak.lava))
                argv = soak.rig("sweep", "qubo", str(soak.sweeps_dir / f"{name}.toml"),
                                "--cluster", soak.address, "--runs-dir", str(soak.runs_dir),
                                "--json", "--mqtt", soak.broker.url(SWEEP_RIG),
                                "--mqtt-password-file", str(soak.passwords / SWEEP_RIG))
                self.folder = None
            else:
                assert self.folder is not None
                argv = soak.rig("sweep", "resume", str(self.folder), "--cluster", soak.address,
                                "--json", "--mqtt", soak.broker.url(SWEEP_RIG),
                                "--mqtt-password-file", str(soak.passwords / SWEEP_RIG))
            self.session_points = _count_points(self.folder) if self.folder else 0
            soak.sweep_sessions += 1
            self.proc = soak.spawn(argv, soak.logs / "sweeps.log")
            while self.proc.poll() is None and not self.aborted.is_set():
                if self.folder is None:
                    found = sorted(soak.runs_dir.glob(f"*_sweep_soak-b{batch}"))
                    if found:
                        self.folder = found[-1]
                        with soak.lock:
                            soak.sweeps.append(self.folder)
                time.sleep(0.1)
            if self.aborted.is_set():
                return
            code = self.proc.returncode
            if self.folder is None:
                found = sorted(soak.runs_dir.glob(f"*_sweep_soak-b{batch}"))
                if found:
                    self.folder = found[-1]
                    with soak.lock:
                        soak.sweeps.append(self.folder)
            status = _sweep_status(self.folder)
            complete = status == "complete"
            if complete:
                failures = 0
                batch += 1
                self.took.append(soak.now() - self.batch_started)
                continue
            said = _tail(soak.logs / "sweeps.log", 1)
            soak.sweep_failures.append(f"{soak.now():.1f} s: exit {code}, {status}: {said}")
            soak.say(f"sweep stopped (exit {code}, {status}): {said[:160]}")
            if self.folder is not None and not self.folder.exists():
                with soak.lock:  # none of it reached the disk: the rig removed its folder
                    soak.sweeps.remove(self.folder)
                self.folder = None
            if self.folder is None:
                complete = True  # refused before a folder existed (a full disk): start anew
            failures += 1
            if failures > 200:
                soak.say("the sweep could not be resumed 200 times: given up")
                return
            # Wait for what stopped it to pass (the scheduler back, the disk freed).
            self.aborted.wait(1.0)
            while soak.disk_full.is_set() and not self.aborted.is_set():
                time.sleep(0.2)


# -- the dashboard client ----------------------------------------------------------------------
class DashboardPoller(threading.Thread):
    """A page on the dashboard: /api/state every second and /api/stream held open (reopened
    whenever it closes)."""

    def __init__(self, port: int, now: Callable[[], float]) -> None:
        super().__init__(name="dashboard-poller", daemon=True)
        self.port, self.now = port, now
        self.stop = threading.Event()
        self.ok_at: list[float] = []
        self.failed_at: list[float] = []
        self.stream_opens = 0
        self.stream_bytes = 0
        self._stream = threading.Thread(target=self.hold_stream, name="dashboard-stream",
                                        daemon=True)

    def run(self) -> None:
        self._stream.start()
        while not self.stop.is_set():
            ok = False
            with contextlib.suppress(OSError, http.client.HTTPException, ValueError):
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3.0)
                try:
                    conn.request("GET", "/api/state")
                    response = conn.getresponse()
                    body = response.read()
                    ok = response.status == 200 and isinstance(json.loads(body), dict)
                finally:
                    conn.close()
            (self.ok_at if ok else self.failed_at).append(self.now())
            self.stop.wait(1.0)

    def hold_stream(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(OSError, http.client.HTTPException):
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30.0)
                try:
                    conn.request("GET", "/api/stream")
                    response = conn.getresponse()
                    if response.status == 200:
                        self.stream_opens += 1
                        while not self.stop.is_set():
                            chunk = response.read1(65536)
                            if not chunk:
                                break
                            self.stream_bytes += len(chunk)
                finally:
                    conn.close()
            self.stop.wait(0.5)

    def ok_after(self, t: float, timeout: float) -> float | None:
        """When the state was first read again after `t` (seconds of the soak)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            later = [x for x in self.ok_at if x > t + 0.05]
            if later:
                return later[0]
            time.sleep(0.2)
        return None


# -- helpers -----------------------------------------------------------------------------------
def stop_pid(popen: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM by pid, SIGKILL after the grace."""
    if popen.poll() is not None:
        return
    _kill(popen, signal.SIGTERM, wait=False)
    try:
        popen.wait(grace_s)
    except subprocess.TimeoutExpired:
        _kill(popen, signal.SIGKILL)


def _kill(popen: subprocess.Popen, sig: int, wait: bool = True) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(popen.pid, sig)
    if wait:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(10.0)


def _marked(marker: str, psutil: Any) -> list[Any]:
    """Live processes carrying the soak's marker (ours, and what they started)."""
    found = []
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if p.environ().get(MARKER_ENV) == marker and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
    return found


def clear_killed_soaks(temp: Path) -> list[str]:
    """What soaks killed outright left under `temp` (a SIGKILL lets no cleanup run): for each
    `rig-soak-*` folder whose owner (`OWNER_FILE`) is no running soak, its processes (those
    carrying its marker) killed, its runs volume unmounted and the folder removed. What was
    cleared, one line each; a live soak's folder is left alone."""
    import psutil

    said = []
    mounts = _volume_mounts()
    for folder in sorted(temp.glob("rig-soak-*")):
        owner = folder / OWNER_FILE
        try:
            record = json.loads(owner.read_text())
            pid, marker = int(record["pid"]), str(record["marker"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a soak's folder, or one still being made
        if _soak_alive(pid, psutil):
            continue
        killed = 0
        for p in _marked(marker, psutil):
            with contextlib.suppress(psutil.Error, OSError):
                p.kill()
                killed += 1
        unmounted = [m for m in mounts if m.parent == folder]
        for m in unmounted:
            subprocess.run(["umount", "-l", str(m)], capture_output=True, timeout=30,
                           check=False)
        shutil.rmtree(folder, ignore_errors=True)
        said.append(f"cleared what a killed soak (pid {pid}) left: {killed} processes, "
                    f"{len(unmounted)} mounted runs volume(s), {folder}")
    return said


def _volume_mounts() -> list[Path]:
    """Where a soak's runs volume is mounted (a tmpfs named `VOLUME_SOURCE`)."""
    with contextlib.suppress(OSError):
        lines = Path("/proc/self/mounts").read_text().splitlines()
        # Spaces in a mount point are octal escapes in /proc/mounts.
        return [Path(f[1].replace("\\040", " ")) for f in (x.split() for x in lines)
                if len(f) > 2 and f[0] == VOLUME_SOURCE]
    return []


def _soak_alive(pid: int, psutil: Any) -> bool:
    """Whether `pid` is a running soak (not a pid reused by something else)."""
    with contextlib.suppress(psutil.Error, OSError):
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and any(
            "soak.py" in part for part in p.cmdline())
    return False


def _is_virtual_bench(p: Any) -> bool:
    with contextlib.suppress(Exception):
        return "virtual_bench" in p.cmdline()
    return False


#: How long a run folder whose events.jsonl names run_finished is read again while the rig's
#: reader finds no whole run_finished line in it (the line being written as it was read).
LINE_SETTLES_S = 10.0


def _finished(folder: Path) -> bool:
    with contextlib.suppress(OSError):
        return '"event": "run_finished"' in (folder / "events.jsonl").read_text(errors="replace")
    return False


def _count_points(folder: Path | None) -> int:
    if folder is None:
        return 0
    with contextlib.suppress(OSError):
        return (folder / "events.jsonl").read_text(errors="replace").count(
            '"event": "sweep_point"')
    return 0


def _point_times(folder: Path) -> list[float]:
    out = []
    with contextlib.suppress(OSError):
        for line in (folder / "events.jsonl").read_text(errors="replace").splitlines():
            if '"event": "sweep_point"' in line:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    out.append(float(json.loads(line)["at"]))
    return out


def _sweep_status(folder: Path | None) -> str:
    """A run folder's status as the rig reads it (a sweep's: every point on disk for
    `complete`)."""
    if folder is None:
        return "no folder"
    from rig.qubo.sweep import is_sweep, read_sweep
    from rig.run.store import load_run

    try:
        run = load_run(folder)
        if is_sweep(run.manifest):
            return read_sweep(folder, check_running=False).status
        return run.status
    except Exception as exc:
        return f"unreadable ({type(exc).__name__}: {exc})"


def _tail(path: Path, lines: int = 15) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http_ok(port: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, http.client.HTTPException):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2.0)
            try:
                conn.request("GET", "/api/state")
                if conn.getresponse().status == 200:
                    return True
            finally:
                conn.close()
        time.sleep(0.2)
    return False


def _tmp_rig_entries() -> list[str]:
    base = Path("/tmp")
    with contextlib.suppress(OSError):
        return sorted(p.name for p in base.iterdir() if p.name.startswith("rig-"))
    return []


def _count(items: Iterator[str] | Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


# -- explaining runs ---------------------------------------------------------------------------
def explain(soak: Soak, record: RunRecord, notes: str) -> str:
    """The injected fault a run that did not complete ended with, as its folder names it; ""
    when none fits (unexplained)."""
    if record.status == "incomplete" and "serve_kill" in record.faults:
        return "serve_kill"  # a process killed outright writes nothing: `incomplete` says so
    text = f"{record.error} | {notes}"
    lo, hi = record.started_s - 1.0, record.ended_s + 1.0
    for f in soak.faults:
        if not f.injected or f.kind not in EXPLAINS:
            continue
        end = f.cleared_s if f.cleared_s is not None else math.inf  # still going
        overlaps = f.injected_s <= hi and end >= lo  # type: ignore[operator]
        own = f.kind in record.faults or RUN_FAULTS.get(f.kind) is None
        if overlaps and own and EXPLAINS[f.kind].search(text):
            return f.kind
    if record.status == "interrupted" and soak.load_over.is_set():
        return "soak_end"  # a run past the end's grace, stopped (SIGTERM) by the soak
    return ""


# -- output ------------------------------------------------------------------------------------
def table(audit: dict[str, Any]) -> str:
    """The audit as a plain-text table (it goes into the README as it is)."""
    rows: list[tuple[str, str]] = []
    rows.append(("soak", f"{audit['hours']:g} h, seed {audit['seed']}, wall "
                         f"{audit.get('wall_s', 0):.0f} s, Loihi 2 stand-in "
                         f"{'on' if audit['lava'] else 'off'}, runs volume: "
                         f"{audit['runs_volume']}"))
    rows.append(("sweep points", f"{audit['points_total']} in {len(audit['sweeps'])} sweeps "
                                 f"({audit['sweep_sessions']} sessions): lost "
                                 f"{audit['points_lost']}, doubled {audit['points_doubled']}, "
                                 f"failed {audit['points_failed']}"))
    rows.append(("ASC runs", f"{audit['runs_total']}: complete {audit['runs_complete']}, "
                             f"ended by an injected fault {audit['runs_failed_explained']}, "
                             f"unexplained {audit['runs_failed_unexplained']}"))
    rows.append(("rig analyze", f"{audit['runs_analyzed'] - audit['runs_analyze_failed']} of "
                                f"{audit['runs_analyzed']} complete runs reproduce"))
    v = audit["verify"]
    rows.append(("rig verify", f"{v['status']}: {v['detail']}"))
    rows.append(("leftovers", f"processes {audit['leftover_processes']}, temp files "
                              f"{audit['leftover_temp_files']}"))
    unjudged = [r for r, e in audit["resources"].items() if not e["judged"]]
    rows.append(("resources flat", f"{'yes' if audit['resources_flat'] else 'no'} "
                                   f"({audit['resource_samples']} samples, every "
                                   f"{audit['sample_period_s'] or 0:g} s"
                                   + (f"; too short-lived to judge: {', '.join(unjudged)}"
                                      if unjudged else "") + ")"))
    width = max(len(k) for k, _ in rows)
    out = [f"{k:<{width}}  {v}" for k, v in rows]
    out.append("")
    out.append(f"{'fault':<18} {'count':>5} {'recovered':>9} {'mean s':>8} {'max s':>8}")
    for kind, r in audit["recovery"].items():
        mean = "-" if r["mean_s"] is None else f"{r['mean_s']:.1f}"
        top = "-" if r["max_s"] is None else f"{r['max_s']:.1f}"
        out.append(f"{kind:<18} {r['count']:>5} {r['recovered']:>9} {mean:>8} {top:>8}")
    out.append("")
    out.append(f"{'process':<12} {'RSS MB 2nd/last':>18} {'fds 2nd/last':>15} "
               f"{'threads 2nd/last':>18} {'starts':>6} {'judged':>6} flat")
    for role, e in audit["resources"].items():
        def pair(m: dict[str, Any]) -> str:
            return f"{m['second'] if m['second'] is not None else '-'}/" \
                   f"{m['last'] if m['last'] is not None else '-'}"
        flats = [e[m]["flat"] for m in ("rss_mb", "fds", "threads")]
        flat = "n/a" if any(f is None for f in flats) else ("yes" if all(flats) else "NO")
        out.append(f"{role:<12} {pair(e['rss_mb']):>18} {pair(e['fds']):>15} "
                   f"{pair(e['threads']):>18} {e['incarnations']:>6} {e['judged']:>6} {flat}")
    for role, e in audit["resources"].items():
        if e.get("states"):
            shown = {e[m].get("state") for m in ("rss_mb", "fds", "threads")} - {None}
            out.append(f"{role}: judged {' and '.join(e['states'])} apart; shown: "
                       f"{', '.join(sorted(shown)) or '-'} (the part that moved most)")
    return "\n".join(out)


def passed(audit: dict[str, Any]) -> bool:
    if audit.get("audit_errors") or any(s.get("status") == "unreadable"
                                        for s in audit.get("sweeps", [])):
        return False
    return (audit["points_lost"] == 0 and audit["points_doubled"] == 0
            and audit["runs_failed_unexplained"] == 0 and audit["leftover_processes"] == 0
            and audit["leftover_temp_files"] == 0)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops the soak as Ctrl-C does: everything it started is stopped by pid."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


#: The largest trace an unexplained run's kept folder holds (a short soak's are ~20 MB).
KEEP_TRACE_MB = 64


def _too_big_to_keep(folder: str, names: list[str]) -> set[str]:
    """`shutil.copytree`'s ignore: the run's reserve, and traces over `KEEP_TRACE_MB`."""
    skip = {n for n in names if n == ".reserve"}
    for n in names:
        with contextlib.suppress(OSError):
            size = os.path.getsize(os.path.join(folder, n))
            if n.endswith(".jls") and size > KEEP_TRACE_MB << 20:
                skip.add(n)
    return skip


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        lock = take_lock()
        try:
            check_tools()
        except BadInput:
            lock.close()
            raise
    except BadInput as exc:
        print(f"soak: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    soak: Soak | None = None
    audit: dict[str, Any] = {}
    interrupted = False
    # Ctrl-C (or kill -INT) stops the soak even where it was started with SIGINT ignored (a
    # background job of a shell without job control).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with lock, sigterm_as_interrupt():
        try:
            soak = Soak(args)
            soak.run()
            audit = soak.audit()
        except KeyboardInterrupt:
            interrupted = True
        except Exception as exc:  # the soak's own failure: said, everything still stopped
            print(f"soak: error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            audit = {}
        finally:
            if soak is not None:
                for signum in (signal.SIGINT, signal.SIGTERM):  # the stop is not cut short
                    signal.signal(signum, signal.SIG_IGN)
                try:
                    leftovers = soak.cleanup()
                finally:
                    signal.signal(signal.SIGINT, signal.default_int_handler)
                audit.update(leftovers)
                audit["wall_s"] = round(time.monotonic() - soak.t0, 1)
    if interrupted:
        print(f"soak: interrupted; every process stopped (leftovers: "
              f"{audit.get('leftover_processes')})", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.json is not None and audit:
        args.json.write_text(json.dumps(audit, indent=2, default=str) + "\n")
    try:
        print(table(audit), flush=True)
        return 0 if passed(audit) else EXIT_AUDIT_FAILED
    except (KeyError, TypeError):  # a part of the audit failed (said above), or the soak did
        print(f"soak: the audit is incomplete: {audit.get('audit_errors') or 'no audit'}",
              file=sys.stderr)
        return EXIT_AUDIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
