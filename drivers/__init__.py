"""Transports and devices: byte transports with deadlines (`transport`, `process`), DUT clients
(`dut`), the IO manager (`io_manager`), energy-monitor drivers (`emon`), and `file_lock`
(one owner per file across processes: a host's power counters, a sweep folder).

Imports only `protocols`; `rig` imports it.
"""
