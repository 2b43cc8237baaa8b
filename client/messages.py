"""Triton's error messages, in one table: what each marker in a message means.

Triton 2.51 reports most failures by message, not by a code the caller can branch on: a
BLS call's failure comes back as INTERNAL whatever it was, and HTTP and gRPC differ in
status. Both the SDK (tmr_client.errors) and the router (python_backends.bls) turn a message
into one of these kinds with `kind_of`, then branch on the kind. The project's own refusal
(a front model degraded to a level that refuses the request) is written by
`degraded_refusal` and read back by `degraded_level`: its wording lives here only. A
message about one row of an input names it with `row_ref` (`TEXT[3]`), the form the
OpenAI route (server/nginx/openai.js) rewrites into the request's own `input[i]`.
Standard library only: the Python backend imports it through `core.messages`, which
re-exports it.
"""

from __future__ import annotations

from enum import StrEnum


class FailureKind(StrEnum):
    """What a failure is, as its message says (`kind_of`); the value is its metric label."""

    RESTRICTED = "restricted"  # an admin API without the admin key
    RATE_LIMITED = "rate_limited"  # the front door's per-key rate
    TOO_LARGE = "too_large"  # the front door's body limit
    QUEUE_FULL = "queue_full"
    TIMEOUT = "timeout"  # a queue timeout or a deadline
    NOT_READY = "not_ready"  # known, but loading, unloading or unloaded
    NOT_FOUND = "not_found"
    STUB_UNHEALTHY = "stub_unhealthy"  # a dead Python stub (2.51 never restarts one)
    OUT_OF_MEMORY = "out_of_memory"
    SERVER_STOPPING = "server_stopping"
    UNREACHABLE = "unreachable"  # no connection
    DEGRADED = "degraded"  # a front model refusing work on purpose (not in MARKERS: see below)
    OTHER = "error"  # a failure whose message no marker names


# First match wins: "unknown model ... is not at ready state" is a version not ready.
_DEGRADED_MARKER = "is degraded to level"
MARKERS: tuple[tuple[str, FailureKind], ...] = (
    ("is restricted, expecting header", FailureKind.RESTRICTED),
    ("rate limit exceeded", FailureKind.RATE_LIMITED),
    ("over the front door limit", FailureKind.TOO_LARGE),
    ("exceeds maximum queue size", FailureKind.QUEUE_FULL),
    ("request timeout expired", FailureKind.TIMEOUT),
    ("deadline exceeded", FailureKind.TIMEOUT),
    ("is not at ready state", FailureKind.NOT_READY),
    ("is not ready", FailureKind.NOT_READY),
    ("has been unloaded", FailureKind.NOT_READY),
    ("is not healthy", FailureKind.STUB_UNHEALTHY),
    ("out of memory", FailureKind.OUT_OF_MEMORY),
    ("outofmemory", FailureKind.OUT_OF_MEMORY),
    ("server not ready", FailureKind.SERVER_STOPPING),
    ("stopped accepting new inference requests", FailureKind.SERVER_STOPPING),
    ("unknown model", FailureKind.NOT_FOUND),
    ("is not found", FailureKind.NOT_FOUND),
    ("failed to connect", FailureKind.UNREACHABLE),
    ("connection refused", FailureKind.UNREACHABLE),
    ("socket closed", FailureKind.UNREACHABLE),
)


def kind_of(message: str) -> FailureKind | None:
    """The kind of failure a Triton (or front door) message reports, or None."""
    lowered = message.lower()
    return next((kind for marker, kind in MARKERS if marker in lowered), None)


def degraded_refusal(model: str, level: int, level_name: str, reason: str) -> str:
    """The message of a request a front model refuses at its degradation level."""
    return f"{model} {_DEGRADED_MARKER} {level} ({level_name}): {reason}"


def degraded_level(message: str) -> int | None:
    """The level named by a degraded_refusal message (anywhere in `message`), or None."""
    at = message.find(_DEGRADED_MARKER + " ")
    if at < 0:
        return None
    level = message[at + len(_DEGRADED_MARKER) + 1:].split(" ", 1)[0]
    return int(level) if level.isdigit() else None


def row_ref(tensor: str, row: int) -> str:
    """How a message names one row of an input tensor: `TEXT[3]`. server/nginx/openai.js
    matches exactly this form (tests/unit/test_openai_njs.py feeds it real messages)."""
    return f"{tensor}[{row}]"
