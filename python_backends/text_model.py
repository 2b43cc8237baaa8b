"""The shared front half of the text models: validate and tokenize every request of a batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.families.text_embedding import TEXT
from core.settings import TextFrontSettings
from python_backends.base import BaseModel, error_response, input_array
from python_backends.errors import InvalidInputError
from python_backends.tokenization import (
    TextEncoder,
    TextLimits,
    apply_token_limit,
    decode_texts,
)

TokenRows = list[list[int]]
TEXT_INPUT = TEXT.name  # the text families' one input (core/families)
TOKENIZER_FILE = "tokenizer.json"  # when the config names no default_model_filename


@dataclass
class TextRequest:
    """The valid texts of one request and their token ids."""

    texts: list[str]
    rows: TokenRows


class TextInputs:
    """The TEXT input of a model: its limits and tokenizer (the tokenizer.json of its
    version folder), and `tokenize_requests`, the per-request checks."""

    def __init__(self, model: BaseModel) -> None:
        self.model = model  # whose batch facts each batch's texts are counted in
        self.settings = TextFrontSettings.from_parameters(model.config)
        self.limits = TextLimits.of(self.settings)
        self.tokenizer = TextEncoder(model.artifact_path(TOKENIZER_FILE))

    def tokenize_requests(self, requests: list[Any]) -> tuple[list[Any], dict[int, TextRequest]]:
        """Responses with each invalid request's error filled in, and the valid requests."""
        responses: list[Any] = [None] * len(requests)
        valid: dict[int, TextRequest] = {}
        for i, request in enumerate(requests):
            try:
                raw = input_array(request, TEXT_INPUT)
                texts = decode_texts(raw, self.limits, TEXT_INPUT)
                valid[i] = TextRequest(texts, self._tokenize(texts))
                self.model.batch.batch_size += len(texts)
                self.model.batch.input_bytes += sum(map(len, raw.flat))
            except InvalidInputError as err:
                responses[i] = error_response(err)
        return responses, valid

    def _tokenize(self, texts: list[str]) -> TokenRows:
        ids = self.tokenizer.token_ids(texts)
        return [apply_token_limit(r, self.limits, j, TEXT_INPUT)
                for j, r in enumerate(ids)]
