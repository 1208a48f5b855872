"""`system.toml`: what only the submitter can say in a report (tuning history, components the
measurement leaves out, who submits). Everything else the report takes from the run folders.

```toml
[submission]
title = "..."
submitter = "..."

[systems.dut-asc01]          # one table per system in the report (`rig report --template RUN...`)
tuning = "..."
components_omitted = "..."
```

An empty or absent required field is shown in the report as a visible "to be completed by the
submitter" box; `rig report --strict` refuses to write a report while any is unfilled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rig.bench.config import read_toml
from rig.bench.numbers import refuse_non_finite
from rig.errors import ConfigError


@dataclass(frozen=True)
class Field:
    """One submitter-supplied field: its key, whether a report needs it, and what it asks for."""

    key: str
    required: bool
    asks: str


SUBMISSION_FIELDS = (
    Field("title", True, "the title of the submission, e.g. \"<system> on NeuroBench ASC\""),
    Field("submitter", True, "the organisation and people submitting these results"),
    Field("contact", False, "an e-mail address for questions and audits"),
    Field("introduction", False, "a paragraph introducing the submission"),
)

SYSTEM_FIELDS = (
    Field("name", False, "the system's name as it should appear in the report"),
    Field("architecture", False,
          "what the rig cannot see of the system: chip, board, memory, clocks, toolchain"),
    Field("tuning", True,
          "how the model or the solver's parameters were chosen and tuned (ASC: train split "
          "only; QUBO: seeds 0-4, parameters a function of nodes and density only)"),
    Field("components_omitted", True,
          "components that draw power during the workload but are outside the measurement "
          "(e.g. regulators, debug probe, level shifters, the host), or \"none\""),
    Field("components_included", False,
          "anything on the measured supply beyond what the rig reports (e.g. on-board sensors)"),
    Field("power_tap", False,
          "exactly where the instrument taps the supply (e.g. the MCU's VDD jumper JP2)"),
    Field("notes", False, "anything else a reader or an auditor should know"),
)

_SUBMISSION_KEYS = {f.key for f in SUBMISSION_FIELDS}
_SYSTEM_KEYS = {f.key for f in SYSTEM_FIELDS}


@dataclass(frozen=True)
class SystemInfo:
    """The parsed system.toml (or an empty one when none was given)."""

    path: Path | None = None
    submission: dict[str, str] = field(default_factory=dict)
    systems: dict[str, dict[str, str]] = field(default_factory=dict)

    def submission_value(self, key: str) -> str:
        """The [submission] value, '' when unfilled."""
        return self.submission.get(key, "").strip()

    def system_value(self, system_id: str, key: str) -> str:
        """The [systems.<id>] value, '' when unfilled."""
        return self.systems.get(system_id, {}).get(key, "").strip()

    def missing(self, system_ids: list[str]) -> list[str]:
        """Required fields left empty, as `table.key` names, in the order the template lists."""
        out = [f"submission.{f.key}" for f in SUBMISSION_FIELDS
               if f.required and not self.submission_value(f.key)]
        for sid in system_ids:
            out += [f"systems.{sid}.{f.key}" for f in SYSTEM_FIELDS
                    if f.required and not self.system_value(sid, f.key)]
        return out


def load_system(path: Path, system_ids: list[str]) -> SystemInfo:
    """Read and check a system.toml against the systems the report will contain."""
    raw = read_toml(path, "system file not found",
                    "rig report --template RUN... > system.toml writes one to fill in")
    unknown = sorted(set(raw) - {"submission", "systems"})
    if unknown:
        raise ConfigError(f"{path}: unknown table [{unknown[0]}]",
                          hint="a system file has [submission] and [systems.<id>] tables")
    submission = _strings(raw.get("submission", {}), _SUBMISSION_KEYS, path, "submission")
    systems_raw = raw.get("systems", {})
    if not isinstance(systems_raw, dict):
        raise ConfigError(f"{path}: systems: expected tables [systems.<id>], "
                          f"found {type(systems_raw).__name__}")
    systems = {}
    for sid, table in systems_raw.items():
        if sid not in system_ids:
            known = ", ".join(system_ids) or "none"
            raise ConfigError(f"{path}: [systems.{sid}] names no system in these runs",
                              hint=f"the systems in this report are: {known}")
        systems[sid] = _strings(table, _SYSTEM_KEYS, path, f"systems.{sid}")
    refuse_non_finite(raw, path)  # the backstop (every value is text, checked above)
    return SystemInfo(path, submission, systems)


def _strings(table: object, known: set[str], path: Path, where: str) -> dict[str, str]:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [{where}]: expected a table, found {type(table).__name__}")
    out = {}
    for key, value in table.items():
        if key not in known:
            raise ConfigError(f"{path}: [{where}] unknown key {key!r}",
                              hint=f"known keys here: {', '.join(sorted(known))}")
        if not isinstance(value, str):
            raise ConfigError(f"{path}: [{where}] {key}: expected text in quotes, "
                              f"found {value!r}")
        out[key] = value
    return out


def template(systems: list[tuple[str, str]]) -> str:
    """A system.toml to fill in, with a table per (id, description) of the given systems."""
    lines = [
        "# system.toml for `rig report RUN... --system system.toml`: what only the submitter",
        "# can say. Everything else comes from the run folders. Required fields left empty show",
        "# in the report as 'to be completed by the submitter'; --strict refuses them.",
        "",
        "[submission]",
    ]
    lines += _fields(SUBMISSION_FIELDS)
    if not systems:
        systems = [("<system-id>", "rig report --template RUN... lists the ids of your runs")]
    for sid, description in systems:
        lines += ["", f"# {description}", f"[systems.{sid}]"]
        lines += _fields(SYSTEM_FIELDS)
    return "\n".join(lines) + "\n"


def _fields(fields: tuple[Field, ...]) -> list[str]:
    out = []
    for f in fields:
        need = "required" if f.required else "optional"
        out += [f"# {need}: {f.asks}", f'{f.key} = ""']
    return out
