"""`embed`: TEXT in, sentence EMBEDDING out.

Validates and tokenizes every request of a dynamic batch, pads the valid ones to the
batch's longest text, and sends them to the encoder model as ONE BLS call. A request
with bad input gets its own INVALID_ARG; the rest of the batch is still served.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from python_backends import contracts
from python_backends.base import error_response, ok_response
from python_backends.batching import split_outputs
from python_backends.bls import bls_infer
from python_backends.errors import ModelError
from python_backends.params import one_of, parameter
from python_backends.text_model import TextModel, TokenRows
from python_backends.tokenization import pad_batch


class EmbedModel(TextModel):
    """Tokenizer + one BLS call to the encoder named by `target_model`."""

    def setup(self, args: dict[str, str]) -> None:
        super().setup(args)
        self.target = parameter(self.config, "target_model", "minilm_onnx",
                                one_of(*contracts.ENCODER_MODELS))
        self.target_version = parameter(self.config, "target_version", -1, int)
        self.target_output = contracts.ENCODER_OUTPUTS[self.target]
        self.log.info(f"serving through {self.target} (version {self.target_version}), "
                      f"limits {self.limits}")

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        responses, rows = self.tokenize_requests(requests)
        if rows:
            for i, outcome in zip(rows, self._embed(list(rows.values()))):
                responses[i] = outcome
        return responses

    def infer_encoder(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The encoder's embeddings for one padded batch: one BLS call."""
        out = bls_infer(self.target, feeds, [self.target_output], self.target_version)
        return out[self.target_output]

    def _embed(self, per_request: list[TokenRows]) -> list[Any]:
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
