"""The shared front half of the text models: validate and tokenize every request of a batch."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from python_backends import contracts
from python_backends.base import BaseModel, error_response, input_array
from python_backends.errors import InvalidInputError
from python_backends.params import parameter
from python_backends.structured_log import BATCH_LOG_INTERVAL_S, BatchFacts, BatchLog
from python_backends.tokenization import (
    TextEncoder,
    TextLimits,
    apply_token_limit,
    decode_texts,
    default_tokenizer_path,
)

TokenRows = list[list[int]]


@dataclass
class TextRequest:
    """The valid texts of one request, their token ids, and its priority class."""

    texts: list[str]
    rows: TokenRows
    priority: int


def request_priority(parameters_json: str) -> int:
    """The SDK mirrors Triton's priority into the request parameter `tmr_priority`
    (the Python backend cannot see Triton's own). Absent: the low default level."""
    try:
        value = json.loads(parameters_json or "{}").get(contracts.PRIORITY_PARAMETER)
        return int(value) if value else contracts.DEFAULT_PRIORITY
    except (ValueError, TypeError, AttributeError):
        return contracts.DEFAULT_PRIORITY


class TextModel(BaseModel):
    """A model whose requests carry TEXT; `tokenize_requests` does the per-request checks."""

    def setup(self, args: dict[str, str]) -> None:
        self.limits = TextLimits.from_config(self.config)
        tokenizer = parameter(self.config, "tokenizer_path", default_tokenizer_path(), Path)
        self.encoder = TextEncoder(tokenizer, self.limits)
        self.batch_log = BatchLog(self.log, self.name, self.version, parameter(
            self.config, "batch_log_interval_s", BATCH_LOG_INTERVAL_S, float))
        self.batch = BatchFacts()

    def execute(self, requests: list[Any]) -> list[Any]:
        """`execute_requests`, then one structured log line for the batch."""
        began = time.monotonic()
        self.batch = BatchFacts()
        responses = self.execute_requests(requests)
        self.batch_log.emit(requests, responses, self.batch, began, self.degradation_level())
        return responses

    def degradation_level(self) -> int | None:
        """The level the batch was served at (the router knows it; plain models do not)."""
        return None

    def tokenize_requests(self, requests: list[Any]) -> tuple[list[Any], dict[int, TextRequest]]:
        """Responses with each invalid request's error filled in, and the valid requests."""
        responses: list[Any] = [None] * len(requests)
        valid: dict[int, TextRequest] = {}
        for i, request in enumerate(requests):
            try:
                texts = decode_texts(input_array(request, contracts.TEXT_INPUT), self.limits,
                                     contracts.TEXT_INPUT)
                valid[i] = TextRequest(texts, self._tokenize(texts),
                                       request_priority(request.parameters()))
                self.batch.batch_size += len(texts)
                self.batch.input_bytes += sum(len(t.encode()) for t in texts)
            except InvalidInputError as err:
                responses[i] = error_response(err)
        return responses, valid

    def _tokenize(self, texts: list[str]) -> TokenRows:
        ids = self.encoder.token_ids(texts)
        return [apply_token_limit(r, self.limits, j, contracts.TEXT_INPUT)
                for j, r in enumerate(ids)]
