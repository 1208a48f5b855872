"""The submission report: rig report."""
