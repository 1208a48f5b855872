"""Energy traces: their files, their disk space, their analysis and what the viewer shows.

- `files`: trace files (JLS v2, CSV) written and read.
- `space`: a trace's projected size checked against the disk it goes to.
- `analysis`: pure numpy energy analysis over sample arrays (windows, energy, statistics).
- `view`: the energy-trace viewer's data layer for a trace file, computed without a GUI (a run
  folder is opened by `rig.run.view`, a room up).

Above `bench`: rooms from `datasets` up (run, qubo, report, ..., commands) and gui may import
it; it imports `bench` and below.
"""
