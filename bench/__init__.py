"""Benchmarks: each module prints one JSON line (most also write bench/results/).

Run one as a module from the repository root: `python -m bench.NAME [flags]`. Each module's
docstring says what it measures, then `Usage:` and `Target:`; `make bench` runs them all.
Cluster benchmarks use the test harness (`e2e.harness`); nothing under e2e/ imports bench.
"""
