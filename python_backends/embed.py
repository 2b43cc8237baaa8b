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

from python_backends.base import ok_response
from python_backends.router import FamilyRouter, Prepared, strings_array
from python_backends.text_model import TextModel
from python_backends.tokenization import pad_batch

ENCODER_INPUTS = ("input_ids", "attention_mask")
EMBEDDING_OUTPUT = "EMBEDDING"
SERVED_BY_OUTPUT = "SERVED_BY"
TOKENS_OUTPUT = "TOKENS"


class EmbedModel(TextModel, FamilyRouter):
    """Tokenizer + the degradation ladder over the primary and fallback encoders."""

    bucket_default = 0.25

    def setup(self, args: dict[str, str]) -> None:
        TextModel.setup(self, args)
        FamilyRouter.setup(self, args)

    def prepare_requests(self, requests: list[Any]) -> tuple[list[Any], dict[int, Prepared]]:
        responses, valid = self.tokenize_requests(requests)
        return responses, {i: Prepared(r.texts, r.rows) for i, r in valid.items()}

    def row_length(self, row: Any) -> int:
        return len(row)

    def feeds(self, rows: Sequence[Any]) -> dict[str, np.ndarray]:
        return dict(zip(ENCODER_INPUTS, pad_batch(rows, self.encoder.pad_id)))

    def respond(self, request: Prepared, outputs: np.ndarray, served_by: list[str]) -> Any:
        """EMBEDDING, SERVED_BY and TOKENS (each text's tokens, as the model counted them)."""
        tokens = np.array([[len(row)] for row in request.rows], dtype=np.int32)
        return ok_response({EMBEDDING_OUTPUT: outputs, SERVED_BY_OUTPUT: strings_array(served_by),
                            TOKENS_OUTPUT: tokens})
