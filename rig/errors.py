"""Typed errors of the domain layer, and the bases of every error the bench raises on purpose."""

from __future__ import annotations

from drivers.errors import DriverError
from protocols.errors import ActionableError, ProtocolError


class RigError(ActionableError):
    """The rig's base: a failure the user can act on, raised above the drivers."""


#: Every error the bench (rig, drivers, protocols) raises on purpose: catch this where a site means
#: "anything the bench can raise"; each layer keeps its own base, so none subclasses a rig class.
BENCH_ERRORS: tuple[type[RigError], type[DriverError], type[ProtocolError]] = (
    RigError, DriverError, ProtocolError)


class ConfigError(RigError):
    """A bench or sweep file that is missing or wrong: names the file and key."""


class AnalysisError(RigError):
    """A trace that cannot be analysed as asked (no edges, odd edges, missing columns)."""


class StorageError(RigError):
    """The run folder cannot be written (a full disk, a file size limit): names the file."""


class NonFiniteError(RigError):
    """A figure that is NaN or infinite where only a finite number can be (read from a run
    folder, or about to be written as JSON, which has neither): names the file, the record and
    the field."""


class MeasurementFailed(RigError):
    """A measurement ran but failed its own checks (exit code 1)."""

    exit_code = 1


class RunInterrupted(RigError):
    """The user stopped the run (Ctrl-C); the run folder is marked interrupted."""

    exit_code = 130
