"""Errors raised by the export checks."""

from __future__ import annotations


class ExportCheckError(RuntimeError):
    """An exported artifact failed a check; nothing was written for it."""

    def __init__(self, check: str, measured: object, threshold: object, detail: str = "") -> None:
        self.check = check
        self.measured = measured
        self.threshold = threshold
        message = f"{check}: measured {measured}, threshold {threshold}"
        super().__init__(f"{message} ({detail})" if detail else message)
