"""The Qt layer: the energy-trace viewer (`gui.viewer`, `rig view`) and, later, the runner.

Only talks to `rig` (never the other way): it draws what `rig` computes and measures nothing.
"""
