"""The tabular-classification front model (a third family, registered by a test): FEATURES
in, one CSV row of numbers per request row; PROBABILITIES (the softmax of the encoder's
logits) and SERVED_BY out. A row that is not `columns` finite numbers fails its own
request with INVALID_ARG naming the row; the rest of the batch is served."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from core.families.spec import SERVED_BY
from core.families.tabular_classification import (
    COLUMNS_PARAMETER,
    ENCODER_INPUT,
    FEATURES,
    PROBABILITIES,
)
from core.messages import row_ref
from core.params import required
from python_backends.base import BaseModel, error_response, input_array, ok_response
from python_backends.front import ONE_CALL, Prepared, strings_array
from python_backends.front_warmup import WarmedRouter
from runtime.errors import InvalidInputError


def parse_row(data: Any, columns: int, where: str) -> np.ndarray:
    """One CSV row of `columns` finite numbers as float32; InvalidInputError otherwise."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
    try:
        values = np.array([float(v) for v in text.split(",")], dtype=np.float32)
    except ValueError:
        raise InvalidInputError(f"{where}: not a CSV row of numbers: {text[:40]!r}") from None
    if values.size != columns or not np.isfinite(values).all():
        raise InvalidInputError(f"{where}: {values.size} values; the model takes {columns} "
                                f"finite numbers")
    return values


class TabularFront:
    """front.FrontLogic of the family: parse, stack, softmax."""

    bucket_waste = ONE_CALL  # every row is the same size: a batch is one call
    max_batch_tokens = 0

    def __init__(self, model: BaseModel) -> None:
        self.model = model
        self.columns = int(required(model.config, COLUMNS_PARAMETER))

    def row_length(self, row: Any) -> int:
        return 1

    def prepare_requests(self, requests: list[Any]) -> tuple[list[Any], dict[int, Prepared]]:
        responses: list[Any] = [None] * len(requests)
        valid: dict[int, Prepared] = {}
        for i, request in enumerate(requests):
            try:
                items = input_array(request, FEATURES.name).reshape(-1)
                rows = [parse_row(x, self.columns, row_ref(FEATURES.name, n))
                        for n, x in enumerate(items)]
            except InvalidInputError as err:
                responses[i] = error_response(err)
                continue
            keys = [hashlib.blake2b(r.tobytes(), digest_size=16).hexdigest() for r in rows]
            valid[i] = Prepared(keys, rows, None)
            self.model.batch.batch_size += len(rows)
        return responses, valid

    def feeds(self, rows: Sequence[Any]) -> dict[str, np.ndarray]:
        return {ENCODER_INPUT.name: np.stack(rows)}

    def respond(self, request: Prepared[None], outputs: np.ndarray,
                served_by: list[str]) -> Any:
        logits = outputs.astype(np.float64)
        exp = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities = (exp / exp.sum(axis=1, keepdims=True)).astype(np.float32)
        return ok_response({PROBABILITIES.name: probabilities,
                            SERVED_BY.name: strings_array(served_by)})


class TabularModel(WarmedRouter):
    """The degradation router with the tabular front logic."""

    front_logic = TabularFront
