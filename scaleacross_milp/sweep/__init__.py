"""Scenario sweeps: the sweep file contract, axes over an instance, expansion into scenarios with stable ids."""
