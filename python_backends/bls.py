"""The one BLS call helper: every model-to-model call goes through `bls_infer`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from python_backends.errors import ChildModelError
from python_backends.pb import pb_utils

# Child failures that mean "cannot serve now" rather than "broken": the caller may
# retry or fall back. BLS reports them all as INTERNAL, so they are matched by message.
UNAVAILABLE_MARKERS = (
    "Exceeds maximum queue size",
    "Request timeout expired",
    "is not found",
    "is not ready",
    "unknown model",
    "is not healthy",
    "has been unloaded",
    "Server not ready",  # the server is shutting down
)


def child_error_code(message: str) -> str:
    """UNAVAILABLE for overload, absence and dead stubs; INTERNAL otherwise."""
    return "UNAVAILABLE" if any(m in message for m in UNAVAILABLE_MARKERS) else "INTERNAL"


def bls_infer(model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str],
              version: int = -1) -> dict[str, np.ndarray]:
    """Run `model` on `inputs` and return the requested outputs, or raise ChildModelError."""
    request = pb_utils.InferenceRequest(
        model_name=model,
        model_version=version,
        requested_output_names=list(outputs),
        inputs=[pb_utils.Tensor(name, array) for name, array in inputs.items()],
    )
    response = request.exec()
    if response.has_error():
        message = response.error().message()
        err = ChildModelError(model, message)
        err.code = child_error_code(message)
        raise err
    return {name: pb_utils.get_output_tensor_by_name(response, name).as_numpy() for name in outputs}


_REASONS = (
    ("Exceeds maximum queue size", "queue_full"),
    ("Request timeout expired", "timeout"),
    ("is not healthy", "stub_unhealthy"),
    ("out of memory", "out_of_memory"),
    ("OutOfMemory", "out_of_memory"),
    ("is not found", "not_found"),
    ("unknown model", "not_found"),
    ("is not ready", "not_ready"),
    ("has been unloaded", "not_ready"),
)


def failure_reason(message: str) -> str:
    """A short label for a child failure, for metrics: queue_full, timeout, not_found..."""
    return next((label for marker, label in _REASONS if marker in message), "error")
