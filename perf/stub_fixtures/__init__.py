"""Python code of the benchmark fixtures (perf/fixtures): it runs inside their Triton stubs,
which find it on the project root in their PYTHONPATH. Never served by `make serve`."""
