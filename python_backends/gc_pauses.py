"""Python GC pauses, tuned by a config parameter.

The seeds (000_*.txt section 5.2) warn that automatic collections during peaks cause
latency spikes. `gc_policy` chooses what a model does after its setup:

    default   CPython's automatic GC as is
    freeze    gc.freeze() once setup is done: the objects built by `initialize` (the
              tokenizer, onnxruntime, numpy, the whole import graph) move to a permanent
              generation that no collection traverses again, so a full collection walks
              only what requests allocate

docs/reliability.md has the measurement that chose the shipped policy (its timer of every
collection, `GcPauses`, is retired with the in-process load client: `git show
fecba36:python_backends/gc_pauses.py`).
"""

from __future__ import annotations

import gc

from core.settings import GC_POLICIES

POLICIES = GC_POLICIES  # core/settings.py, where a config's gc_policy is read


def apply_policy(policy: str) -> None:
    """What the model does once its setup is done (see the module docstring)."""
    if policy not in POLICIES:
        raise ValueError(f"gc_policy {policy!r} is not one of {', '.join(POLICIES)}")
    if policy == "freeze":
        gc.collect()
        gc.freeze()
