"""Test sets that go through the DUT."""
