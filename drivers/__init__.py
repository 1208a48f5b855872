"""Transports and devices: serial transports, DUT clients, energy-monitor drivers."""
