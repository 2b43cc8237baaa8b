"""The text-ranking front model: QUERY and DOCUMENT in, one pair per row; SCORE, SERVED_BY,
TOKENS, TRUNCATED_TOKENS and WINDOWS out.

Validates and tokenizes each pair as the cross-encoder was trained (runtime/pairs.py: one
pair sequence, fitted to the model's length by the request's policy or the model's), then
routes it through the degradation ladder (python_backends/front.py): the encoder gets the
pairs' token ids, masks and segment ids in calls of similar length, each distinct pair
once. A pair's score is its logit, or its best window's, through the model's activation
unless the request asks `raw_scores`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.families.spec import SERVED_BY
from core.families.text_embedding import TOKENS, TRUNCATED_TOKENS, WINDOWS
from core.families.text_ranking import ENCODER_INPUTS, SCORE
from core.rollout import sigmoid
from core.settings import COUNT_ONLY, RAW_SCORES, RankFrontSettings, TextFrontSettings
from python_backends.base import BaseModel, error_response, input_array, ok_response
from python_backends.embed import int_column
from python_backends.front import Prepared, strings_array
from python_backends.front_warmup import WarmedRouter
from python_backends.text_model import TOKENIZER_FILE, TokenMetrics
from runtime.errors import InvalidInputError
from runtime.pairs import (
    DOCUMENT_INPUT,
    QUERY_INPUT,
    PairEncoder,
    fit_pair,
    pair_feeds,
)
from runtime.tokenization import (
    FittedText,
    TextLimits,
    TextModel,
    decode_texts,
    request_options,
)

FEED_NAMES = tuple(t.name for t in ENCODER_INPUTS)  # ids, mask, segment ids


@dataclass
class PairRequest:
    """The pairs of one request, each fitted to the model's length, and whether it asked
    for raw scores."""

    fitted: list[FittedText]
    raw: bool


def raw_scores_asked(parameters: str | None) -> bool:
    """The request's `raw_scores` parameter (false when absent); INVALID_ARG for a value
    that is not a bool, and for `count_only`, which a reranker does not serve."""
    try:
        given = json.loads(parameters or "{}")
    except ValueError:
        given = {}
    given = given if isinstance(given, dict) else {}
    if COUNT_ONLY in given:
        raise InvalidInputError(f"parameter {COUNT_ONLY!r} is a text-embedding model's; a "
                                "reranker scores pairs")
    raw = given.get(RAW_SCORES, False)
    if not isinstance(raw, bool):
        raise InvalidInputError(f"parameter {RAW_SCORES!r} must be true or false; got "
                                f"{json.dumps(raw)}")
    return raw


def paired(queries: list[str], documents: list[str]) -> list[str]:
    """The query of each document, one per row (Triton refuses inputs of different batch
    sizes before a request gets here; this says so again for a caller that skips it)."""
    if len(queries) != len(documents):
        raise InvalidInputError(f"{QUERY_INPUT} has {len(queries)} rows and {DOCUMENT_INPUT} "
                                f"{len(documents)}: send the query once per document")
    return queries


def pair_scores(fitted: Sequence[FittedText], outputs: np.ndarray, activation: str,
                raw: bool) -> np.ndarray:
    """One score per pair [n, 1]: its logit, or its best window's, through `activation`
    unless `raw`."""
    logits, start = [], 0
    for f in fitted:
        logits.append(float(np.max(outputs[start:start + len(f.rows), 0])))
        start += len(f.rows)
    scores = np.array(logits, dtype=np.float64).reshape(-1, 1)
    if not raw and activation == "sigmoid":
        scores = sigmoid(scores)
    return scores.astype(np.float32)


class TextRankingFront:
    """The text-ranking family's front logic (front.FrontLogic): pairs to token rows (a
    chunked pair's windows), rows to padded tensors, logits to scores."""

    def __init__(self, model: BaseModel) -> None:
        self.model = model  # whose batch facts each batch's pairs are counted in
        settings = TextFrontSettings.from_parameters(model.config)
        self.activation = RankFrontSettings.from_parameters(model.config).activation
        self.limits = TextLimits.of(settings)
        self.bucket_waste = settings.length_bucket_waste
        self.max_batch_tokens = settings.max_batch_tokens
        self.tokenizer = PairEncoder(model.artifact_path(TOKENIZER_FILE))
        self.text_model = TextModel(model.name)  # no prompts or sizes: naming one is refused
        self.metrics = TokenMetrics(model.name)

    def prepare_requests(self, requests: list[Any]) -> tuple[list[Any], dict[int, Prepared]]:
        """Each row keyed by its tokens (the cache, duplicates), and split in a rollout by
        its document, so a chunked pair's windows all go to one version."""
        responses: list[Any] = [None] * len(requests)
        valid: dict[int, Prepared] = {}
        for i, request in enumerate(requests):
            try:
                raw = raw_scores_asked(request.parameters())
                options = request_options(request.parameters(), self.limits,
                                          self.tokenizer.specials, self.text_model)
                documents = decode_texts(input_array(request, DOCUMENT_INPUT), self.limits,
                                         DOCUMENT_INPUT)
                queries = paired(decode_texts(input_array(request, QUERY_INPUT), self.limits,
                                              QUERY_INPUT), documents)
                query_ids, document_ids = (self.tokenizer.ids(queries),
                                           self.tokenizer.ids(documents))
                fitted = [fit_pair(q, d, self.tokenizer.frame, self.limits, options, j)
                          for j, (q, d) in enumerate(zip(query_ids, document_ids))]
            except InvalidInputError as err:
                responses[i] = error_response(err)
                continue
            rows = [row for f in fitted for row in f.rows]
            splits = [d for d, f in zip(documents, fitted) for _ in f.rows]
            valid[i] = Prepared([r.digest() for r in rows], rows, PairRequest(fitted, raw),
                                split_keys=splits)
            for f in fitted:
                self.metrics.text(f)
            self.model.batch.batch_size += len(documents)
            self.model.batch.input_bytes += sum(len(q) + len(d)
                                                for q, d in zip(queries, documents))
        return responses, valid

    def row_length(self, row: Any) -> int:
        return len(row)

    def feeds(self, rows: Sequence[Any]) -> dict[str, np.ndarray]:
        arrays = pair_feeds(rows, self.tokenizer.pad_id)
        self.metrics.call(int(arrays[1].sum()), arrays[1].size)
        return dict(zip(FEED_NAMES, arrays))

    def respond(self, request: Prepared[PairRequest], outputs: np.ndarray,
                served_by: list[str]) -> Any:
        """SCORE, SERVED_BY (a pair's first window's), TOKENS, TRUNCATED_TOKENS, WINDOWS."""
        pairs = request.detail.fitted
        starts = np.cumsum([0] + [len(f.rows) for f in pairs[:-1]])
        return ok_response({
            SCORE.name: pair_scores(pairs, outputs, self.activation, request.detail.raw),
            SERVED_BY.name: strings_array([served_by[s] for s in starts]),
            TOKENS.name: int_column([f.encoded_tokens for f in pairs]),
            TRUNCATED_TOKENS.name: int_column([f.truncated for f in pairs]),
            WINDOWS.name: int_column([len(f.rows) for f in pairs]),
        })


class RerankModel(WarmedRouter):
    """Pair tokenizer + the degradation ladder over the primary and fallback encoders."""

    front_logic = TextRankingFront
