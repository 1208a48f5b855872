"""Test sets that go through the DUT: the DCASE-layout ASC data, a SYNTHETIC set in that layout,
the Xylo pre-processing (`afe`) and the test set a bench's run sends (`testsets`).

Above `bench` and `traces`; `run` and every room above it may import it.
"""
