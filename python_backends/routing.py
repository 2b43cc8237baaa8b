"""What the router does with one dynamic batch at a given level (pure; no Triton imports).

`plan_batch(level, requests, cache, bucket_waste, length)` decides, for every valid
request of the batch, one of three fates: refused (level 4, an operator's "out of
service"), answered from the router's cache (level 3 and up, when every row of the
request is cached under its key: a text, an image's digest), or encoded. The encoded rows
are grouped into encoder calls: length buckets that pad at most `bucket_waste` of the real
size (tokens), each call at most the level's `max_rows` rows. The Triton-facing class
only executes the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from python_backends.batching import length_buckets
from python_backends.degradation import Level, ResponseCache

OUT_OF_SERVICE = "out of service"


@dataclass
class RoutedRequest:
    """The part of a valid request the router needs: a cache key and a row per item."""

    keys: Sequence[str]
    rows: Sequence[Any]


@dataclass
class Plan:
    """The fate of each request of a batch, and the encoder calls to make."""

    refused: dict[int, str] = field(default_factory=dict)  # request -> reason
    cached: dict[int, list[tuple[np.ndarray, str]]] = field(default_factory=dict)
    encoder: str | None = None  # "primary" or "fallback" when anything is encoded
    encoded: list[int] = field(default_factory=list)  # requests encoded, in order
    calls: list[list[int]] = field(default_factory=list)  # row indices (flattened) per call

    def rows(self, requests: Mapping[int, RoutedRequest]) -> list[Any]:
        """The flattened rows of the encoded requests (what `calls` index into)."""
        return [row for i in self.encoded for row in requests[i].rows]


def plan_batch(level: Level, requests: Mapping[int, RoutedRequest], cache: ResponseCache,
               bucket_waste: float, length: Callable[[Any], int] = len) -> Plan:
    """The plan for one batch at `level` (see the module docstring)."""
    plan = Plan()
    if level.encoder is None:
        plan.refused = dict.fromkeys(requests, OUT_OF_SERVICE)
        return plan
    for i, request in requests.items():
        hits = [cache.get(k) for k in request.keys] if level.use_cache else [None]
        if all(h is not None for h in hits):
            plan.cached[i] = hits  # type: ignore[assignment]
        else:
            plan.encoded.append(i)
    if plan.encoded:
        plan.encoder = level.encoder
        lengths = [length(row) for row in plan.rows(requests)]
        plan.calls = length_buckets(lengths, bucket_waste, level.max_rows)
    return plan
