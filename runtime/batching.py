"""Pure helpers to run several requests as one runtime call: group, concatenate, split."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise

import numpy as np

Feeds = Mapping[str, np.ndarray]


def shape_key(feeds: Feeds) -> tuple:
    """Requests with equal non-batch shapes and dtypes can be concatenated."""
    return tuple((name, a.shape[1:], a.dtype.str) for name, a in sorted(feeds.items()))


def group_by_shape(requests: Sequence[Feeds]) -> list[list[int]]:
    """Indices of requests grouped by `shape_key`, in first-seen order."""
    groups: dict[tuple, list[int]] = {}
    for i, feeds in enumerate(requests):
        groups.setdefault(shape_key(feeds), []).append(i)
    return list(groups.values())


def concat_feeds(requests: Sequence[Feeds]) -> tuple[dict[str, np.ndarray], list[int]]:
    """One feed dict with every request's rows, and each request's row count."""
    sizes = [len(next(iter(feeds.values()))) for feeds in requests]
    if len(requests) == 1:
        return dict(requests[0]), sizes
    names = requests[0].keys()
    return {n: np.concatenate([f[n] for f in requests], axis=0) for n in names}, sizes


def split_outputs(outputs: Feeds, sizes: Sequence[int]) -> list[dict[str, np.ndarray]]:
    """Undo `concat_feeds` on the outputs: one dict of row slices per request."""
    total = sum(sizes)
    for name, array in outputs.items():
        if len(array) != total:
            raise ValueError(f"output {name!r} has {len(array)} rows, expected {total}")
    bounds = np.cumsum([0, *sizes])
    return [{n: a[lo:hi] for n, a in outputs.items()} for lo, hi in pairwise(bounds)]


def length_buckets(lengths: Sequence[int], max_waste: float,
                   max_rows: int | None = None, max_tokens: int = 0) -> list[list[int]]:
    """Row indices grouped so that padding each group to its longest row wastes at most
    `max_waste` of the group's real tokens, no group exceeds `max_rows` rows, and (when
    `max_tokens` > 0) no group's padded size, longest x rows, exceeds `max_tokens`.

    Rows are taken shortest first; a row joins the current group while
    longest x rows <= (1 + max_waste) x real tokens and the other bounds hold; a row
    alone always makes a group. `max_waste` < 0 disables bucketing (rows in their order,
    split only by the row and token bounds). Every index appears exactly once.
    """
    if max_waste < 0:
        order = list(range(len(lengths)))
    else:
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    step = max_rows or max(len(order), 1)
    groups: list[list[int]] = []
    tokens = longest = 0
    for i in order:
        group = groups[-1] if groups else None
        widest = max(longest, lengths[i])
        fits = (group is not None and len(group) < step
                and (max_waste < 0 or
                     lengths[i] * (len(group) + 1) <= (1 + max_waste) * (tokens + lengths[i]))
                and (max_tokens <= 0 or widest * (len(group) + 1) <= max_tokens))
        if fits:
            group.append(i)
            tokens += lengths[i]
            longest = widest
        else:
            groups.append([i])
            tokens = longest = lengths[i]
    return groups
