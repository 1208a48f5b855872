"""The virtual bench: simulated DUT and energy monitor sharing one clock and one power model.

Each simulated device sits on its own pty and speaks its real wire protocol, so the rig talks to
it through exactly the code paths it uses for hardware. Everything measured here is simulated.
"""
