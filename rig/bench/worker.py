"""A worker file's `[worker]` table: which instruments a rig host owns on a sweep cluster.

Resource names are one unit per instrument: `cpu-tabu`, `cpu-sa` (the D-Wave samplers on that
host), `loihi2` (the Lava shim, or the chip behind it), `xylo` (a Xylo bench), `host-power` (the
host's power counters, RAPL or NVML). They live with the bench files that name them;
`rig/cluster/resources.py` schedules sweep points on them.
"""

from __future__ import annotations

import re
from typing import Any

from protocols.errors import quoted
from rig.errors import ConfigError

#: The QUBO systems a sweep or worker file may name (rig/qubo/suts.py opens each).
SUT_NAMES = ("cpu-tabu", "cpu-sa", "loihi2")
#: The host's power counters (RAPL, NVML): one reading for the whole host.
HOST_POWER = "host-power"
#: SUTs a sweep can measure (each one a resource of the same name).
SUT_RESOURCES = SUT_NAMES
#: Every resource name a worker may own (a typo such as cpu_tabu is refused, not ignored).
KNOWN_RESOURCES = (*SUT_RESOURCES, "xylo", HOST_POWER)

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def parse_resources(text: str, where: str = "--resources") -> dict[str, int]:
    """`cpu-tabu=1,cpu-sa=1,host-power=1` -> {"cpu-tabu": 1, ...} (checked)."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, eq, count = part.partition("=")
        name = name.strip()
        if not eq:
            count = "1"  # `loihi2` alone means one
        try:
            value = int(count.strip())
        except ValueError:
            raise ConfigError(f"{where}: {quoted(part)}: expected NAME=1, found count "
                              f"{quoted(count)}",
                              hint="e.g. --resources cpu-tabu=1,cpu-sa=1,host-power=1") from None
        out[name] = value
    return check_resources(out, where)


def check_resources(resources: dict[str, Any], where: str) -> dict[str, int]:
    """Known names, one unit each (one instrument measures one point at a time)."""
    if not resources:
        raise ConfigError(f"{where}: no resources given",
                          hint="name what this host owns, e.g. cpu-tabu=1,cpu-sa=1,host-power=1")
    out: dict[str, int] = {}
    for name, value in resources.items():
        if not isinstance(name, str) or not _NAME.match(name) or name not in KNOWN_RESOURCES:
            raise ConfigError(f"{where}: unknown resource {quoted(name)}",
                              hint=f"known resources: {', '.join(KNOWN_RESOURCES)}")
        if isinstance(value, bool) or value != 1:
            raise ConfigError(
                f"{where}: {name} = {quoted(value)}: expected 1",
                hint="one instrument measures one point at a time; a second instrument of the "
                     "same kind is a second worker (on its own host)",
            )
        out[name] = 1
    return out
