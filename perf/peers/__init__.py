"""Triton `embed` beside the embedding servers users pick instead, one client, one run.

- `run.run_peers()` -> `run.PeersResult`: start Triton and the peers on free ports, sweep
  them in mirrored rounds, keep the best round per point (`python -m perf.peers`);
- `load`: the HTTP JSON sender for perf.load's closed loop and the request shapes
  (`triton_endpoint`, `openai_endpoint`, `infer_endpoint`), usable against any URL;
  the pure parts (percentiles, best of rounds, goodput, the table) are perf.stats;
- `servers`: how each server starts and stops; the peers come from `make peers`;
- run in the peers' own venvs, importing no project module: `batcher_server.py`,
  `naive_server.py`, `ort_text.py`; run with the project venv: `infinity_model.py`,
  `share_torch.py`.
"""
