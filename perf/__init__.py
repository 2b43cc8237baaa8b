"""Benchmarks, not tests: perf_analyzer sweeps, Locust scenarios (priority, overload),
memory per process, peers side by side; every figure a ratio to a baseline of the same
run. Imports core/, server/ and the SDK; nothing imports perf/."""
