"""What a rerank call returns: its documents best first (`Ranked`), cut to `top_n`.

    rank_order     the order of the documents by score, best first, ties by index
    RerankResult   rerank_with_info(): the ranking, every score in input order, and per
                   document what served it, its tokens, the tokens truncation dropped and
                   its windows
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tmr_client import contract
from tmr_client.errors import InvalidInputError
from tmr_client.results import ServedRows, identity, integers, served_texts
from tmr_client.shaping import TOKENS_OUTPUT, TRUNCATED_OUTPUT, WINDOWS_OUTPUT, is_int_at_least


@dataclass(frozen=True)
class Ranked:
    """One document of a ranking: its index in the call's documents, its score (the
    model's relevance, or its logit with `raw_scores=True`) and the document as given."""

    index: int
    score: float
    document: str | bytes


def check_top_n(top_n: object) -> None:
    """Refuse a `top_n` that is neither None nor an integer >= 1, before anything is sent."""
    if top_n is not None and not is_int_at_least(top_n, 1):
        raise InvalidInputError(f"top_n must be an integer >= 1 or None, got {top_n!r}")


def rank_order(scores: np.ndarray, top_n: int | None = None) -> list[int]:
    """The indexes of `scores`, best first, equal scores in input order (a NaN last), the
    first `top_n` (None: all)."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    return [int(i) for i in order[:top_n]]


@dataclass
class RerankResult(ServedRows):
    """The documents best first (`ranked`, at most `top_n`), and in input order every
    document's score and, when the model says, what served it, its tokens (the query's
    included), the tokens truncation dropped and its windows; each chunk's model version
    and request id."""

    ranked: list[Ranked]
    scores: np.ndarray  # float32, one per document, in input order
    served_by: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    truncated_tokens: list[int] = field(default_factory=list)
    windows: list[int] = field(default_factory=list)
    model_name: str = ""
    model_versions: list[str] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)


def ranking(scores: np.ndarray, documents: Sequence[str | bytes],
            top_n: int | None = None) -> list[Ranked]:
    """The documents by `scores` (rank_order), each with its index and score."""
    return [Ranked(i, float(scores[i]), documents[i]) for i in rank_order(scores, top_n)]


def rerank_result(answers: Sequence[Any], request_ids: list[str], *,
                  documents: Sequence[str | bytes], top_n: int | None) -> RerankResult:
    """One RerankResult from the InferResults of the chunks, in order."""
    scores = np.concatenate([a.as_numpy(contract.SCORE) for a in answers]).reshape(-1)
    return RerankResult(
        ranking(scores, documents, top_n), scores.astype(np.float32),
        served_by=served_texts(answers), tokens=integers(answers, TOKENS_OUTPUT),
        truncated_tokens=integers(answers, TRUNCATED_OUTPUT),
        windows=integers(answers, WINDOWS_OUTPUT), **identity(answers, request_ids))
