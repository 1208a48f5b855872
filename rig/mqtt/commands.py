"""The command channel of `rig serve`: `start`, `stop` and `status` on `neurobench/<rig>/cmd`.

Every message is checked before anything acts on it: its size, that it is JSON, and the JSON
schema below. A `start` names a bench or sweep file by its name inside the rig's configured
folders, never by a path, and is refused while a run is going. Every command is answered on
`neurobench/<rig>/cmd/reply` with its request id and either what was done or why not.

Who may send commands is the broker's business (the ACL in docs/mqtt/aclfile.example lets only
operators write `cmd`); this module makes sure that whatever does arrive cannot do harm.
"""

from __future__ import annotations

import json
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from rig.errors import BENCH_ERRORS
from rig.run.asc import SCOPES
from rig.run.stopping import StopRequest

#: Larger messages are refused unread.
MAX_COMMAND_BYTES = 4096
#: A file name in a configured folder: no separators, no leading dot.
FILE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "neurobench-rig command",
    "type": "object",
    "additionalProperties": False,
    "required": ["request_id", "action"],
    "properties": {
        "request_id": {"type": "string", "minLength": 1, "maxLength": 64,
                       "pattern": r"^[A-Za-z0-9._:-]+$"},
        "action": {"enum": ["start", "stop", "status"]},
        "procedure": {"enum": ["asc", "sweep"]},
        "bench": {"type": "string", "pattern": FILE_NAME},
        "sweep": {"type": "string", "pattern": FILE_NAME},
        "scope": {"enum": list(SCOPES)},
    },
    "allOf": [
        {"if": {"properties": {"action": {"const": "start"}}},
         "then": {"required": ["procedure"]}},
        {"if": {"properties": {"procedure": {"const": "asc"}}, "required": ["procedure"]},
         "then": {"required": ["bench"], "not": {"required": ["sweep"]},
                  "description": "an asc start names a bench, not a sweep"}},
        {"if": {"properties": {"procedure": {"const": "sweep"}}, "required": ["procedure"]},
         "then": {"required": ["sweep"], "not": {"anyOf": [{"required": ["bench"]},
                                                            {"required": ["scope"]}]},
                  "description": "a sweep start names a sweep file, and no bench or scope"}},
        {"if": {"properties": {"action": {"enum": ["stop", "status"]}}},
         "then": {"not": {"anyOf": [{"required": [k]}
                                    for k in ("procedure", "bench", "sweep", "scope")]},
                  "description": "stop and status take no procedure, bench, sweep or scope"}},
    ],
}
_VALIDATOR = Draft202012Validator(SCHEMA)


@dataclass(frozen=True)
class Command:
    """A command that passed every check."""

    request_id: str
    action: str
    procedure: str | None = None
    bench: str | None = None
    sweep: str | None = None
    scope: str = "all"


