"""A submission anyone can verify: the run ledger, signed bundles and their verification."""
