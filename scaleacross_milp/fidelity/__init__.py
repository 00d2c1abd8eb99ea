"""Fidelity against published training runs: one CSV row -> a single-building instance and fixed layout, priced
by the verifier (what `scaleacross-milp evaluate` runs), converted into the row's published metric."""