class Refused(Exception):
    """A command that is not carried out; `reason` goes into the reply."""

    def __init__(self, reason: str, request_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.request_id = request_id


def parse_command(payload: bytes) -> Command:
    """The command in `payload`, or `Refused` saying what is wrong with it."""
    if len(payload) > MAX_COMMAND_BYTES:
        raise Refused(f"message too large: {len(payload)} bytes (at most {MAX_COMMAND_BYTES})")
    try:
        data = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Refused(f"not a JSON object: {exc}") from None
    rid = data.get("request_id") if isinstance(data, dict) else None
    rid = rid if isinstance(rid, str) and len(rid) <= 64 else None
    errors = sorted(_VALIDATOR.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "the message"
        # a failed "not" prints the whole message back: say the rule it broke instead
        text = first.schema.get("description") if first.validator == "not" else None
        raise Refused(f"schema: {where}: {_short(text or first.message)}", rid)
    return Command(request_id=data["request_id"], action=data["action"],
                   procedure=data.get("procedure"), bench=data.get("bench"),
                   sweep=data.get("sweep"), scope=data.get("scope", "all"))


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def file_in(folder: Path, name: str, what: str) -> Path:
    """`folder/name[.toml]` if it is a file inside `folder` (symlinks out of it refused)."""
    base = folder.resolve()
    for candidate in (name, f"{name}.toml"):
        path = (base / candidate).resolve()
        if path.is_file():
            if not path.is_relative_to(base):
                raise Refused(f"{what} {name!r} points outside the rig's {what} folder")
            return path
    known = sorted(p.stem for p in base.glob("*.toml")) if base.is_dir() else []
    raise Refused(f"no {what} {name!r} in the rig's {what} folder"
                  + (f" (known: {', '.join(known)})" if known else ""))


Runner = Callable[[Command, Path, StopRequest], None]


class CommandDesk:
    """Acts on commands for `rig serve`: one run at a time, on its own thread.

    `prepare(command, path)` is called on the MQTT thread to check the bench or sweep file
    before a start is accepted (so a bad file is refused in the reply); `run(command, path,
    stop)` then measures on the run thread. `status()` is the rig's current status."""

    def __init__(self, *, benches: Path, sweeps: Path,
                 prepare: Callable[[Command, Path], Any], run: Runner,
                 status: Callable[[], dict[str, Any]],
                 on_error: Callable[[str], None] = lambda text: None) -> None:
        self.benches, self.sweeps = Path(benches), Path(sweeps)
        self._prepare, self._run, self._status, self._on_error = prepare, run, status, on_error
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.stop_request: StopRequest | None = None
        self.current: Command | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def handle(self, payload: bytes) -> dict[str, Any]:
        """The reply to one message (every message gets one)."""
        try:
            command = parse_command(payload)
            return {"request_id": command.request_id, "ok": True, "action": command.action,
                    **self._act(command)}
        except Refused as exc:
            return {"request_id": exc.request_id, "ok": False, "reason": exc.reason}

    def _act(self, command: Command) -> dict[str, Any]:
        try:
            if command.action == "status":
                return {"status": self._status(), "benches": self._names(self.benches),
                        "sweeps": self._names(self.sweeps)}
            if command.action == "stop":
                return self._stop(command)
            return self._start(command)
        except Refused as exc:
            exc.request_id = command.request_id
            raise

    def _stop(self, command: Command) -> dict[str, Any]:
        with self._lock:
            if not self.running or self.stop_request is None:
                raise Refused("nothing is running")
            self.stop_request.set(f"stopped by a remote stop command "
                                  f"(request {command.request_id})")
            return {"stopping": _describe(self.current)}

    def _start(self, command: Command) -> dict[str, Any]:
        with self._lock:
            if self.running:
                raise Refused(f"a run is going ({_describe(self.current)}); send stop first, "
                              "or wait for it to finish")
            if command.procedure == "asc":
                path = file_in(self.benches, command.bench or "", "bench")
            else:
                path = file_in(self.sweeps, command.sweep or "", "sweep")
            try:
                self._prepare(command, path)
            except BENCH_ERRORS as exc:
                raise Refused(f"{path.name}: {exc}") from None
            self.stop_request = StopRequest()
            self.current = command
            self._thread = threading.Thread(target=self._main, args=(command, path,
                                                                     self.stop_request),
                                            name="rig-serve-run", daemon=True)
            self._thread.start()
            return {"started": _describe(command)}

    def _main(self, command: Command, path: Path, stop: StopRequest) -> None:
        try:
            self._run(command, path, stop)
        except KeyboardInterrupt:  # the clean stop: the runner already powered the DUT off
            pass
        except BENCH_ERRORS as exc:
            self._on_error(str(exc))
        except Exception as exc:  # a bug: say so, keep serving
            self._on_error(f"{type(exc).__name__}: {exc}")
            traceback.print_exc()

    def stop_and_wait(self, timeout: float) -> bool:
        """Stop a run that is going and wait up to `timeout` s; True if none is left."""
        with self._lock:
            thread, stop = self._thread, self.stop_request
        if thread is None or not thread.is_alive():
            return True
        if stop is not None:
            stop.set()
        thread.join(timeout)
        return not thread.is_alive()

    @staticmethod
    def _names(folder: Path) -> list[str]:
        return sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else []


def _describe(command: Command | None) -> dict[str, Any]:
    if command is None:
        return {}
    out: dict[str, Any] = {"procedure": command.procedure}
    if command.procedure == "asc":
        out.update(bench=command.bench, scope=command.scope)
    else:
        out["sweep"] = command.sweep
    return out
