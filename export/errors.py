"""Every error the export raises, in one tree; `exit_code` is what `tmr` exits with
(cli/errors.py maps the roots of every layer in one place):

    ExportError              root: an export or `tmr add` that did not happen (exit 1)
    ├── ExportCheckError     an exported artifact failed a check; nothing was written
    └── ExportRequestError   what was asked cannot be exported (exit 2)
        ├── SourceError      a model source that cannot be found or is no model
        └── AddError         `tmr add` refused: a taken name, a family with no recipe
"""

from __future__ import annotations


class ExportError(Exception):
    """Raised when an export does not happen; `exit_code` is tmr's."""

    exit_code = 1


class ExportCheckError(ExportError, RuntimeError):
    """An exported artifact failed a check; nothing was written for it."""

    def __init__(self, check: str, measured: object, threshold: object, detail: str = "") -> None:
        self.check = check
        self.measured = measured
        self.threshold = threshold
        message = f"{check}: measured {measured}, threshold {threshold}"
        super().__init__(f"{message} ({detail})" if detail else message)


class ExportRequestError(ExportError, ValueError):
    """Raised before anything is written for a request that names what cannot be exported:
    an encoder the model lacks, a primary that is not gated, an unusable source."""

    exit_code = 2
