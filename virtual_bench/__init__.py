"""The virtual bench: the other side of the wire without hardware, outside the rig.

Simulated DUTs (the host-built C shim or its Python twin) and energy monitors, an IO manager,
sharing one simulated clock and one power model (`world.World`). Each device sits on its own pty
or socket and speaks its real wire protocol, so the rig talks to it through exactly the code
paths it uses for hardware. Everything measured here is simulated.

It imports only `protocols/` and the `firmware/` it runs, never the rig: it reads its own view
of a bench file (`description.py`), has its own errors (`errors.py`), and runs as a process of
its own, ``python -m virtual_bench BENCH.toml``, which prints its ports as one JSON line.
"""
