"""The text-embedding front model: TEXT in; EMBEDDING, SERVED_BY and TOKENS out.

Validates and tokenizes every request of a dynamic batch (python_backends/text_model.py),
then routes it through the degradation ladder (python_backends/router.py): the encoder
gets token ids and attention masks, in calls of similar length (`length_bucket_waste`),
and its embeddings come back as they are (the pooling and normalisation are in its graph).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.families.spec import SERVED_BY
from core.families.text_embedding import EMBEDDING, TOKENS
from core.families.text_embedding import ENCODER_INPUTS as ENCODER_TENSORS
from python_backends.base import BaseModel, ok_response
from python_backends.front_warmup import WarmedRouter
from python_backends.router import Prepared, strings_array
from python_backends.text_model import TextInputs
from python_backends.tokenization import pad_batch

ENCODER_INPUTS = tuple(t.name for t in ENCODER_TENSORS)  # token ids, attention mask


class TextEmbeddingFront:
    """The text-embedding family's front logic (router.FrontLogic): texts to token rows,
    rows to padded id and mask tensors, embeddings to the answer."""

    def __init__(self, model: BaseModel) -> None:
        self.inputs = TextInputs(model)
        self.bucket_waste = self.inputs.settings.length_bucket_waste

    def prepare_requests(self, requests: list[Any]) -> tuple[list[Any], dict[int, Prepared]]:
        responses, valid = self.inputs.tokenize_requests(requests)
        return responses, {i: Prepared(r.texts, r.rows) for i, r in valid.items()}

    def row_length(self, row: Any) -> int:
        return len(row)

    def feeds(self, rows: Sequence[Any]) -> dict[str, np.ndarray]:
        return dict(zip(ENCODER_INPUTS, pad_batch(rows, self.inputs.tokenizer.pad_id)))

    def respond(self, request: Prepared, outputs: np.ndarray, served_by: list[str]) -> Any:
        """EMBEDDING, SERVED_BY and TOKENS (each text's tokens, as the model counted them)."""
        tokens = np.array([[len(row)] for row in request.rows], dtype=np.int32)
        return ok_response({EMBEDDING.name: outputs, SERVED_BY.name: strings_array(served_by),
                            TOKENS.name: tokens})


class EmbedModel(WarmedRouter):
    """Tokenizer + the degradation ladder over the primary and fallback encoders."""

    front_logic = TextEmbeddingFront
