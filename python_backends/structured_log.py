"""Structured JSON log lines from the Python backends: one object per dynamic batch.

Inside Triton a line goes through `pb_utils.Logger`, so it lands in Triton's own log after
Triton's prefix (`--log-format=ISO8601`, server/settings.py), one line per batch. Triton
2.51 escapes every log message into a JSON string (against log injection), so the object
arrives quoted once; `parse_line` reads it back:

    2025-01-01T12:00:00Z I 4242 pb.py:42] "{\\"event\\":\\"batch\\",\\"model\\":\\"embed\\",...}"

An instance logs at most one batch every `batch_log_interval_s` seconds (a model
parameter, default `BATCH_LOG_INTERVAL_S`; 0 logs every batch), so a busy server does not
flood its log; the metrics carry the totals. Batches in between are not sent to Triton at
all: every `pb_utils.Logger` call is an IPC round to the server process, whatever the log
level. `format_line` and `parse_line` are pure and unit-tested.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.settings import ModelSettings
from python_backends.pb import Log

BATCH_LOG_INTERVAL_S = ModelSettings.batch_log_interval_s  # core/settings.py
FIELDS = ("event", "model", "version", "request_ids", "requests", "batch_size", "input_bytes",
          "latency_ms", "degradation_level", "failed")


def batch_record(model: str, version: str, request_ids: Sequence[str], batch_size: int,
                 input_bytes: int, latency_ms: float, degradation_level: int | None = None,
                 failed: int = 0) -> dict[str, Any]:
    """The fields of one batch line, in `FIELDS` order (empty request ids are dropped)."""
    return {
        "event": "batch", "model": model, "version": version,
        "request_ids": [r for r in request_ids if r], "requests": len(request_ids),
        "batch_size": batch_size, "input_bytes": input_bytes,
        "latency_ms": round(latency_ms, 3), "degradation_level": degradation_level,
        "failed": failed,
    }


def format_line(record: Mapping[str, Any]) -> str:
    """One compact JSON object on one line (newlines inside values are escaped)."""
    return json.dumps(dict(record), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def parse_line(line: str) -> dict[str, Any] | None:
    """The object of a batch line, or None for a line that carries none.

    Triton 2.51 escapes log messages: after its prefix the message is a JSON string that
    holds our JSON object (`...pb.py:42] "{\\"event\\":\\"batch\\",...}"`). Both that and
    a bare object (the `logging` fallback outside Triton) are read.
    """
    text = line.strip()
    if not text.startswith("{") and "] " in text:
        text = text.split("] ", 1)[1].strip()
    try:
        value = json.loads(text)
        if isinstance(value, str):
            value = json.loads(value)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@dataclass
class Sampler:
    """Lets one event through every `interval_s` seconds; the first one at once."""

    interval_s: float
    last: float | None = None

    def due(self, now: float) -> bool:
        """Whether an event at `now` goes through; if so the interval starts again."""
        if self.last is not None and now - self.last < self.interval_s:
            return False
        self.last = now
        return True


@dataclass
class BatchFacts:
    """What a model's request loop learnt about the batch it just served."""

    batch_size: int = 0
    input_bytes: int = 0


class BatchLog:
    """Emits the batch line of one model instance at INFO, at most once per interval."""

    def __init__(self, log: Log, model: str, version: str,
                 interval_s: float = BATCH_LOG_INTERVAL_S) -> None:
        self.log, self.model, self.version = log, model, version
        self.sampler = Sampler(interval_s)

    def emit(self, requests: Sequence[Any], responses: Sequence[Any], facts: BatchFacts,
             began: float, degradation_level: int | None = None) -> None:
        """The line for Triton's `requests` and the `responses` about to be returned."""
        now = time.monotonic()
        if not self.sampler.due(now):
            return  # the common case: touch no request or response object, no IPC
        failed = sum(1 for r in responses if r is not None and r.has_error())
        self.log.raw(format_line(batch_record(
            self.model, self.version, [r.request_id() for r in requests], facts.batch_size,
            facts.input_bytes, (now - began) * 1000, degradation_level, failed)))
