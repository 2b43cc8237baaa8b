"""Benchmarks, not tests (sweeps, scenarios, memory, peers); nothing imports perf/."""
