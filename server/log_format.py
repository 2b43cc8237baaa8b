"""How the `tmr` tooling logs: plain text, or one JSON object per line.

`tmr --log-json ...` or `TMR_LOG_JSON=1` switches every `logging` record of the process
to JSON with `time` (ISO 8601, UTC), `level`, `logger`, `message`, and whatever the caller
passed in `extra=` (e.g. `model`, `reason`).
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime

LOG_JSON_ENV = "TMR_LOG_JSON"
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record; `extra=` fields are kept, exceptions as text."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def json_requested(flag: bool = False, env: dict[str, str] | None = None) -> bool:
    """The `--log-json` flag, or TMR_LOG_JSON set to anything but empty, 0 or false."""
    value = (os.environ if env is None else env).get(LOG_JSON_ENV, "")
    return flag or value.strip().lower() not in ("", "0", "false", "no")


def configure_logging(json_lines: bool, level: int = logging.INFO) -> None:
    """One stderr handler on the root logger; the project's loggers at `level`."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(PLAIN_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    for name in ("tmr", "export", "server", "client", "perf"):
        logging.getLogger(name).setLevel(level)
