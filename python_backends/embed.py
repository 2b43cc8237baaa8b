"""`embed`: TEXT in, sentence EMBEDDING out.

Validates and tokenizes every request of a dynamic batch, pads the valid ones to the
batch's longest text, and sends them to the encoder model as ONE BLS call. A request
with bad input gets its own INVALID_ARG; the rest of the batch is still served.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from python_backends import contracts
from python_backends.base import BaseModel, error_response, input_array, ok_response
from python_backends.batching import split_outputs
from python_backends.bls import bls_infer
from python_backends.errors import InvalidInputError, ModelError
from python_backends.params import one_of, parameter
from python_backends.tokenization import (
    TextEncoder,
    TextLimits,
    apply_token_limit,
    decode_texts,
    default_tokenizer_path,
    pad_batch,
)


class EmbedModel(BaseModel):
    """Tokenizer + one BLS call to the encoder named by `target_model`."""

    def setup(self, args: dict[str, str]) -> None:
        self.limits = TextLimits.from_config(self.config)
        tokenizer = parameter(self.config, "tokenizer_path", default_tokenizer_path(), Path)
        self.encoder = TextEncoder(tokenizer, self.limits)
        self.target = parameter(self.config, "target_model", "minilm_onnx",
                                one_of(*contracts.ENCODER_MODELS))
        self.target_version = parameter(self.config, "target_version", -1, int)
        self.target_output = contracts.ENCODER_OUTPUTS[self.target]
        self.log.info(f"serving through {self.target} (version {self.target_version}), "
                      f"limits {self.limits}")

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        rows: dict[int, list[list[int]]] = {}
        for i, request in enumerate(requests):
            try:
                rows[i] = self._tokenize(input_array(request, contracts.TEXT_INPUT))
            except InvalidInputError as err:
                responses[i] = error_response(err)
        if rows:
            for i, outcome in zip(rows, self._embed(list(rows.values()))):
                responses[i] = outcome
        return responses

    def _tokenize(self, raw: np.ndarray) -> list[list[int]]:
        texts = decode_texts(raw, self.limits, contracts.TEXT_INPUT)
        ids = self.encoder.token_ids(texts)
        name = contracts.TEXT_INPUT
        return [apply_token_limit(r, self.limits, j, name) for j, r in enumerate(ids)]

    def infer_encoder(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The encoder's embeddings for one padded batch: one BLS call."""
        out = bls_infer(self.target, feeds, [self.target_output], self.target_version)
        return out[self.target_output]

    def _embed(self, per_request: list[list[list[int]]]) -> list[Any]:
        input_ids, mask = pad_batch([row for rows in per_request for row in rows],
                                    self.encoder.pad_id)
        feeds = dict(zip(contracts.ENCODER_INPUTS, (input_ids, mask)))
        try:
            embeddings = self.infer_encoder(feeds)
        except ModelError as err:
            return [error_response(err)] * len(per_request)
        parts = split_outputs({contracts.EMBEDDING_OUTPUT: embeddings},
                              [len(rows) for rows in per_request])
        return [ok_response(p) for p in parts]
