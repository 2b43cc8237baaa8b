"""How `tmr` fails: one line on stderr that names what was tried, with a hint, and an exit
code. `tmr --debug` shows the full traceback instead.

    exit 0  done
    exit 1  a runtime failure: the server unreachable or refusing, a check, gate or
            release that failed (`tmr rollout` also: 3 rolled back, 4 aborted)
    exit 2  a usage error: a bad option, an unknown model, front or version

`message_for` maps the project's errors to their line once, here; the commands raise and
never print a traceback themselves. Each layer has one error root whose classes carry their
exit code (`exit_code`): core.errors.CoreError, server.errors.ServerError,
export.errors.ExportError and this module's UsageError; the SDK's TritonClientError is
mapped from what the server answered. An error of no known type still becomes one line
("internal error: ...; rerun with --debug").
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FAILURE, USAGE = 1, 2
EXIT_CODES_HELP = ("exit codes: 0 done; 1 a runtime failure (server unreachable, check or gate "
                   "failed);\n  2 a usage error (bad option, unknown name). An error is one "
                   "line; --debug shows its traceback.")
SERVE_HINT = "start it with `make serve` (or `tmr serve`) or pass --url"


class UsageError(Exception):
    """The command line names something that does not exist or cannot work (exit 2)."""

    exit_code = USAGE


@dataclass(frozen=True)
class Tried:
    """What a command was asked to act on, for its error line."""

    command: str
    url: str | None = None  # as the user would type it, with its scheme
    model: str | None = None
    version: int | None = None

    @classmethod
    def of(cls, *sources: Any) -> Tried:
        """From the parsed arguments and the command's options (the later wins)."""
        found: dict[str, Any] = {}
        for source in sources:
            for name in ("command", "verb", "action", "url", "protocol", "model", "version"):
                value = getattr(source, name, None)
                if value is not None and not isinstance(value, list | argparse.Namespace):
                    found[name] = value
            if getattr(source, "urls", None):  # rollout's replicas
                found["url"] = ", ".join(source.urls)
        url = found.get("url")
        shown = None if url is None else ", ".join(
            with_scheme(u.strip(), found.get("protocol", "http")) for u in str(url).split(","))
        model = found.get("model")
        words = [str(found[k]) for k in ("command", "verb", "action") if k in found]
        command = " ".join(dict.fromkeys(words)) or "?"  # `rollout start`, not `promote promote`
        return cls(command, shown,
                   model if isinstance(model, str) else None, found.get("version"))

    def target(self) -> str:
        """`model 'x' v2`, or '' when no model was named."""
        if not self.model:
            return ""
        return f"model {self.model!r}" + (f" v{self.version}" if self.version else "")


def with_scheme(url: str, protocol: str) -> str:
    return url if "://" in url else f"{protocol}://{url}"


def unreachable_reason(message: str) -> str:
    """A transport failure in a few words."""
    text = message.lower()
    for marker, reason in (("refused", "connection refused"), ("timed out", "timed out"),
                           ("name or service not known", "unknown host"),
                           ("nodename nor servname", "unknown host"),
                           ("reset", "connection reset"), ("cancelled", "call cancelled")):
        if marker in text:
            return reason
    return message


def _client_error(err: Any, tried: Tried) -> tuple[str, int]:
    from tmr_client import errors as client_errors

    where = f"Triton at {tried.url}" if tried.url else "Triton"
    what = tried.target()
    if isinstance(err, client_errors.ServerUnreachableError):
        return (f"cannot reach {where} ({unreachable_reason(err.message)}): {SERVE_HINT}",
                FAILURE)
    if isinstance(err, client_errors.AccessDeniedError):
        return (f"{where} refused the key ({err.message}): set TMR_API_KEY, or TMR_ADMIN_KEY "
                "for the admin APIs", FAILURE)
    if isinstance(err, client_errors.ModelNotFoundError):
        return (f"{where} has no {what or 'such model'} ({err.message}): "
                "`tmr versions` lists the models", USAGE)
    if isinstance(err, client_errors.InvalidInputError):  # the server's reason names the input
        return f"{type(err).__name__}: {err.message}", FAILURE
    if isinstance(err, client_errors.ModelNotReadyError):
        return f"{what or 'the model'} is not ready on {where} ({err.message})", FAILURE
    return f"{where}{' ' + what if what else ''}: {type(err).__name__}: {err.message}", FAILURE


