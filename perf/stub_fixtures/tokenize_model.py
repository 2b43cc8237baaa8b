"""`tokenize`: TEXT -> input_ids, attention_mask (benchmark fixture for the ensemble variant).

Each execution pads its batch to the batch's longest text, so two executions usually
produce different widths, which the encoder's dynamic batcher cannot merge.
"""

from __future__ import annotations

from typing import Any

from python_backends.base import BaseModel, ok_response
from python_backends.embed import ENCODER_INPUTS
from python_backends.text_model import TextInputs
from runtime.batching import split_outputs
from runtime.tokenization import pad_batch


class TokenizeModel(BaseModel):
    """Validates and tokenizes a dynamic batch; no model call."""

    def setup(self, args: dict[str, str]) -> None:
        self.inputs = TextInputs(self, 0)  # no encoder: no embedding size

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        responses, valid, _ = self.inputs.tokenize_requests(requests)
        if valid:
            flat = [row for req in valid.values() for row in req.rows]
            feeds = dict(zip(ENCODER_INPUTS, pad_batch(flat, self.inputs.tokenizer.pad_id)))
            sizes = [len(req.rows) for req in valid.values()]
            for i, part in zip(valid, split_outputs(feeds, sizes)):
                responses[i] = ok_response(part)
        return responses
