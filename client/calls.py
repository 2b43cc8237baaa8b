"""One SDK call as a value: its model, rows, options and deadline, cut into requests.

`ClientBase` starts a `Call` from a verb's arguments; a client sends each `Request` of it
and asks `ClientBase.on_failure` what to do when one fails. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
from tmr_client.chunking import plan
from tmr_client.deadlines import Deadline
from tmr_client.errors import DeadlineExceededError, InvalidInputError, TritonClientError
from tmr_client.model_info import ModelInfo
from tmr_client.options import CallOptions
from tmr_client.shaping import request_for


@dataclass(frozen=True)
class Request:
    """One request of a call: its inputs and requested outputs (tritonclient's), its id."""

    inputs: list[Any]
    outputs: list[Any]
    request_id: str


@dataclass(frozen=True)
class Call:
    """One SDK call: the model (a lane's, once routed), the rows to send and the `inputs`
    they go under (one name for all of the rows, else one per column: a rerank call's
    QUERY and DOCUMENT), the outputs to ask for (those of the model's that it has), the
    options and the deadline, the protocol, whose request size bounds each request, and
    what puts the chunks' answers together (`build(answers, request_ids)`,
    tmr_client.results)."""

    model: str
    rows: np.ndarray
    inputs: str | tuple[str, ...]
    wanted: tuple[str, ...]
    options: CallOptions = field(default_factory=CallOptions)
    deadline: Deadline = field(default_factory=Deadline)
    protocol: str = "http"
    build: Callable[[list[Any], list[str]], Any] = field(default=lambda answers, ids: answers)
    one_request: bool = False  # all rows in one request (a similarity call), or refused

    @property
    def input_names(self) -> tuple[str, ...]:
        """The inputs as a tuple: one for all of the rows, or one per column."""
        return (self.inputs,) if isinstance(self.inputs, str) else self.inputs

    @property
    def label(self) -> str:
        """How a refusal names a row: `TEXT`, `QUERY+DOCUMENT` (a row is a pair)."""
        return "+".join(self.input_names)

    def chunks(self, info: ModelInfo) -> list[tuple[slice, str]]:
        """(rows, request id) of each request the call makes: at most the model's
        request rows (its preferred batch, else max_batch_size; fewer when its texts are
        chunked into windows), and never over the protocol's request size limit. A
        `one_request` call is one request of at most max_batch_size rows."""
        if self.one_request:
            return self.single(info)
        chunked = self.options.chunks_texts(info.chunks_by_default)
        return plan(self.rows, info.chunk_rows if chunked else info.request_rows,
                    self.protocol, self.label)

    def single(self, info: ModelInfo) -> list[tuple[slice, str]]:
        """The one request of a `one_request` call; InvalidInputError past the model's
        max_batch_size (when the client knows it: else the server refuses it) or the
        protocol's request size."""
        if info.max_batch_known and len(self.rows) > info.max_batch:
            raise InvalidInputError(
                f"{len(self.rows)} rows in one request: over model '{self.model}''s "
                f"max_batch_size of {info.max_batch} (a similarity call takes at most "
                f"{info.max_batch - 1} texts besides its source)")
        pieces = plan(self.rows, len(self.rows), self.protocol, self.label)
        if len(pieces) > 1:
            raise InvalidInputError(
                f"the {len(self.rows)} rows do not fit one {self.protocol} request; send "
                "fewer or shorter texts")
        return pieces

    def request(self, module: ModuleType, rows: slice, request_id: str,
                info: ModelInfo) -> Request:
        """The request of the chunk `rows`, asking for the wanted outputs the model has."""
        outputs = [n for n in self.wanted if n in info.outputs]
        return Request(*request_for(module, self.rows[rows], self.input_names, outputs),
                       request_id)

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None: no deadline); raises
        DeadlineExceededError once it has passed."""
        return self.deadline.remaining(self.model)

    def deadline_error(self) -> DeadlineExceededError:
        return self.deadline.error(self.model)

    @contextmanager
    def deadline_scope(self) -> Iterator[None]:
        """A failure once the deadline has passed is raised as DeadlineExceededError."""
        try:
            yield
        except TritonClientError as err:
            if self.deadline.expired():
                raise self.deadline_error() from err
            raise

    def infer_kwargs(self, request_id: str) -> dict[str, Any]:
        """tritonclient's infer arguments; the time left is the queue timeout (in µs) when
        the caller gave a deadline and no `timeout_ms`."""
        kwargs = self.options.infer_kwargs(request_id)
        queue_timeout = self.deadline.queue_timeout_us(self.model)
        if queue_timeout is not None and "timeout" not in kwargs:
            kwargs["timeout"] = queue_timeout
        return kwargs

    def reporter(self) -> Callable[[slice], None]:
        """What to call after each chunk: it tells `on_progress` the rows done so far."""
        done = 0

        def report(rows: slice) -> None:
            nonlocal done
            done += rows.stop - rows.start
            if self.options.on_progress is not None:
                self.options.on_progress(done, len(self.rows))

        return report