def _os_error(err: OSError, tried: Tried) -> tuple[str, int]:
    path = err.filename if err.filename is not None else ""
    code = USAGE if isinstance(err, FileNotFoundError) else FAILURE
    return f"{path}{': ' if path else ''}{err.strerror or err}", code


def _process_error(err: Any, tried: Tried) -> tuple[str, int]:
    tool = Path(str(err.cmd[0] if isinstance(err.cmd, list | tuple) else err.cmd)).name
    where = f" against {tried.url}" if tried.url else ""
    return f"{tool} exited with status {err.returncode}{where}", FAILURE


def _plain(code: int, hint: str = "") -> Callable[[BaseException, Tried], tuple[str, int]]:
    """The error's own message (the project's errors name what failed), and a hint."""
    def describe(err: BaseException, tried: Tried) -> tuple[str, int]:
        text = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        return f"{text}{': ' + hint if hint else ''}", code
    return describe


def _hints() -> list[tuple[type[BaseException], str]]:
    """What to do next, for the errors that have a hint, most specific first."""
    from core.families.catalog import UnknownModelError
    from core.versions import VersionError
    from export.errors import ExportCheckError
    from server import errors as server_errors

    return [
        (UnknownModelError, "`tmr versions` lists the models"),
        (VersionError, "`tmr versions MODEL` lists its versions"),
        (server_errors.ReleaseError, "the old version still serves"),
        (server_errors.PortInUseError, "stop what listens there, or pick other ports"),
        (server_errors.DistributionError, "run `make setup`"),
        (ExportCheckError, "nothing was written"),
    ]


def _layer_error(err: BaseException, tried: Tried) -> tuple[str, int]:
    """An error of a layer's root: its message, its hint, its own exit code."""
    hint = next((text for kind, text in _hints() if isinstance(err, kind)), "")
    return _plain(getattr(err, "exit_code", FAILURE), hint)(err, tried)


def _handlers() -> list[tuple[type[BaseException], Callable[..., tuple[str, int]]]]:
    """The project's error roots, then the standard library's (imported here: the commands
    import their heavy modules only when they run, and so does this table)."""
    from tmr_client.errors import TritonClientError

    from core.errors import CoreError
    from export.errors import ExportError
    from server.errors import ServerError

    return [
        (UsageError, _layer_error),
        (TritonClientError, _client_error),
        (CoreError, _layer_error),
        (ServerError, _layer_error),
        (ExportError, _layer_error),
        (subprocess.CalledProcessError, _process_error),
        (OSError, _os_error),
    ]


def message_for(err: BaseException, tried: Tried) -> tuple[str, int]:
    """The error's one line (without the `tmr COMMAND: ` prefix) and its exit code. An
    error caused by an unreachable server is reported as that (it says what to do)."""
    from tmr_client.errors import ServerUnreachableError

    if isinstance(err.__cause__, ServerUnreachableError):
        err = err.__cause__
    for kind, describe in _handlers():
        if isinstance(err, kind):
            text, code = describe(err, tried)
            return one_line(text), code
    return one_line(f"internal error: {type(err).__name__}: {err}; rerun with --debug"), FAILURE


def one_line(text: object) -> str:
    """An error's text on one line (a KeyError's own message, not its repr)."""
    if isinstance(text, KeyError) and text.args:
        text = text.args[0]
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())


def report(err: BaseException, tried: Tried) -> int:
    """Print the error's line on stderr; its exit code."""
    text, code = message_for(err, tried)
    print(f"tmr {tried.command}: error: {text}", file=sys.stderr)
    return code

