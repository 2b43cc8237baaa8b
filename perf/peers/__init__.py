"""Triton `embed` beside the embedding servers users pick instead, one client, one run
(`python -m perf.peers`: run.py; how each server starts: servers.py; perf/README.md)."""
