"""The one BLS call helper: every model-to-model call goes through `bls_infer`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import numpy as np

from core import messages
from core.messages import FailureKind
from python_backends.pb import pb_utils
from runtime.errors import ChildModelError, ErrorCode

# Child failures that mean "cannot serve now" rather than "broken": the caller may retry
# elsewhere. BLS reports every child failure as INTERNAL, so the kind comes from the
# message (core.messages, the one table of Triton's messages).
UNAVAILABLE_KINDS = frozenset({FailureKind.QUEUE_FULL, FailureKind.TIMEOUT,
                               FailureKind.NOT_FOUND, FailureKind.NOT_READY,
                               FailureKind.STUB_UNHEALTHY, FailureKind.SERVER_STOPPING})


# The trace the current batch's BLS calls join (`follow`): with tracing on (`tmr serve
# --trace`), each encoder call is a child span of that request's front span.
_TRACE: ContextVar[Any] = ContextVar("bls_trace", default=None)


def traced(request: Any) -> bool:
    """Whether Triton traces this request (tracing on, and this one sampled)."""
    trace = request.trace() if hasattr(request, "trace") else None
    return bool(trace is not None and getattr(trace, "get_context", lambda: None)())


def follow(requests: Sequence[Any]) -> None:
    """Make the batch's BLS calls children of its first traced request. A batched call has
    one parent: the other requests of the batch keep their own request, model and compute
    spans, without the encoder's (docs/observability.md, "Traces")."""
    traces = [r.trace() for r in requests if hasattr(r, "trace")]
    traced = [t for t in traces if getattr(t, "get_context", lambda: None)()]
    _TRACE.set((traced or traces or [None])[0])


def child_failure(model: str, message: str) -> ChildModelError:
    """A typed child failure: its kind, and UNAVAILABLE or INTERNAL as its code."""
    kind = messages.kind_of(message)
    return ChildModelError(model, message, kind or FailureKind.OTHER,
                           ErrorCode.UNAVAILABLE if kind in UNAVAILABLE_KINDS
                           else ErrorCode.INTERNAL)


def bls_infer(model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str],
              version: int = -1) -> dict[str, np.ndarray]:
    """Run `model` on `inputs` and return the requested outputs, or raise ChildModelError."""
    trace = _TRACE.get()
    request = pb_utils.InferenceRequest(
        model_name=model,
        model_version=version,
        requested_output_names=list(outputs),
        inputs=[pb_utils.Tensor(name, array) for name, array in inputs.items()],
        **({} if trace is None else {"trace": trace}),
    )
    response = request.exec()
    if response.has_error():
        raise child_failure(model, response.error().message())
    return {name: pb_utils.get_output_tensor_by_name(response, name).as_numpy() for name in outputs}


def is_loaded(model: str) -> bool:
    """Whether the server holds a ready version of `model` (False when it is not loaded)."""
    return bool(pb_utils.is_model_ready(model_name=model, model_version=""))
