"""The layer below every other package: facts each of them reads (no project imports)."""
