"""Code of the benchmark fixtures (perf/fixtures), run in their stubs; never `make serve`d."""
