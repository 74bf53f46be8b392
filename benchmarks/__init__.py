"""Benchmarks: simulated fleets racing for ticks, the same Redis's limit, and a peer.

Run ``python -m benchmarks.fleet --quick`` (under two minutes) or ``python -m
benchmarks.fleet`` (the full sweep). See ``benchmarks/RESULTS.md`` for the last full run.
"""
