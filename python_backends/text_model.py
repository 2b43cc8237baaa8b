"""The shared front half of the text models: validate and tokenize every request of a batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from python_backends import contracts
from python_backends.base import BaseModel, error_response, input_array
from python_backends.errors import InvalidInputError
from python_backends.params import parameter
from python_backends.tokenization import (
    TextEncoder,
    TextLimits,
    apply_token_limit,
    decode_texts,
    default_tokenizer_path,
)

TokenRows = list[list[int]]


class TextModel(BaseModel):
    """A model whose requests carry TEXT; `tokenize_requests` does the per-request checks."""

    def setup(self, args: dict[str, str]) -> None:
        self.limits = TextLimits.from_config(self.config)
        tokenizer = parameter(self.config, "tokenizer_path", default_tokenizer_path(), Path)
        self.encoder = TextEncoder(tokenizer, self.limits)

    def tokenize_requests(self, requests: list[Any]) -> tuple[list[Any], dict[int, TokenRows]]:
        """Responses with each invalid request's error filled in, and the valid requests' rows."""
        responses: list[Any] = [None] * len(requests)
        rows: dict[int, TokenRows] = {}
        for i, request in enumerate(requests):
            try:
                rows[i] = self._tokenize(input_array(request, contracts.TEXT_INPUT))
            except InvalidInputError as err:
                responses[i] = error_response(err)
        return responses, rows

    def _tokenize(self, raw: Any) -> TokenRows:
        name = contracts.TEXT_INPUT
        ids = self.encoder.token_ids(decode_texts(raw, self.limits, name))
        return [apply_token_limit(r, self.limits, j, name) for j, r in enumerate(ids)]
