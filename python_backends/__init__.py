"""What runs inside Triton's Python stub: the shared model skeleton (base.py), the
fronts' router and its worker pools (front.py, workers.py), the family fronts, the
Python-based encoder backends, health and metrics. Imports core/ and runtime/, never
server/."""
