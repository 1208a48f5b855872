"""One verified item: what `rig verify` prints one line of, and the JSON it writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: A check's outcomes: it holds, it fails, or it does not apply to this run (said why).
HOLDS, FAILS, NOT_APPLICABLE = "ok", "FAILED", "n/a"


@dataclass(frozen=True)
class Check:
    """One item of a verification: what was checked, whether it holds, and the evidence."""

    #: What is checked, short and stable, e.g. "energy per inference re-derived".
    item: str
    #: True: holds; False: fails; None: not applicable (the detail says why).
    ok: bool | None
    #: The evidence: the numbers compared, or what is wrong, naming files and fields.
    detail: str
    #: The run folder's name the check is about; None for the bundle as a whole.
    run: str | None = None

    @property
    def outcome(self) -> str:
        """"ok", "FAILED" or "n/a"."""
        return NOT_APPLICABLE if self.ok is None else HOLDS if self.ok else FAILS

    def to_json(self) -> dict[str, Any]:
        return {"item": self.item, "ok": self.ok, "outcome": self.outcome,
                "detail": self.detail, "run": self.run}


def failed(checks: list[Check]) -> list[Check]:
    """The checks that fail."""
    return [c for c in checks if c.ok is False]
