"""`rig dashboard --mqtt mqtt://viewer@broker`: the lab's rigs on a web page (rig/dashboard)."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import socket
import sys
from pathlib import Path
from typing import Any

from rig.bench.broker import PASSWORD_ENV, MqttSettings, resolve
from rig.commands.mqtt import URL_ENV
from rig.errors import ConfigError

#: The operator's broker password, when --operator-password-file is not given.
OPERATOR_PASSWORD_ENV = "RIG_MQTT_OPERATOR_PASSWORD"
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8050


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dashboard", help="a web page of every rig on the MQTT broker")
    p.add_argument("--mqtt", metavar="URL", default=None,
                   help=f"the broker, as a viewer: mqtt://viewer@host:port (default: ${URL_ENV})")
    p.add_argument("--mqtt-password-file", type=Path, metavar="FILE",
                   help=f"the viewer's password, on the file's first line (else ${PASSWORD_ENV})")
    p.add_argument("--mqtt-ca", type=Path, metavar="FILE", help="CA certificate for TLS")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help="address to serve on (default 127.0.0.1; any other needs --token-file)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default 8050)")
    p.add_argument("--token-file", type=Path, metavar="FILE",
                   help="the dashboard's own login token (first line, >= 16 characters): the "
                   "page asks for it; required with --operator or a --host other than loopback")
    p.add_argument("--operator", metavar="URL", default=None,
                   help="turn the start and stop controls on, sending as this broker user "
                   f"(mqtt://operator@host:port; password in ${OPERATOR_PASSWORD_ENV} or "
                   "--operator-password-file)")
    p.add_argument("--operator-password-file", type=Path, metavar="FILE",
                   help=f"the operator's broker password (else ${OPERATOR_PASSWORD_ENV})")
    p.set_defaults(run=run)


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def settings_of(args: argparse.Namespace) -> tuple[MqttSettings, MqttSettings | None]:
    """(viewer, operator or None) broker settings; ConfigError for what cannot work."""
    url = args.mqtt or os.environ.get(URL_ENV)
    if not url:
        raise ConfigError("no broker given",
                          hint=f"pass --mqtt mqtt://viewer@host:port or set {URL_ENV}")
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port {args.port}: expected 1..65535")
    if (args.operator or not is_loopback(args.host)) and args.token_file is None:
        why = "--operator" if args.operator else f"--host {args.host}"
        raise ConfigError(f"{why} needs a login: refusing to serve without --token-file",
                          hint="make a token with python -c 'import secrets; "
                          "print(secrets.token_urlsafe(24))' > FILE and pass --token-file FILE")
    viewer = resolve(None, url=url, rig="dashboard", password_file=args.mqtt_password_file,
                     ca_file=args.mqtt_ca)
    assert viewer is not None
    operator = None
    if args.operator:
        env = {PASSWORD_ENV: os.environ.get(OPERATOR_PASSWORD_ENV, "")}
        operator = resolve(None, url=args.operator, rig="dashboard",
                           password_file=args.operator_password_file, ca_file=args.mqtt_ca,
                           env=env)
    return viewer, operator


def run(args: argparse.Namespace) -> int:
    viewer, operator = settings_of(args)
    try:
        import uvicorn

        from rig.dashboard.auth import Login, read_token
        from rig.dashboard.hub import Hub
        from rig.dashboard.server import create_app
    except ImportError as exc:
        raise ConfigError(f"rig dashboard needs the dashboard extra ({exc})",
                          hint="pip install 'neurobench-rig[dashboard]'") from None
    login = Login(read_token(args.token_file) if args.token_file else None)
    for who, settings in (("viewer", viewer), ("operator", operator)):
        if settings is not None:
            _check_login(who, settings)
    listener = listen(args.host, args.port)
    app = create_app(Hub(), viewer=viewer, login=login, operator=operator)
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"rig dashboard: http://{host}:{args.port}/ ({'operator' if operator else 'read-only'}"
          f"{', login required' if login.required else ''}); broker {viewer.broker}",
          file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1,
                            lifespan="on", access_log=False)
    try:
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        listener.close()
    return 0


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or a ConfigError saying why not (bound here, before
    the server starts, so that a port in use is a clear error and not a server log line)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise ConfigError(f"--host {host}: {exc.strerror or exc}",
                          hint="give an address of this machine, e.g. 127.0.0.1") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot serve on {host}:{port}: {exc.strerror or exc}",
                          hint="is another program on that port? pick another with --port"
                          ) from None
    return sock


def _check_login(who: str, settings: MqttSettings) -> None:
    """Refuse to start on a login the broker refuses; a broker that is down is only a
    warning (the page shows it and the dashboard keeps trying)."""
    try:
        import aiomqtt
    except ImportError as exc:
        raise ConfigError(f"rig dashboard needs aiomqtt ({exc})",
                          hint="pip install 'neurobench-rig[dashboard]'") from None
    from rig.mqtt.connection import client

    async def probe() -> Any:
        async with client(settings, f"dashboard-probe-{os.getpid()}", timeout=5):
            return None

    try:
        asyncio.run(probe())
    except aiomqtt.MqttCodeError as exc:
        hint = (f"check the user in the URL and the password in {PASSWORD_ENV} or "
                "--mqtt-password-file") if who == "viewer" else (
            f"check the user in --operator and the password in {OPERATOR_PASSWORD_ENV} "
            "or --operator-password-file")
        raise ConfigError(f"the broker {settings.broker} refused the {who} login: {exc}",
                          hint=hint) from None
    except (aiomqtt.MqttError, OSError) as exc:
        print(f"rig dashboard: cannot reach the broker {settings.broker} yet ({exc}); "
              "the page says so and the dashboard keeps trying", file=sys.stderr, flush=True)
