"""The dashboard's state, folded from broker messages: JSON in, state out, no I/O.

`Fleet.take(topic, payload, ...)` folds one message (through `rig.mqtt.board.Board`, the same
fold `rig mqtt watch` uses, which drops and counts what is malformed, oversized or on an unknown
topic) and returns the updates the pages need, as plain JSON-able dicts:

    {"type": "rig", "rig": CARD}                        a rig's card on the fleet page changed
    {"type": "event", "rig", "run_id", "row": ROW}        a run's event (run page log)
    {"type": "power", "rig", "run_id", "point": [t_s, mean_w, min_w, max_w]}
    {"type": "finished", "rig", "run_id", "result": RESULT}   RunFinished's figures and checks
    {"type": "cell", "rig", "run_id", "cell": CELL}       a sweep grid cell got a point

Everything kept is bounded (rigs, runs per rig, events and power points per run), and every
string that reaches a page is cut to a length; the page shows them as text, never as markup.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from rig.mqtt import topics
from rig.mqtt.board import Board, RigRow
from rig.traces.analysis.uncertainty import with_uncertainty

#: Longest string handed to a page (an event text, an error, a rig name).
MAX_TEXT = 300
#: Rig names longer than this are not a rig of ours: dropped as an unknown topic.
MAX_RIG_NAME = 128
#: Bounds of what the dashboard keeps.
MAX_RIGS = 500
RUNS_PER_RIG = 4
EVENTS_PER_RUN = 400
#: Power points kept per run: the trace is 800 px wide, and a long run thins out.
POWER_PER_RUN = 2000
SPARKLINE = 60
TOO_MANY_RIGS = "too many rigs"


def text(value: Any, limit: int = MAX_TEXT) -> str:
    """`value` as a string of at most `limit` characters (shown as text by the page)."""
    s = value if isinstance(value, str) else ("" if value is None else str(value))
    return s if len(s) <= limit else s[: limit - 1] + "…"


def table(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def number(value: Any) -> float | None:
    """A finite number, or None (JSON from the broker may hold anything)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def describe(kind: str, data: dict[str, Any]) -> str:
    """One line of plain text for an event, for the fleet's "last event" and the run log."""
    if kind == "note":
        return text(data.get("text"))
    if kind == "phase_started":
        return text(f"{data.get('phase')}: {data.get('description') or ''}".rstrip(": "))
    if kind == "phase_progress":
        return text(f"{data.get('phase')} {data.get('done')}/{data.get('total')}")
    if kind == "sweep_point":
        gap = number((data.get("result") or {}).get("gap")
                     if isinstance(data.get("result"), dict) else None)
        what = f"gap {gap:.4g}" if gap is not None else text(data.get("error") or "no gap", 120)
        return text(f"{data.get('sut')} n={data.get('nodes')} d={data.get('density')} "
                    f"t={data.get('timeout_s')} s={data.get('seed')}: {data.get('status')}, "
                    f"{what}")
    if kind == "latency_run":
        return text(f"run {data.get('index')}: {number(data.get('inferences_per_s'))} inf/s")
    if kind == "window_measured":
        return text(f"window {data.get('index')}: {number(data.get('mean_power_w'))} W")
    if kind == "sample_classified":
        return text(f"sample {data.get('index')}: "
                    f"{'correct' if data.get('correct') else 'wrong'}")
    if kind == "run_started":
        return text(f"{data.get('procedure')} on {data.get('device')}")
    if kind == "run_finished":
        return text(f"{data.get('status')}" + (f": {data['error']}" if data.get("error")
                                               else ""))
    return ""


def figures(summary: dict[str, Any]) -> dict[str, Any]:
    """The headline figures of a RunFinished summary: its scalar values (numbers, strings,
    booleans), as `rig show --json` gives them; lists and tables stay out."""
    out: dict[str, Any] = {}
    for key, value in summary.items():
        if isinstance(value, bool) or value is None:
            out[text(key, 80)] = value
        elif isinstance(value, int | float):
            out[text(key, 80)] = value if math.isfinite(value) else None
        elif isinstance(value, str):
            out[text(key, 80)] = text(value)
    return out


