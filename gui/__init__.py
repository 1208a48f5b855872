"""The Qt layer: the runner (`gui.runner`, `rig gui`) and the energy-trace viewer (`gui.viewer`,
`rig view`).

The runner's panels: `bench_panel` (the bench file), `devices_panel` (detect and handshake),
`run_session` with `live_plot` (a run as it goes), `results_panel` (a run folder's figures);
`background` runs short jobs off the Qt thread; `commands` registers `rig view` and `rig gui`.

Only talks to `rig` (never the other way): it draws what `rig` computes and measures nothing.
"""
