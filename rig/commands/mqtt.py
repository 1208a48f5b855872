"""`rig mqtt watch`: the lab's rigs as their broker sees them; and the `--mqtt` options that
`rig measure`, `rig sweep` and `rig serve` share."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from rig.bench.broker import PASSWORD_ENV, MqttSettings, check_rig_name, resolve
from rig.errors import ConfigError
from rig.mqtt.board import Board
from rig.mqtt.connection import client
from rig.mqtt.session import started

if TYPE_CHECKING:
    from rich.live import Live

#: `rig mqtt watch` takes its broker from here when --mqtt is not given.
URL_ENV = "RIG_MQTT_URL"
COLUMNS = ("rig", "state", "procedure", "phase", "progress", "run", "power", "last", "error")
STATE_STYLE = {"idle": "green", "running": "cyan", "error": "red", "offline": "dim"}


def add_mqtt_arguments(p: argparse.ArgumentParser, *, required: bool = False) -> None:
    """The broker options: --mqtt URL and how to log in."""
    g = p.add_argument_group("MQTT telemetry")
    g.add_argument("--mqtt", metavar="URL", required=required,
                   help="report to this broker: mqtt://user@host:port (mqtts:// for TLS); "
                   "overrides the bench's [mqtt] url")
    g.add_argument("--mqtt-password-file", type=Path, metavar="FILE",
                   help=f"the broker password, on the file's first line (else ${PASSWORD_ENV})")
    g.add_argument("--mqtt-ca", type=Path, metavar="FILE",
                   help="the CA certificate (PEM) that signed the broker's; turns TLS on")
    g.add_argument("--mqtt-rig", metavar="NAME",
                   help="this rig's name on the broker (default: the broker user name)")
    g.add_argument("--mqtt-power-rate", type=float, metavar="HZ",
                   help="power summaries per second while recording, up to 10 (default 2)")


def mqtt_settings(args: argparse.Namespace, table: Any = None) -> MqttSettings | None:
    """The broker settings of the command line over a bench's [mqtt] table; None if neither."""
    return resolve(table, url=getattr(args, "mqtt", None), rig=getattr(args, "mqtt_rig", None),
                   password_file=getattr(args, "mqtt_password_file", None),
                   ca_file=getattr(args, "mqtt_ca", None),
                   power_rate_hz=getattr(args, "mqtt_power_rate", None))


@contextlib.contextmanager
def telemetry_for(args: argparse.Namespace, table: Any = None) -> Iterator[Any]:
    """A started `MqttTelemetry` for a measurement (None without --mqtt or [mqtt])."""
    with started(mqtt_settings(args, table)) as telemetry:
        yield telemetry


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mqtt", help="the lab's rigs as the MQTT broker sees them")
    actions = p.add_subparsers(dest="mqtt_action", metavar="ACTION", required=True)
    w = actions.add_parser("watch", help="status and run progress of one or all rigs")
    w.add_argument("--rig", metavar="NAME", help="only this rig (default: every rig)")
    w.add_argument("--mqtt", metavar="URL", default=None,
                   help=f"the broker, mqtt://user@host:port (default: ${URL_ENV})")
    w.add_argument("--mqtt-password-file", type=Path, metavar="FILE",
                   help=f"the password, on the file's first line (else ${PASSWORD_ENV})")
    w.add_argument("--mqtt-ca", type=Path, metavar="FILE", help="CA certificate for TLS")
    w.add_argument("--for", dest="duration", type=float, metavar="SECONDS", default=None,
                   help="stop after this long (default: until Ctrl-C)")
    w.add_argument("--json", action="store_true",
                   help="print every message as one JSON line instead of the table")
    w.set_defaults(run=run_watch)


def run_watch(args: argparse.Namespace) -> int:
    url = args.mqtt or os.environ.get(URL_ENV)
    if not url:
        raise ConfigError("no broker given", hint=f"pass --mqtt mqtt://user@host:port or set "
                          f"{URL_ENV}")
    if args.rig:
        check_rig_name(args.rig)
    if args.duration is not None and args.duration <= 0:
        raise ConfigError(f"--for {args.duration:g}: expected seconds > 0")
    settings = resolve(None, url=url, rig="watch", password_file=args.mqtt_password_file,
                       ca_file=args.mqtt_ca)
    assert settings is not None  # a url is given, so resolve() gives settings
    board = Board(args.rig)
    # Imported here, as `rig measure` and `rig sweep` import this module for their --mqtt
    # options: asyncio alone costs them ~30 ms at every start.
    import asyncio

    from rich.live import Live

    try:
        import aiomqtt
    except ImportError as exc:
        raise ConfigError(f"MQTT needs aiomqtt ({exc})",
                          hint="pip install 'neurobench-rig[mqtt]'") from None
    console = Console()
    live = None if args.json else Live(render(board), console=console, auto_refresh=False)
    try:
        if live:
            live.start()
        asyncio.run(_watch(settings, board, args, live))
    except KeyboardInterrupt:  # Ctrl-C is how a watch normally ends
        pass
    except aiomqtt.MqttCodeError as exc:
        raise ConfigError(f"the broker {settings.broker} refused the watcher: {exc}",
                          hint=f"check the user and the password ({PASSWORD_ENV})") from None
    except (aiomqtt.MqttError, OSError) as exc:
        raise ConfigError(f"cannot reach the broker {settings.broker}: {exc}",
                          hint="is it running, and is the port right?") from None
    finally:
        if live:
            live.update(render(board), refresh=True)
            live.stop()
    return 0


async def _watch(settings: MqttSettings, board: Board,
                 args: argparse.Namespace, live: Live | None) -> None:
    import asyncio

    async with client(settings, f"watch-{os.getpid()}", timeout=5) as mqtt:
        for topic in board.subscriptions():
            await mqtt.subscribe(topic, qos=1)
        end = None if args.duration is None else time.monotonic() + args.duration

        async def read() -> None:
            async for message in mqtt.messages:
                payload = message.payload if isinstance(message.payload, bytes) else b""
                row = board.take(str(message.topic), payload)
                if row is None:
                    continue
                if args.json:
                    with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError):
                        print(json.dumps({"topic": str(message.topic), "retained":
                                          bool(message.retain),
                                          "message": json.loads(payload.decode())}),
                              flush=True)
                elif live is not None:
                    live.update(render(board), refresh=True)

        task = asyncio.create_task(read())
        try:
            while end is None or time.monotonic() < end:
                if task.done():
                    task.result()  # a lost connection raises here
                    return
                await asyncio.sleep(0.05)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def render(board: Board) -> Table:
    """The rigs as a table."""
    table = Table(title="neurobench rigs" + (f" ({board.only})" if board.only else ""),
                  title_justify="left")
    for col in COLUMNS:
        table.add_column(col, overflow="fold")
    for line in board.lines():
        style = STATE_STYLE.get(line["state"], "")
        table.add_row(*(line[c] for c in COLUMNS), style=style)
    if not board.rows:
        table.caption = "no rig has reported yet"
    return table
