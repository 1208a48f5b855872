"""`rig serve --mqtt URL`: the long-running rig process that reports to the broker and takes
`start`, `stop` and `status` commands on `neurobench/<rig>/cmd` (see `rig.mqtt.commands`)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from rig.bench.config import benches_dir, load_bench, sweeps_dir
from rig.commands.mqtt import add_mqtt_arguments, mqtt_settings
from rig.errors import ConfigError, RunInterrupted
from rig.mqtt.session import new_telemetry
from rig.mqtt.topics import cmd
from rig.run.measure import sigterm_as_interrupt
from rig.run.stopping import StopRequest

if TYPE_CHECKING:
    from rig.mqtt.commands import Command

#: How long Ctrl-C waits for a run to stop cleanly (DUT off, folder marked) [s].
STOP_WAIT_S = 120.0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="report to an MQTT broker and take start/stop commands")
    add_mqtt_arguments(p, required=True)
    p.add_argument("--benches-dir", type=Path, default=None,
                   help="the only folder `start` may take bench files from (default: the first "
                   "of ./benches, the lab folder's, the installed package's)")
    p.add_argument("--sweeps-dir", type=Path, default=None,
                   help="the only folder `start` may take sweep files from (default: the first "
                   "of ./sweeps, the lab folder's, the installed package's)")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"),
                   help="where run folders go (default: ./runs)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # As `--device NAME` finds benches: a lab folder or an installed rig serves its own.
    args.benches_dir = args.benches_dir or benches_dir()
    args.sweeps_dir = args.sweeps_dir or sweeps_dir()
    for flag, folder in (("--benches-dir", args.benches_dir), ("--sweeps-dir", args.sweeps_dir)):
        if not folder.is_dir():
            raise ConfigError(f"{flag} {folder}: not a folder",
                              hint="the rig only starts files from folders that exist")
    try:  # jsonschema checks every command (the mqtt extra)
        from rig.mqtt.commands import CommandDesk
    except ImportError as exc:
        raise ConfigError(f"rig serve needs the mqtt extra ({exc})",
                          hint="pip install 'neurobench-rig[mqtt]'") from None
    settings = mqtt_settings(args)
    assert settings is not None  # --mqtt is required (argparse), so there are settings
    out = Console(stderr=True)
    telemetry: Any = None

    def prepare(command: Command, path: Path) -> None:
        if command.procedure == "asc":
            load_bench(path)
        else:
            from rig.qubo.sweep import load_sweep

            load_sweep(path)

    def measure(command: Command, path: Path, stop: StopRequest) -> None:
        out.print(f"start {command.procedure} {path.name} (request {command.request_id})")
        try:
            status = _measure(command, path, stop, telemetry, args.runs_dir)
        except RunInterrupted as exc:
            status = f"interrupted: {exc}"
        out.print(f"{command.procedure} {path.name}: {status}")

    def failed(text: str) -> None:
        out.print(f"[red]run failed:[/] {text}")
        telemetry.set_status(state="error", error=text)

    desk = CommandDesk(benches=args.benches_dir, sweeps=args.sweeps_dir, prepare=prepare,
                       run=measure, status=lambda: telemetry.status, on_error=failed)
    telemetry = new_telemetry(settings, on_command=desk.handle)
    telemetry.start()
    out.print(f"serving rig [bold]{settings.rig}[/] on {settings.broker}: commands on "
              f"{cmd(settings.rig)}; Ctrl-C to stop")
    try:
        with sigterm_as_interrupt():  # `kill` stops like Ctrl-C: the run ends cleanly first
            while True:
                time.sleep(0.2)
    except KeyboardInterrupt:
        if desk.running:
            out.print("stopping the run (DUT off, folder marked interrupted) ...")
            if not desk.stop_and_wait(STOP_WAIT_S):
                out.print("[red]the run did not stop in time[/]")
    finally:
        telemetry.close()
    return 0


def _measure(command: Command, path: Path, stop: StopRequest, telemetry: Any,
             runs_root: Path) -> str:
    """Run one accepted command; the run's status."""
    if command.procedure == "asc":
        from rig.run.measure import measure_asc
        bench = load_bench(path)
        outcome = measure_asc(bench, device=path.stem, runs_root=runs_root,
                              subscribers=[telemetry], scope=command.scope, stop=stop,
                              live=[telemetry.power])
        return f"{outcome.status} ({outcome.run_path})"
    from rig.qubo.sweep import load_sweep, start_sweep

    swept = start_sweep(load_sweep(path), runs_root=runs_root, subscribers=[telemetry], stop=stop)
    return f"{swept.status} ({swept.run_path})"
