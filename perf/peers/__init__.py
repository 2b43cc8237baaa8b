"""Triton `embed` beside the embedding servers users pick instead (run.py, servers.py)."""
