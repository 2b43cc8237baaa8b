"""Triton `embed` beside the embedding servers users pick instead, one client, one run.

- `run.run_peers()` -> `run.PeersResult`: start Triton and the peers on free ports, sweep
  them in mirrored rounds, keep the best round per point (`python -m perf.peers`);
- `servers`: how each server starts and stops and how perf/locustfile.py asks it (the
  load is Locust's, perf/locust_run.py); the peers come from `make peers`; the pure parts
  (best of rounds, goodput, the table) are perf.stats;
- core/cpu_share.py: the share of the cores other work used during a point;
- run in the peers' own venvs, importing no project module: `batcher_server.py`,
  `naive_server.py`, `ort_text.py`; run with the project venv: `infinity_model.py`,
  `share_torch.py`.
"""
