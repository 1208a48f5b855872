"""The ASC task's data as it crosses the DUT protocol: what one input is and what the scores mean.

One input is one second of mono 16-bit audio at `RATE_HZ` (`SAMPLES` little-endian int16, i.e.
16,000 bytes through `db`/`bload`); `results%` prints one score per class, in `CLASSES` order.
The rig's data sets and the DUT side (the C shim, its Python reference, the virtual bench) share
these numbers from here.
"""

#: The four NeuroBench ASC scenes, in label order.
CLASSES = ("airport", "street_traffic", "bus", "park")
RATE_HZ = 8000
#: Samples per input: one second.
SAMPLES = RATE_HZ
