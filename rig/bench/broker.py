"""Where the lab's broker is, who this rig is on it, and how it logs in.

The broker comes from `[mqtt] url` in the bench file or `--mqtt mqtt://user@host:port` on the
command line (the command line wins). The password never comes from either: it is read from
the environment (`RIG_MQTT_PASSWORD`) or from `--mqtt-password-file`, kept out of `repr`, of
logs and of the manifest (`MqttSettings.public()` is what a run records).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from protocols.errors import quoted
from rig.errors import ConfigError

PASSWORD_ENV = "RIG_MQTT_PASSWORD"
SCHEMES = {"mqtt": 1883, "mqtts": 8883}
#: The highest power-summary rate: the live power stream hands over 10 previews a second.
MAX_POWER_RATE_HZ = 10.0
DEFAULT_POWER_RATE_HZ = 2.0
DEFAULT_QUEUE = 1000
#: Rig names become one topic level: no MQTT wildcards or separators.
_RIG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class BrokerUrl:
    """The parts of `mqtt[s]://[user@]host[:port]`."""

    scheme: str
    host: str
    port: int
    username: str | None

    @property
    def tls(self) -> bool:
        return self.scheme == "mqtts"

    def __str__(self) -> str:
        user = f"{self.username}@" if self.username else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{user}{host}:{self.port}"


def parse_url(url: str, *, where: str = "--mqtt") -> BrokerUrl:
    """Parse a broker URL; a password in it, a path or an unknown scheme is a ConfigError."""
    hint = "write it as mqtt://user@host:port (or mqtts:// for TLS)"
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{where}: not a broker URL: {quoted(url)} ({exc})",
                          hint=hint) from None
    if parts.scheme not in SCHEMES:
        raise ConfigError(f"{where}: unknown scheme {quoted(parts.scheme or '(none)')} in "
                          f"{quoted(url)}",
                          hint=hint)
    if parts.password is not None:
        raise ConfigError(f"{where}: the URL carries a password",
                          hint=f"take it out of the URL; give it in {PASSWORD_ENV} or "
                          "--mqtt-password-file")
    if not parts.hostname:
        raise ConfigError(f"{where}: no host in {quoted(url)}", hint=hint)
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(f"{where}: unexpected path or query in {quoted(url)}", hint=hint)
    return BrokerUrl(parts.scheme, parts.hostname, port or SCHEMES[parts.scheme],
                     parts.username or None)


def check_rig_name(name: str, *, where: str = "--rig") -> str:
    """`name` if it can be one topic level, else a ConfigError saying what it may hold."""
    if not _RIG_NAME.match(name):
        raise ConfigError(f"{where}: {quoted(name)} cannot name a rig on the broker",
                          hint="use letters, digits, '.', '_' and '-' (no '/', '+' or '#'), "
                          "at most 64 characters")
    return name


def default_rig_name(username: str | None) -> str:
    """The broker user name if there is one (ACLs key on it), else this host's name."""
    if username and _RIG_NAME.match(username):
        return username
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()) or "rig"
    return host[:64] if _RIG_NAME.match(host[:64]) else "rig"


@dataclass(frozen=True)
class MqttSettings:
    """Everything needed to reach the broker as this rig."""

    broker: BrokerUrl
    rig: str
    password: str | None = field(default=None, repr=False)
    #: Where the password came from ("env", "file" or None): recorded instead of it.
    password_source: str | None = None
    ca_file: Path | None = None
    power_rate_hz: float = DEFAULT_POWER_RATE_HZ
    queue: int = DEFAULT_QUEUE

    @property
    def tls(self) -> bool:
        return self.broker.tls or self.ca_file is not None

    def public(self) -> dict[str, Any]:
        """What a run's manifest records: no password, only where it came from."""
        return {
            "broker": str(self.broker), "rig": self.rig, "tls": self.tls,
            "ca_file": str(self.ca_file) if self.ca_file else None,
            "password_from": self.password_source,
            "power_rate_hz": self.power_rate_hz, "queue": self.queue,
        }


def check_power_rate(rate: float, *, where: str) -> float:
    """A power-summary rate in (0, 10] Hz."""
    if not 0.0 < rate <= MAX_POWER_RATE_HZ:
        raise ConfigError(f"{where}: power_rate_hz must be in (0, {MAX_POWER_RATE_HZ:g}] Hz, "
                          f"found {rate:g}",
                          hint="telemetry carries power summaries, never raw samples")
    return rate


def read_password(password_file: Path | None, env: Mapping[str, str] | None = None
                  ) -> tuple[str | None, str | None]:
    """(password, source): the file's first line if a file is given, else RIG_MQTT_PASSWORD."""
    env = os.environ if env is None else env
    if password_file is not None:
        try:
            text = Path(password_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--mqtt-password-file: cannot read {password_file}: "
                              f"{exc.strerror or exc}",
                              hint="give a readable file holding the password on its first "
                              "line") from None
        lines = text.splitlines()
        if not lines or not lines[0]:
            raise ConfigError(f"--mqtt-password-file: {password_file} is empty",
                              hint="put the password on its first line")
        return lines[0], "file"
    if env.get(PASSWORD_ENV):
        return env[PASSWORD_ENV], "env"
    return None, None


def resolve(
    table: Any = None,
    *,
    url: str | None = None,
    rig: str | None = None,
    password_file: Path | None = None,
    ca_file: Path | None = None,
    power_rate_hz: float | None = None,
    env: dict[str, str] | None = None,
) -> MqttSettings | None:
    """The settings of a bench's `[mqtt]` table (`rig.bench.config.MqttConfig`, or None) with the
    command line's values over it; None when neither asks for MQTT."""
    if table is None and url is None:
        return None
    where = "--mqtt" if url is not None else "[mqtt] url"
    broker = parse_url(url if url is not None else table.url, where=where)
    name = rig if rig else (table.rig if table is not None and table.rig else None)
    name = check_rig_name(name, where="--mqtt-rig" if rig else "[mqtt] rig") if name else (
        default_rig_name(broker.username))
    ca = ca_file if ca_file is not None else (
        Path(table.ca_file) if table is not None and table.ca_file else None)
    if ca is not None and not Path(ca).is_file():
        raise ConfigError(f"MQTT CA file does not exist: {ca}",
                          hint="give the PEM file of the CA that signed the broker's certificate")
    rate = power_rate_hz if power_rate_hz is not None else (
        table.power_rate_hz if table is not None else DEFAULT_POWER_RATE_HZ)
    check_power_rate(rate, where="--mqtt-power-rate" if power_rate_hz is not None
                     else "[mqtt] power_rate_hz")
    queue = table.queue if table is not None else DEFAULT_QUEUE
    password, source = read_password(password_file, env)
    return MqttSettings(broker=broker, rig=name, password=password, password_source=source,
                        ca_file=Path(ca) if ca is not None else None,
                        power_rate_hz=rate, queue=queue)
