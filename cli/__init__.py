"""`tmr`: the one command line; the only package allowed to import every other."""
