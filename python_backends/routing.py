"""What the router does with one dynamic batch at a given level (pure; no Triton imports).

`plan_batch(level, requests, cache, bucket_waste, length, ...)` decides, for every valid
request of the batch, one of three fates: refused (level 4, an operator's "out of
service"), answered from the router's cache (level 3 and up, when every row of the
request is cached under its key: a row's token ids, an image's digest), or encoded. An
encoded row identical to an earlier one of the batch (the same key and the same rollout
split key) is not encoded again: it copies that row's output (`copies`). The other rows
are grouped into encoder calls: length buckets that pad at most `bucket_waste` of the
real size (tokens), each call at most the level's and the encoder's rows and at most
`max_tokens` padded tokens. The Triton-facing class only executes the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from python_backends.degradation import Level, ResponseCache
from runtime.batching import length_buckets

OUT_OF_SERVICE = "out of service"


@dataclass
class RoutedRequest:
    """The part of a valid request the router needs: a cache key and a row per item."""

    keys: Sequence[str]
    rows: Sequence[Any]
    # Per row, what places it in a rollout's split (a chunked text's windows share their
    # text's); None: the row's key.
    split_keys: Sequence[str] | None = field(default=None, kw_only=True)

    def identities(self) -> list[tuple[str, str]]:
        """Per row: two rows with equal identities get equal answers."""
        return list(zip(self.keys, self.split_keys or self.keys))


@dataclass
class Plan:
    """The fate of each request of a batch, and the encoder calls to make."""

    refused: dict[int, str] = field(default_factory=dict)  # request -> reason
    cached: dict[int, list[tuple[np.ndarray, str]]] = field(default_factory=dict)
    encoder: str | None = None  # "primary" or "fallback" when anything is encoded
    encoded: list[int] = field(default_factory=list)  # requests encoded, in order
    calls: list[list[int]] = field(default_factory=list)  # row indices (flattened) per call
    copies: dict[int, int] = field(default_factory=dict)  # a duplicate row -> its original

    def rows(self, requests: Mapping[int, RoutedRequest]) -> list[Any]:
        """The flattened rows of the encoded requests (what `calls` index into)."""
        return [row for i in self.encoded for row in requests[i].rows]


def plan_batch(level: Level, requests: Mapping[int, RoutedRequest], cache: ResponseCache,
               bucket_waste: float, length: Callable[[Any], int] = len, *,
               max_rows: int | None = None, max_tokens: int = 0,
               dedupe: bool = False) -> Plan:
    """The plan for one batch at `level` (see the module docstring); `max_rows` is the
    encoder's bound on a call's rows (the level may set a smaller one)."""
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
        rows = plan.rows(requests)
        unique = list(range(len(rows)))
        if dedupe:
            identities = [ident for i in plan.encoded for ident in requests[i].identities()]
            plan.copies, unique = duplicates(identities)
        caps = [n for n in (level.max_rows, max_rows) if n]
        groups = length_buckets([length(rows[j]) for j in unique], bucket_waste,
                                min(caps) if caps else None, max_tokens)
        plan.calls = [[unique[g] for g in group] for group in groups]
    return plan


def duplicates(identities: Sequence[Any]) -> tuple[dict[int, int], list[int]]:
    """({duplicate index: the first index with its identity}, the first indices)."""
    first: dict[Any, int] = {}
    copies: dict[int, int] = {}
    for j, identity in enumerate(identities):
        if identity in first:
            copies[j] = first[identity]
        else:
            first[identity] = j
    return copies, list(first.values())


@dataclass(frozen=True)
class EncoderCall:
    """One encoder call of a batch's plan: its rows (indices into the batch's rows), the
    side of a rollout that answers them (the stable version, or the candidate), and
    whether a stable call is shadowed to the candidate too (level 0 of a rollout)."""

    rows: tuple[int, ...]
    canary: bool = False
    shadow: bool = False


def plan_calls(groups: Sequence[Sequence[int]], keys: Sequence[str],
               split: Callable[[list[str]], list[bool]] | None,
               may_shadow: bool) -> list[EncoderCall]:
    """The calls of a batch, as values: each group of rows (a length bucket) is one call,
    or during a rollout (`split`: which rows, by their split key, the candidate answers)
    the candidate's rows then the stable rows, as two calls; the stable calls of a rollout
    are shadowed when `may_shadow` (level 0). Without a rollout nothing is shadowed."""
    calls: list[EncoderCall] = []
    for group in groups:
        if split is None:
            calls.append(EncoderCall(tuple(group)))
            continue
        mask = split([keys[i] for i in group])
        canary = tuple(i for i, m in zip(group, mask) if m)
        stable = tuple(i for i, m in zip(group, mask) if not m)
        calls += [EncoderCall(rows, side, shadow=not side and may_shadow)
                  for rows, side in ((canary, True), (stable, False)) if rows]
    return calls
