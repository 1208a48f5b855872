"""The topic layout: everything a rig says is under `neurobench/<rig>/`.

    neurobench/<rig>/status                 retained: idle / running / error / offline (the will)
    neurobench/<rig>/run/<run_id>/<kind>     every event of a run, as its events.jsonl record
    neurobench/<rig>/run/<run_id>/power      mean/min/max power over the last interval
    neurobench/<rig>/cmd                     commands to the rig (operators only, by ACL)
    neurobench/<rig>/cmd/reply               the rig's answer to each command
    neurobench/<rig>/ledger                 retained: the head of the rig's run ledger
"""

from __future__ import annotations

ROOT = "neurobench"
#: Topic kind of the power summaries (no event kind has this name).
POWER = "power"


def status(rig: str) -> str:
    """The retained status topic of `rig`."""
    return f"{ROOT}/{rig}/status"


def run_event(rig: str, run_id: str, kind: str) -> str:
    """Where an event of kind `kind` of run `run_id` goes."""
    return f"{ROOT}/{rig}/run/{run_id}/{kind}"


def power(rig: str, run_id: str) -> str:
    """Where the power summaries of run `run_id` go."""
    return run_event(rig, run_id, POWER)


def ledger(rig: str) -> str:
    """The retained topic of `rig`'s ledger head (`rig.run.ledger`): a second party
    subscribed to it holds every head the rig reached."""
    return f"{ROOT}/{rig}/ledger"


def cmd(rig: str) -> str:
    """The command topic of `rig`."""
    return f"{ROOT}/{rig}/cmd"


def reply(rig: str) -> str:
    """Where `rig` answers commands."""
    return f"{ROOT}/{rig}/cmd/reply"


def split(topic: str) -> tuple[str, list[str]] | None:
    """(rig, rest) of a topic under ROOT, or None for any other topic."""
    parts = topic.split("/")
    if len(parts) < 3 or parts[0] != ROOT:
        return None
    return parts[1], parts[2:]
