"""`tokenize`: TEXT -> input_ids, attention_mask (benchmark fixture for the ensemble variant).

Each execution pads its batch to the batch's longest text, so two executions usually
produce different widths, which the encoder's dynamic batcher cannot merge.
"""

from __future__ import annotations

from typing import Any

from python_backends import contracts
from python_backends.base import BaseModel, error_response, input_array, ok_response
from python_backends.batching import split_outputs
from python_backends.errors import InvalidInputError
from python_backends.tokenization import (
    TextEncoder,
    TextLimits,
    apply_token_limit,
    decode_texts,
    default_tokenizer_path,
    pad_batch,
)


class TokenizeModel(BaseModel):
    """Validates and tokenizes a dynamic batch; no model call."""

    def setup(self, args: dict[str, str]) -> None:
        self.limits = TextLimits.from_config(self.config)
        self.encoder = TextEncoder(default_tokenizer_path(), self.limits)

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        rows: dict[int, list[list[int]]] = {}
        for i, request in enumerate(requests):
            try:
                texts = decode_texts(input_array(request, contracts.TEXT_INPUT), self.limits)
                ids = self.encoder.token_ids(texts)
                rows[i] = [apply_token_limit(r, self.limits, j) for j, r in enumerate(ids)]
            except InvalidInputError as err:
                responses[i] = error_response(err)
        if rows:
            flat = [row for per in rows.values() for row in per]
            ids, mask = pad_batch(flat, self.encoder.pad_id)
            feeds = dict(zip(contracts.ENCODER_INPUTS, (ids, mask)))
            for i, part in zip(rows, split_outputs(feeds, [len(r) for r in rows.values()])):
                responses[i] = ok_response(part)
        return responses
