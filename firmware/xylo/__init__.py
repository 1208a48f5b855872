"""Xylo Audio 2 DUT shim (XyloSim or an HDK) and its network-specification file format."""
