"""The virtual bench's own errors: what went wrong and what to do, like the rig's.

The virtual bench is not part of the rig and does not import it: when it runs as a process
(`python -m virtual_bench`), an error is reported on its stdout as one JSON line
``{"error": message, "hint": hint}`` (and on stderr for a person) and the process exits with
`EXIT_CODE`; the rig turns that line into its own typed error.
"""

from __future__ import annotations

from protocols.errors import ActionableError

#: Exit code of `python -m virtual_bench` when the bench cannot be built (bad input or setup).
EXIT_CODE = 2


class VirtualBenchError(ActionableError):
    """A virtual bench that cannot be built as asked: `message` what, `hint` what to do.

    Its own base on the shared shape: the rig's `BENCH_ERRORS` do not include it (the rig never
    sees it raised, only its JSON line).
    """


class BenchFileError(VirtualBenchError):
    """The bench file does not describe a virtual bench (missing, not TOML, no [sim], bad value)."""


class SetupError(VirtualBenchError):
    """Something the bench needs is not there (the host C shim, the simavr build)."""
