"""A call's rows cut into requests: by the model's rows per request and by bytes.

A bulk call is many short requests that higher priorities can pass, each at most the rows
the model takes at once (tmr_client.model_info) and never over the protocol's request size
(tmr_client.limits: Triton 2.51's HTTP server dies on a body of about 4 MiB). Each
request gets its own id, which the results keep.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence

import numpy as np
from tmr_client.errors import RequestTooLargeError
from tmr_client.limits import MAX_REQUEST_BYTES

ENVELOPE_BYTES = 64 * 1024  # the request's header (names, shapes, parameters), generously
LENGTH_PREFIX_BYTES = 4  # before each element of a BYTES tensor


def chunks(n: int, size: int) -> Iterator[slice]:
    """Slices of at most `size` rows covering range(n)."""
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def too_large(label: str, index: int, size: int, budget: int,
              protocol: str) -> RequestTooLargeError:
    """The error for a row that cannot fit one request alone."""
    hint = " (gRPC takes larger requests)" if protocol == "http" else ""
    return RequestTooLargeError(f"{label}[{index}] is {size} bytes; one {protocol} request "
                                f"holds at most {budget} bytes of data{hint}")


def byte_chunks(sizes: Sequence[int], max_rows: int, max_bytes: int,
                protocol: str = "http", label: str = "row", columns: int = 1) -> list[slice]:
    """Consecutive slices of rows, each at most `max_rows` rows whose encoded sizes (plus
    4 bytes per element, the BYTES length prefix, `columns` to a row) fit `max_bytes` less
    the envelope. A row that cannot fit alone raises RequestTooLargeError naming its
    index and the limit."""
    budget = max_bytes - ENVELOPE_BYTES
    slices, start, used = [], 0, 0
    for i, size in enumerate(sizes):
        cost = size + LENGTH_PREFIX_BYTES * columns
        if cost > budget:
            raise too_large(label, i, size, budget, protocol)
        if i > start and (i - start >= max_rows or used + cost > budget):
            slices.append(slice(start, i))
            start, used = i, 0
        used += cost
    if start < len(sizes):
        slices.append(slice(start, len(sizes)))
    return slices


def new_request_id() -> str:
    return uuid.uuid4().hex


def plan(rows: np.ndarray, max_rows: int, protocol: str,
         label: str) -> list[tuple[slice, str]]:
    """(rows, request id) of each request for the [n, k] BYTES `rows` (one input a column)."""
    sizes = [sum(len(value) for value in row) for row in rows]
    return [(piece, new_request_id()) for piece in
            byte_chunks(sizes, max_rows, MAX_REQUEST_BYTES[protocol], protocol, label,
                        rows.shape[1])]
