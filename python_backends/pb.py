"""The one import seam for `triton_python_backend_utils`.

Inside Triton's Python stub the module is importable and logs go to `pb_utils.Logger`;
outside (unit tests, tooling) `pb_utils` is None and logs go to `logging`.
"""

from __future__ import annotations

import logging

try:  # pragma: no cover - only importable inside the Triton Python stub
    import triton_python_backend_utils as pb_utils
except ImportError:
    pb_utils = None


class Log:
    """A logger that writes to Triton's log inside the stub and to `logging` outside."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._fallback = logging.getLogger(name)

    def _emit(self, level: str, msg: str) -> None:
        if pb_utils is not None:
            getattr(pb_utils.Logger, f"log_{level}")(f"{self._name}: {msg}")
        else:
            getattr(self._fallback, "warning" if level == "warn" else level)(msg)

    def info(self, msg: str) -> None:
        self._emit("info", msg)

    def warning(self, msg: str) -> None:
        self._emit("warn", msg)

    def error(self, msg: str) -> None:
        self._emit("error", msg)

    def raw(self, line: str) -> None:
        """`line` at INFO as is, without the name prefix (a JSON log line)."""
        if pb_utils is not None:
            pb_utils.Logger.log_info(line)
        else:
            self._fallback.info(line)
