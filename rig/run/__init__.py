"""A measurement run: connecting a bench, the ASC procedure, recording, and the run folder.

- `measure`: a bench wired for one measurement; the DUT powered off however the run ends.
- `asc`: the acoustic scene classification procedure and its summary.
- `bench_check`: detect and handshake a bench's devices without measuring.
- `events`: typed events (the QUBO ones too) and the bus that hands them to subscribers.
- `stopping`, `live_power`, `recording`: the Stop button, the live power view, the energy
  monitor pipeline into the trace file.
- `store`, `summary`: the run folder and what `rig show` says of an ASC run.
- `view`: a run folder opened in the energy-trace viewer, its windows marked.
- `console`, `reproduce`: the console view and `rig analyze RUN_FOLDER`.

Above `bench`, `traces` and `datasets`, which it imports; `qubo`, `report`, `mqtt`, `cluster`,
`model`, `commands` and gui may import it.
"""
