"""Calibration of collective times from nccl-tests logs: parse, fit, profile, interpolate, linearise."""
