"""Typed errors of the domain layer."""

from __future__ import annotations

from protocols.errors import RigError


class ConfigError(RigError):
    """A bench or sweep file that is missing or wrong: names the file and key."""


class AnalysisError(RigError):
    """A trace that cannot be analysed as asked (no edges, odd edges, missing columns)."""


class StorageError(RigError):
    """The run folder cannot be written (a full disk, a file size limit): names the file."""


class MeasurementFailed(RigError):
    """A measurement ran but failed its own checks (exit code 1)."""

    exit_code = 1


class RunInterrupted(RigError):
    """The user stopped the run (Ctrl-C); the run folder is marked interrupted."""

    exit_code = 130
