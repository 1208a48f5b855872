"""The domain: benches, procedures, energy analysis, run store, CLI."""

__version__ = "0.1.0"
