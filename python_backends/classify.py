"""The image-classification front model: IMAGE in; CLASS_IDS, LABELS, PROBABILITIES and
SERVED_BY out.

Each row of IMAGE is an encoded JPEG, PNG or WebP (an animated WebP serves its first
frame): raw bytes (a binary tensor), its base64 text, or a base64 data URL
(`data:image/webp;base64,...`, as a browser's canvas writes it); JSON cannot carry bytes.
A row that starts `data:` is always read as a data URL, whose declared type must agree with
its bytes (runtime/image_inputs.py). Every image of a dynamic batch is decoded, checked and
preprocessed into its row of a buffer allocated once at start (runtime/images.py);
a bad image fails its own request with INVALID_ARG naming the row, and the rest of the
batch is served. The batch then goes through the degradation ladder
(python_backends/front.py) to the encoder, whose logits become the `top_k` best classes
(a request may ask for its own `top_k` as a request parameter), with the labels of the
front's version folder. The router's cache (level 3) keys a row by its image's digest.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from core.families.image_classification import (
    CLASS_IDS,
    IMAGE,
    LABELS,
    PIXEL_VALUES,
    PROBABILITIES,
)
from core.families.spec import SERVED_BY
from core.messages import row_ref
from core.settings import TOP_K, ImageFrontSettings
from python_backends.base import BaseModel, error_response, input_array, ok_response
from python_backends.front import ONE_CALL, Prepared, strings_array
from python_backends.front_warmup import WarmedRouter
from runtime.errors import InvalidInputError
from runtime.image_inputs import image_bytes
from runtime.images import ImageBatchBuffer, ImageSpec, top_k

IMAGE_INPUT = IMAGE.name
ENCODER_INPUT = PIXEL_VALUES.name


def requested_top_k(parameters_json: str, default: int, classes: int) -> int:
    """The request's `top_k` parameter, or the model's default; 1..classes."""
    try:
        value = json.loads(parameters_json or "{}").get(TOP_K, default)
    except (ValueError, AttributeError):
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= classes:
        raise InvalidInputError(f"top_k must be an integer from 1 to {classes}, got {value!r}")
    return value


class ImageClassificationFront:
    """The image family's front logic (front.FrontLogic): decode and preprocess into a
    preallocated buffer, hand the buffer's rows to the encoder, top-k of its logits."""

    bucket_waste = ONE_CALL  # images are all one size: a batch is one call
    max_batch_tokens = 0  # no bound on padded tokens: images have none

    def __init__(self, model: BaseModel) -> None:
        self.model = model  # whose batch facts each batch's images are counted in
        self.spec = ImageSpec.from_config(model.config)
        self.labels = model.artifact_path().read_text(encoding="utf-8").splitlines()
        top_k = ImageFrontSettings.from_parameters(model.config).top_k
        self.default_k = min(top_k, len(self.labels))
        self.rows = max(int(model.config.get("max_batch_size", 1)), 1)
        self.buffers = threading.local()

    @property
    def buffer(self) -> ImageBatchBuffer:
        """This thread's buffer: a front's workers (python_backends/workers.py) each fill
        their own while another's rows are being encoded."""
        buffer = getattr(self.buffers, "value", None)
        if buffer is None:
            buffer = self.buffers.value = ImageBatchBuffer(self.spec, self.rows)
        return buffer

    def row_length(self, row: Any) -> int:
        return 1

    def prepare_requests(self, requests: list[Any]) -> tuple[list[Any], dict[int, Prepared]]:
        """Every image into its row of the buffer; a bad one fails its request alone."""
        responses: list[Any] = [None] * len(requests)
        valid: dict[int, Prepared] = {}
        row = 0
        for i, request in enumerate(requests):
            try:
                k = requested_top_k(request.parameters(), self.default_k, len(self.labels))
                rows_in = input_array(request, IMAGE_INPUT).reshape(-1)
                items = [image_bytes(x, self.spec, row_ref(IMAGE_INPUT, n))
                         for n, x in enumerate(rows_in)]
                rows = self.buffer.fill_from(items, row, IMAGE_INPUT)
            except InvalidInputError as err:
                responses[i] = error_response(err)
                continue
            keys = [hashlib.blake2b(data, digest_size=16).hexdigest() for data in items]
            valid[i] = Prepared(keys, rows, k)
            row += len(rows)
            self.model.batch.batch_size += len(items)
            self.model.batch.input_bytes += sum(map(len, items))
        return responses, valid

    def feeds(self, rows: Sequence[Any]) -> dict[str, np.ndarray]:
        """The buffer's rows, as they are when they are consecutive (no copy)."""
        first = rows[0]
        if all(r == first + n for n, r in enumerate(rows)):
            return {ENCODER_INPUT: self.buffer.array[first:first + len(rows)]}
        return {ENCODER_INPUT: self.buffer.array[list(rows)]}

    def respond(self, request: Prepared[int], outputs: np.ndarray, served_by: list[str]) -> Any:
        ids, names, probabilities = top_k(outputs, request.detail, self.labels)
        return ok_response({
            CLASS_IDS.name: ids,
            LABELS.name: np.vectorize(lambda s: s.encode(), otypes=[object])(names),
            PROBABILITIES.name: probabilities,
            SERVED_BY.name: strings_array(served_by),
        })


class ClassifyModel(WarmedRouter):
    """Image decoding + the degradation ladder over the primary and fallback encoders."""

    front_logic = ImageClassificationFront
