"""Batch solving of sweep scenarios: workers, executors (local processes, Ray), resumable result files."""
