"""What `rig mqtt watch` shows: one row per rig, folded from its status and run messages."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rig.mqtt import topics

#: Larger messages are dropped unread (a sweep's RunFinished holds one row per grid cell).
MAX_MESSAGE_BYTES = 256 * 1024
#: Why a message was dropped: the keys of `Board.dropped`.
OVERSIZED, MALFORMED, UNKNOWN_TOPIC = "oversized", "malformed", "unknown topic"


@dataclass
class RigRow:
    """The latest of one rig."""

    rig: str
    status: dict[str, Any] = field(default_factory=dict)
    last_event: str = ""
    last_event_at: float | None = None
    last_summary: dict[str, Any] = field(default_factory=dict)
    power_w: float | None = None
    events: int = 0
    #: When the rig's state last changed (the status's own time for a retained status, else
    #: when it arrived: a will carries the time its rig connected, not when it died).
    state_since: float | None = None


class Board:
    """Rows by rig name, updated by `take(topic, payload)`."""

    def __init__(self, rig: str | None = None) -> None:
        self.only = rig
        self.rows: dict[str, RigRow] = {}
        #: Messages dropped unread, by why (OVERSIZED, MALFORMED, UNKNOWN_TOPIC).
        self.dropped: Counter[str] = Counter()
        #: The JSON object of the last message folded in (for readers that keep more).
        self.last_data: dict[str, Any] = {}

    def subscriptions(self) -> list[str]:
        """The topic filters to subscribe to (one rig, or all with `+`)."""
        who = self.only or "+"
        return [topics.status(who), f"{topics.ROOT}/{who}/run/+/+"]

    def take(self, topic: str, payload: bytes, *, retained: bool = False,
             now: float | None = None) -> RigRow | None:
        """Fold one message in; None if it is not a rig's status or run message (what is
        malformed, oversized or on an unknown topic is counted in `dropped`)."""
        where = topics.split(topic)
        if where is None:
            self.dropped[UNKNOWN_TOPIC] += 1
            return None
        rig, rest = where
        if self.only and rig != self.only:
            return None
        if not (rest == ["status"] or (len(rest) == 3 and rest[0] == "run")):
            self.dropped[UNKNOWN_TOPIC] += 1
            return None
        if len(payload) > MAX_MESSAGE_BYTES:
            self.dropped[OVERSIZED] += 1
            return None
        try:
            data = json.loads(payload.decode("utf-8")) if payload else {}
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            data = None
        if not isinstance(data, dict):
            self.dropped[MALFORMED] += 1
            return None
        self.last_data = data
        row = self.rows.setdefault(rig, RigRow(rig))
        if rest == ["status"]:
            now = time.time() if now is None else now
            if data.get("state") != row.status.get("state") or row.state_since is None:
                at = data.get("at")
                if retained and isinstance(at, int | float) and not isinstance(at, bool):
                    row.state_since = min(float(at), now)
                else:
                    row.state_since = now
            row.status = data
        elif len(rest) == 3 and rest[0] == "run":
            kind = rest[2]
            if kind == topics.POWER:
                row.power_w = data.get("mean_w")
            else:
                row.events += 1
                row.last_event, row.last_event_at = kind, data.get("at", time.time())
                if kind == "run_finished":
                    row.last_summary = {"status": data.get("status"),
                                        "error": data.get("error")}
        return row

    def lines(self) -> list[dict[str, str]]:
        """One plain-text row per rig, for the table and for `--json`-less logs."""
        out = []
        for name in sorted(self.rows):
            row = self.rows[name]
            s = row.status
            prog = s.get("progress") or {}
            done, total = prog.get("done"), prog.get("total")
            progress = (f"{done}/{total}" if total else f"{done}") if done is not None else ""
            if total and done is not None:
                progress += f" ({100 * done / total:.0f}%)"
            last = s.get("last_run") or {}
            out.append({
                "rig": name,
                "state": s.get("state", "?"),
                "procedure": s.get("procedure") or "",
                "phase": s.get("phase") or "",
                "progress": progress,
                "run": (s.get("run_id") or last.get("run_id") or "")[:12],
                # the last summary, while a run is measuring (an idle rig has no live power)
                "power": f"{row.power_w * 1e3:.3f} mW"
                if row.power_w is not None and s.get("state") == "running" else "",
                "last": row.last_event or (f"last run {last.get('status')}"
                                           if last else ""),
                "error": s.get("error") or "",
            })
        return out