def uncertainties(summary: dict[str, Any]) -> dict[str, Any]:
    """Per figure with a GUM budget in the summary (``uncertainty``), compactly: U, k, whether
    the budget is complete (else U is a lower bound), the number of unknown terms, and the
    figure as every view of the rig reads it (`with_uncertainty`)."""
    out: dict[str, Any] = {}
    for key, found in list(table(summary.get("uncertainty")).items())[:40]:
        b = table(found)
        value, u, k = number(summary.get(key)), number(b.get("U")), number(b.get("k"))
        if value is None or u is None or k is None:
            continue
        found_unknown = b.get("unknown")
        unknown: list[Any] = found_unknown if isinstance(found_unknown, list) else []
        unit = "/s" if b.get("unit") == "1/s" else text(b.get("unit"), 8)
        budget = {"U": u, "k": k, "complete": b.get("complete") is True, "unknown": unknown}
        out[text(key, 80)] = {"U": u, "k": k, "complete": budget["complete"],
                              "unknown": len(unknown),
                              "text": text(with_uncertainty(value, unit, budget))}
    return out


def checks(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary's checks: name, ok, detail."""
    found = summary.get("checks")
    if not isinstance(found, list):
        return []
    return [{"name": text(c.get("name"), 120), "ok": c.get("ok") is True,
             "detail": text(c.get("detail"))} for c in found[:50] if isinstance(c, dict)]


@dataclass
class RunView:
    """What the run page shows of one run."""

    rig: str
    run_id: str
    procedure: str = ""
    device: str = ""
    started_at: float | None = None
    events: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=EVENTS_PER_RUN))
    events_seen: int = 0
    #: The power trace: [t_s, mean_w, min_w, max_w] per kept summary (see `add_power`).
    power: list[tuple[float, float, float, float]] = field(default_factory=list)
    #: Keep one summary in `power_stride` (doubled each time the trace fills up).
    power_stride: int = 1
    power_offered: int = 0
    result: dict[str, Any] | None = None
    #: The sweep's axes (suts, nodes, densities, timeouts) and seeds per cell, from RunStarted.
    grid: dict[str, Any] | None = None
    cells: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add_power(self, point: tuple[float, float, float, float]) -> bool:
        """Keep `point` if it falls on the stride; a full trace keeps every other point and
        doubles the stride, so it always spans the whole run in at most POWER_PER_RUN points
        (memory stays flat however long the run). True if it was kept."""
        self.power_offered += 1
        if (self.power_offered - 1) % self.power_stride:
            return False
        self.power.append(point)
        if len(self.power) >= POWER_PER_RUN:
            self.power = self.power[::2]
            self.power_stride *= 2
        return True

    def snapshot(self) -> dict[str, Any]:
        return {"rig": self.rig, "run_id": self.run_id, "procedure": self.procedure,
                "device": self.device, "started_at": self.started_at,
                "events": list(self.events), "events_seen": self.events_seen,
                "power": [list(p) for p in self.power], "result": self.result, "grid": self.grid,
                "cells": list(self.cells.values())}


def cell_key(sut: Any, nodes: Any, density: Any, timeout_s: Any) -> str:
    """The grid cell of a sweep point (every seed of it lands in one cell)."""
    return f"{sut}|{nodes}|{density!r}|{timeout_s!r}"


@dataclass
class RigExtra:
    """What the dashboard keeps per rig beside the Board's row."""

    sparkline: deque[float] = field(default_factory=lambda: deque(maxlen=SPARKLINE))
    spark_run: str | None = None
    #: The rig's time of the last power summary (the benchmark's publish-to-page delay).
    power_at: float | None = None
    last_text: str = ""
    #: (phase, time, steps done) of the phase's first status: the remaining-time estimate.
    phase_start: tuple[str, float, float] | None = None
    remaining_s: float | None = None
    runs: deque[str] = field(default_factory=lambda: deque(maxlen=RUNS_PER_RIG))


