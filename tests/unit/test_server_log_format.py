"""`tmr --log-json` / TMR_LOG_JSON: one JSON object per logging record."""

from __future__ import annotations

import json
import logging

import pytest

from server.log_format import JsonFormatter, configure_logging, json_requested


def record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("tmr.watchdog", logging.WARNING, __file__, 1, msg, args, None)
    rec.__dict__.update(extra)
    return rec


def test_json_formatter_writes_time_level_logger_message_and_extras() -> None:
    line = JsonFormatter().format(record("reloads %s", "embed", model="embed", reason="stall"))
    assert "\n" not in line
    data = json.loads(line)
    assert data["level"] == "warning" and data["logger"] == "tmr.watchdog"
    assert data["message"] == "reloads embed"
    assert (data["model"], data["reason"]) == ("embed", "stall")
    assert data["time"].endswith("+00:00")


def test_json_formatter_keeps_the_exception_text() -> None:
    try:
        raise ValueError("bad thing")
    except ValueError:
        rec = logging.LogRecord("tmr", logging.ERROR, __file__, 1, "failed", None,
                                exc_info=__import__("sys").exc_info())
    assert "ValueError: bad thing" in json.loads(JsonFormatter().format(rec))["exception"]


@pytest.mark.parametrize(("flag", "env", "expected"), [
    (False, {}, False), (True, {}, True), (False, {"TMR_LOG_JSON": "1"}, True),
    (False, {"TMR_LOG_JSON": "0"}, False), (False, {"TMR_LOG_JSON": "false"}, False),
])
def test_json_is_requested_by_flag_or_environment(flag: bool, env: dict[str, str],
                                                  expected: bool) -> None:
    assert json_requested(flag, env) is expected


def test_configure_logging_installs_one_json_handler(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = root.handlers[:]
    try:
        configure_logging(True)
        logging.getLogger("tmr.test").info("hello", extra={"model": "embed"})
        line = capsys.readouterr().err.strip().splitlines()[-1]
    finally:
        root.handlers[:] = saved
    assert json.loads(line)["model"] == "embed"
