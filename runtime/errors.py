"""Errors raised inside the Python-backend models, each carrying its Triton error code.

    ModelError                 anything unexpected; INTERNAL
    ├── InvalidInputError      the request itself is wrong (dtype, encoding, length); INVALID_ARG
    ├── UnavailableError       the model cannot serve right now; UNAVAILABLE
    └── ChildModelError        a BLS call to another model failed; keeps the child's message
"""

from __future__ import annotations

from enum import StrEnum

from core.messages import FailureKind


class ErrorCode(StrEnum):
    """The Triton error code a failure is answered with: the names of
    `pb_utils.TritonError`'s codes (python_backends/base.py error_response maps them)."""

    INTERNAL = "INTERNAL"
    INVALID_ARG = "INVALID_ARG"  # HTTP 400, gRPC INVALID_ARGUMENT
    UNAVAILABLE = "UNAVAILABLE"  # HTTP 503, gRPC UNAVAILABLE


class ModelError(Exception):
    """A per-request failure that is returned to the client, never raised past execute()."""

    code = ErrorCode.INTERNAL


class InvalidInputError(ModelError):
    """The client sent input this model refuses (HTTP 400, gRPC INVALID_ARGUMENT)."""

    code = ErrorCode.INVALID_ARG


class UnavailableError(ModelError):
    """The model or one it depends on cannot serve now (HTTP 503, gRPC UNAVAILABLE)."""

    code = ErrorCode.UNAVAILABLE


class ChildModelError(ModelError):
    """A BLS call failed; the message names the child model and repeats its error.

    `kind` is what the child's message reports (core.messages.FailureKind); `code` is
    UNAVAILABLE when the child cannot serve now and another model might, INTERNAL
    otherwise."""

    def __init__(self, model: str, message: str, kind: FailureKind = FailureKind.OTHER,
                 code: ErrorCode = ErrorCode.INTERNAL) -> None:
        super().__init__(f"model '{model}' failed: {message}")
        self.model = model
        self.child_message = message
        self.kind = kind
        self.code = code

    @property
    def unavailable(self) -> bool:
        return self.code == ErrorCode.UNAVAILABLE