class Fleet:
    """Every rig seen on the broker and its latest runs."""

    def __init__(self) -> None:
        self.board = Board()
        self.extra: dict[str, RigExtra] = {}
        self.runs: dict[tuple[str, str], RunView] = {}

    @property
    def dropped(self) -> dict[str, int]:
        """Messages dropped unread, by why."""
        return dict(self.board.dropped)

    def subscriptions(self) -> list[str]:
        """Everything under the root: what is not a rig's status, run message or command
        channel is counted as an unknown topic."""
        return [f"{topics.ROOT}/#"]

    def take(self, topic: str, payload: bytes, *, retained: bool = False,
             now: float) -> list[dict[str, Any]]:
        """Fold one message; the updates it makes (none if it was dropped)."""
        where = topics.split(topic)
        if where is not None and where[1] in (["cmd"], ["cmd", "reply"], ["ledger"]):
            return []  # the command channel and the ledger's head: known, not shown
        if where is not None and (len(where[0]) > MAX_RIG_NAME or not where[0]):
            self.board.dropped["unknown topic"] += 1
            return []
        if where is not None and where[0] not in self.board.rows \
                and len(self.board.rows) >= MAX_RIGS:
            self.board.dropped[TOO_MANY_RIGS] += 1
            return []
        row = self.board.take(topic, payload, retained=retained, now=now)
        if row is None:
            return []
        rest = topics.split(topic)[1]  # type: ignore[index]  # board.take gave a row: the topic is ours
        extra = self.extra.setdefault(row.rig, RigExtra())
        if rest == ["status"]:
            self._progress(row, extra, now)
            return [{"type": "rig", "rig": self.card(row.rig)}]
        run_id, kind = text(rest[1], 64), rest[2]
        data = self.board.last_data  # the message Board.take just parsed
        if kind == topics.POWER:
            return self._power(row, extra, run_id, data)
        return self._event(row, extra, run_id, kind, data, now)

    def _run(self, rig: str, run_id: str) -> RunView:
        key = (rig, run_id)
        run = self.runs.get(key)
        if run is None:
            extra = self.extra.setdefault(rig, RigExtra())
            if len(extra.runs) == extra.runs.maxlen:
                self.runs.pop((rig, extra.runs[0]), None)
            extra.runs.append(run_id)
            run = self.runs[key] = RunView(rig, run_id)
        return run

    def _progress(self, row: RigRow, extra: RigExtra, now: float) -> None:
        """The remaining-time estimate: the phase's steps per second since its first status,
        over the steps left (an estimate by the rig's clock, shown as one)."""
        s = row.status
        prog = table(s.get("progress"))
        done, total = number(prog.get("done")), number(prog.get("total"))
        at = number(s.get("at")) or now
        phase = text(s.get("phase"), 80)
        if s.get("state") != "running" or done is None:
            extra.phase_start, extra.remaining_s = None, None
            return
        start = extra.phase_start
        if start is None or start[0] != phase or done < start[2]:
            extra.phase_start, extra.remaining_s = (phase, at, done), None
            return
        steps, elapsed = done - start[2], at - start[1]
        extra.remaining_s = (elapsed * (total - done) / steps
                             if total and steps > 0 and elapsed > 0 else None)

    def _power(self, row: RigRow, extra: RigExtra, run_id: str,
               data: dict[str, Any]) -> list[dict[str, Any]]:
        mean, lo, hi = (number(data.get(k)) for k in ("mean_w", "min_w", "max_w"))
        if mean is None:
            return [{"type": "rig", "rig": self.card(row.rig)}]
        t = number(data.get("t_s")) or 0.0
        point = (t, mean, lo if lo is not None else mean, hi if hi is not None else mean)
        kept = self._run(row.rig, run_id).add_power(point)
        if extra.spark_run != run_id:
            extra.sparkline.clear()
            extra.spark_run = run_id
        extra.sparkline.append(mean)
        extra.power_at = number(data.get("at"))
        card = {"type": "rig", "rig": self.card(row.rig)}
        return [card, {"type": "power", "rig": row.rig, "run_id": run_id,
                       "point": list(point)}] if kept else [card]

    def _event(self, row: RigRow, extra: RigExtra, run_id: str, kind: str,
               data: dict[str, Any], now: float) -> list[dict[str, Any]]:
        run = self._run(row.rig, run_id)
        at = number(data.get("at")) or now
        line = describe(kind, data)
        extra.last_text = line
        out: list[dict[str, Any]] = []
        if kind == "run_started":
            run.procedure = text(data.get("procedure"), 80)
            run.device = text(data.get("device"), 80)
            run.started_at = at
            manifest = table(data.get("manifest"))
            run.grid = self._grid(manifest.get("sweep"))
        event_row = {"n": run.events_seen, "at": at, "kind": text(kind, 64), "text": line}
        run.events.append(event_row)
        run.events_seen += 1
        out.append({"type": "event", "rig": row.rig, "run_id": run_id, "row": event_row})
        if kind == "run_started" and run.grid is not None:
            out.append({"type": "grid", "rig": row.rig, "run_id": run_id, "grid": run.grid})
        if kind == "sweep_point":
            cell = self._cell(run, data)
            if cell is not None:
                out.append({"type": "cell", "rig": row.rig, "run_id": run_id, "cell": cell})
        if kind == "run_finished":
            summary = table(data.get("summary"))
            run.result = {"status": text(data.get("status"), 40),
                          "error": text(data.get("error")) or None,
                          "figures": figures(summary), "checks": checks(summary),
                          "uncertainty": uncertainties(summary)}
            out.append({"type": "finished", "rig": row.rig, "run_id": run_id,
                        "result": run.result})
        out.insert(0, {"type": "rig", "rig": self.card(row.rig)})
        return out

    @staticmethod
    def _grid(sweep: Any) -> dict[str, Any] | None:
        if not isinstance(sweep, dict):
            return None
        axes = {}
        for key in ("suts", "nodes", "densities", "timeouts", "seeds"):
            values = sweep.get(key)
            if not isinstance(values, list) or len(values) > 200:
                return None
            axes[key] = [v if isinstance(v, int | float) and not isinstance(v, bool)
                         else text(v, 40) for v in values]
        return {"suts": axes["suts"], "nodes": axes["nodes"], "densities": axes["densities"],
                "timeouts": axes["timeouts"], "seeds": len(axes["seeds"])}

    @staticmethod
    def _cell(run: RunView, data: dict[str, Any]) -> dict[str, Any] | None:
        sut, nodes = text(data.get("sut"), 40), number(data.get("nodes"))
        density, timeout = number(data.get("density")), number(data.get("timeout_s"))
        if nodes is None or density is None or timeout is None:
            return None
        nodes_v = int(nodes) if nodes.is_integer() else nodes
        key = cell_key(sut, nodes_v, density, timeout)
        cell = run.cells.get(key)
        if cell is None:
            if len(run.cells) >= 20000:
                return None
            cell = run.cells[key] = {"key": key, "sut": sut, "nodes": nodes_v,
                                     "density": density, "timeout_s": timeout, "points": 0,
                                     "failed": 0, "gaps": [], "gap_mean": None}
        cell["points"] += 1
        result = table(data.get("result"))
        gap = number(result.get("gap"))
        if data.get("status") != "ok" or gap is None:
            cell["failed"] += 1
        else:
            cell["gaps"].append(gap)
            cell["gap_mean"] = sum(cell["gaps"]) / len(cell["gaps"])
        return {k: v for k, v in cell.items() if k != "gaps"}

    # -- what a page gets at once ----------------------------------------------------------
    def card(self, rig: str) -> dict[str, Any]:
        """One rig's card on the fleet page."""
        row = self.board.rows[rig]
        extra = self.extra.setdefault(rig, RigExtra())
        s = row.status
        prog = table(s.get("progress"))
        last = table(s.get("last_run"))
        if not last and extra.runs and not s.get("run_id"):
            # a status without it (the will, a clean close): the last run seen on the broker
            seen = self.runs.get((rig, extra.runs[-1]))
            if seen is not None:
                last = {"run_id": seen.run_id,
                        "status": seen.result["status"] if seen.result else "unfinished"}
        running = s.get("state") == "running"
        state = text(s.get("state"), 20) or "unknown"
        return {
            "rig": text(rig, MAX_RIG_NAME),
            "state": state,
            "since": row.state_since,
            "procedure": text(s.get("procedure"), 80),
            "phase": text(s.get("phase"), 80),
            "done": number(prog.get("done")),
            "total": number(prog.get("total")),
            "remaining_s": extra.remaining_s if running else None,
            "run_id": text(s.get("run_id"), 64),
            "last_run": {"run_id": text(last.get("run_id"), 64),
                         "status": text(last.get("status"), 40)} if last else None,
            "power": list(extra.sparkline) if running else [],
            "power_w": row.power_w if running and number(row.power_w) is not None else None,
            "power_at": extra.power_at if running else None,
            "last_event": text(row.last_event, 64),
            "last_text": extra.last_text,
            "last_event_at": number(row.last_event_at),
            "error": text(s.get("error")),
            "simulated": s.get("simulated") is True,
            "serving": s.get("serving") is True,
        }

    def snapshot(self) -> dict[str, Any]:
        """Every rig's card (what a page that connects gets at once)."""
        return {"rigs": [self.card(r) for r in sorted(self.board.rows)],
                "dropped": self.dropped}

    def run_snapshot(self, rig: str, run_id: str) -> dict[str, Any] | None:
        run = self.runs.get((rig, run_id))
        return None if run is None else run.snapshot()
