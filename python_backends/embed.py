"""The text-embedding front model: TEXT in; EMBEDDING, SERVED_BY, TOKENS, TRUNCATED_TOKENS
and WINDOWS out.

Validates, tokenizes and fits every request of a dynamic batch to the model's length
(python_backends/text_model.py: reject, truncate or chunk, the request's choice or the
model's), then routes it through the degradation ladder (python_backends/front.py): the
encoder gets token ids and attention masks, in calls of similar length
(`length_bucket_waste`) bounded by `max_batch_tokens`, each distinct row once. Its
embeddings come back as they are (the pooling and normalisation are in its graph); a
chunked text's window vectors are pooled into one here (tokenization.pool_windows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core import versions
from core.families.spec import SERVED_BY
from core.families.text_embedding import EMBEDDING, TOKENS, TRUNCATED_TOKENS, WINDOWS
from core.families.text_embedding import ENCODER_INPUTS as ENCODER_TENSORS
from core.params import required
from python_backends.base import BaseModel, ok_response
from python_backends.front import Prepared, strings_array
from python_backends.front_warmup import WarmedRouter
from python_backends.text_model import Counted, TextInputs, TextRequest
from runtime.tokenization import pad_batch, pool_windows, row_digest

ENCODER_INPUTS = tuple(t.name for t in ENCODER_TENSORS)  # token ids, attention mask


def int_column(values: Sequence[int]) -> np.ndarray:
    """A [n, 1] INT32 output."""
    return np.array(values, dtype=np.int32).reshape(-1, 1)


class TextEmbeddingFront:
    """The text-embedding family's front logic (front.FrontLogic): texts to token rows
    (a chunked text's windows), rows to padded id and mask tensors, embeddings (pooled
    per text) to the answer."""

    def __init__(self, model: BaseModel) -> None:
        primary = versions.served_config(model.model_dir.parent / required(
            model.config, "primary_model"), model.variant)
        self.inputs = TextInputs(model, int(primary.output[0].dims[-1]))
        self.bucket_waste = self.inputs.settings.length_bucket_waste
        self.max_batch_tokens = self.inputs.settings.max_batch_tokens
        self.normalize = self.inputs.settings.normalize  # chunked texts are pooled as it does

    def prepare_requests(self, requests: list[Any]) -> tuple[list[Any], dict[int, Prepared]]:
        """Each row keyed by its token ids (the cache, duplicates), and split in a rollout
        by its text, so a chunked text's windows all go to one version."""
        responses, valid, counted = self.inputs.tokenize_requests(requests)
        for i, request in counted.items():
            responses[i] = counted_response(request)
        prepared = {}
        for i, r in valid.items():
            rows = r.rows
            splits = [text for text, f in zip(r.texts, r.fitted) for _ in f.rows]
            prepared[i] = Prepared([row_digest(row) for row in rows], rows, r,
                                   split_keys=splits)
        return responses, prepared

    def row_length(self, row: Any) -> int:
        return len(row)

    def feeds(self, rows: Sequence[Any]) -> dict[str, np.ndarray]:
        ids, mask = pad_batch(rows, self.inputs.tokenizer.pad_id)
        self.inputs.metrics.call(int(mask.sum()), mask.size)
        return dict(zip(ENCODER_INPUTS, (ids, mask)))

    def respond(self, request: Prepared[TextRequest], outputs: np.ndarray,
                served_by: list[str]) -> Any:
        """EMBEDDING (a chunked text's windows pooled), SERVED_BY (its first window's),
        TOKENS (the tokens the encoder ran over for each text), TRUNCATED_TOKENS and
        WINDOWS."""
        text = request.detail
        vectors, by, start = [], [], 0
        for fitted in text.fitted:
            n = len(fitted.rows)
            part = outputs[start:start + n]
            vectors.append(part[0] if n == 1 else
                           pool_windows(part, [len(r) for r in fitted.rows], self.normalize))
            by.append(served_by[start])
            start += n
        embeddings = cut(np.stack(vectors).astype(np.float32, copy=False),
                         text.options.dimensions, self.normalize)
        return ok_response({
            EMBEDDING.name: embeddings,
            SERVED_BY.name: strings_array(by),
            TOKENS.name: int_column([f.encoded_tokens for f in text.fitted]),
            TRUNCATED_TOKENS.name: int_column([f.truncated for f in text.fitted]),
            WINDOWS.name: int_column([len(f.rows) for f in text.fitted]),
        })


def cut(vectors: np.ndarray, dimensions: int | None, normalize: bool) -> np.ndarray:
    """The first `dimensions` of each vector (a Matryoshka size), L2-normalised again where
    the model normalises; as they are with no size asked."""
    if dimensions is None:
        return vectors
    part = np.ascontiguousarray(vectors[:, :dimensions])
    if normalize:
        part /= np.maximum(np.linalg.norm(part, axis=1, keepdims=True), 1e-12)
    return part


def counted_response(request: Counted) -> Any:
    """A COUNT_ONLY request's answer: no vectors (EMBEDDING [n, 0]); TOKENS the tokens of
    each text as the model counts them, TRUNCATED_TOKENS what `truncate` would drop,
    WINDOWS the windows `chunk` would make (0: over max_windows_per_text)."""
    n = request.texts
    return ok_response({
        EMBEDDING.name: np.zeros((n, 0), dtype=np.float32),
        SERVED_BY.name: strings_array([COUNTED_BY] * n),
        TOKENS.name: int_column([c.tokens for c in request.counts]),
        TRUNCATED_TOKENS.name: int_column([c.truncated for c in request.counts]),
        WINDOWS.name: int_column([c.windows for c in request.counts]),
    })


COUNTED_BY = "tokenizer"  # SERVED_BY of a count_only answer: no encoder ran


class EmbedModel(WarmedRouter):
    """Tokenizer + the degradation ladder over the primary and fallback encoders."""

    front_logic = TextEmbeddingFront
