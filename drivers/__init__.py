"""Transports and devices: byte transports with deadlines (`transport`, `process`), DUT clients
(`dut`), the IO manager (`io_manager`) and energy-monitor drivers (`emon`).

Imports only `protocols`; `rig` imports it.
"""
