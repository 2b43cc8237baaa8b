"""The option families every `tmr` command shares, each built by one function.

One spelling per concept:

    server      --url [http://|grpc://]HOST[:PORT] (default: $TMR_URL, or $TMR_GRPC_URL
                with --protocol grpc, else localhost:8000 / localhost:8001) and
                --protocol http|grpc; a scheme names the protocol (parse_url)
    model       MODEL, positional, in every command that acts on models; --model only in
                the calls (embed, classify), whose positionals are their inputs
    control     --control-mode explicit|poll (how the server was started)
    units       seconds (`--wait-s`, `--queue-timeout-s`, `--p99-budget-s`) and fractions 0..1
                (`--max-error-fraction`) throughout
    names       each command takes the kind of name it acts on (cli/names.py)
    repository  --repository DIR
    keys        $TMR_API_KEY (the front door's key), $TMR_ADMIN_KEY (restricted APIs);
                never on the command line, where `ps` would show them

"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

from tmr_client.auth import ADMIN_KEY_ENV, API_KEY_ENV
from tmr_client.core import DEFAULT_MODEL, DEFAULT_PORTS, Protocol, default_url

from cli.errors import UsageError
from core.families import TEXT_EMBEDDING
from core.families.catalog import UnknownModelError, default_front
from core.paths import DEFAULT_REPOSITORY
from core.timeouts import QUEUE_PRIORITY_1, QUEUE_PRIORITY_2, Timeout

URL_ENV = {"http": "TMR_URL", "grpc": "TMR_GRPC_URL"}  # the server's host:port per protocol
CONTROL_MODES = ("explicit", "poll")
ENVIRONMENT_HELP = "\n".join([
    "environment:",
    f"  {URL_ENV['http']:<14} the server's HTTP host:port "
    f"(default localhost:{DEFAULT_PORTS['http']})",
    f"  {URL_ENV['grpc']:<14} its gRPC host:port (default localhost:{DEFAULT_PORTS['grpc']})",
    f"  {API_KEY_ENV:<14} the API key sent to the front door",
    f"  {ADMIN_KEY_ENV:<14} the admin key of the restricted APIs (default: the dev server's)",
    "  TMR_LOG_JSON   1: log JSON lines",
])
T = TypeVar("T")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every `tmr` help: descriptions as written, and each option's default after its help
    (argparse.ArgumentDefaultsHelpFormatter's rule), unless the help already says it or
    there is nothing to show (None, a flag)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = action.option_strings or action.nargs in ("?", "*")
        if (not shown or "default" in text.lower() or text == argparse.SUPPRESS
                or action.default in (None, False, [], argparse.SUPPRESS)):
            return text
        return f"{text} (default: %(default)s)"


def server_url(protocol: Protocol = "http") -> str:
    """The server a command talks to when `--url` is not given: the environment, else
    localhost on the protocol's default port."""
    return os.environ.get(URL_ENV[protocol]) or default_url(protocol)


SCHEMES: dict[str, Protocol] = {"http": "http", "grpc": "grpc"}


def parse_url(text: str, protocol: Protocol | None = None,
              default: Protocol = "http") -> tuple[str, Protocol]:
    """`HOST:PORT`, `HOST` or `SCHEME://HOST[:PORT][/]` as (HOST:PORT, protocol): the scheme
    names the protocol (else `protocol`, else `default`), a missing port is the protocol's
    default. UsageError for a scheme tmr does not speak, a path, or a scheme that
    contradicts `protocol`."""
    scheme, sep, rest = text.strip().partition("://")
    if not sep:
        scheme, rest = "", scheme
    if scheme and scheme.lower() not in SCHEMES:
        raise UsageError(f"--url {text}: tmr speaks {' and '.join(SCHEMES)}, not {scheme}")
    named = SCHEMES.get(scheme.lower())
    if named and protocol and named != protocol:
        raise UsageError(f"--url {text} is {named}, but this call uses {protocol}")
    host, _, path = rest.partition("/")
    if path or not host:
        raise UsageError(f"--url {text}: give the server as [SCHEME://]HOST[:PORT], no path")
    chosen: Protocol = named or protocol or default
    if ":" not in host.rsplit("]", 1)[-1]:  # no port (an IPv6 literal keeps its brackets)
        host = f"{host}:{DEFAULT_PORTS[chosen]}"
    return host, chosen


def resolve_server(url: str | None, protocol: Protocol | None,
                   default: Protocol = "http") -> tuple[str, Protocol]:
    """The server and protocol of a call: `--url` (its scheme may name the protocol),
    else the environment of the protocol (`default` when none is named)."""
    if url is None:
        protocol = protocol or default
        return parse_url(server_url(protocol), protocol)
    return parse_url(url, protocol, default)


def add_server(parser: argparse.ArgumentParser, *, protocol: Protocol | None = None,
               start_own: bool = False) -> None:
    """`--url` (and `--protocol` when `protocol` names its default). With `start_own` no
    `--url` means "start a server of my own", so the environment is not read."""
    if start_own:
        parser.add_argument("--url", default=None,
                            help="[SCHEME://]HOST:PORT of a running server (default: start one)")
    else:
        env = URL_ENV[protocol or "http"]
        parser.add_argument("--url", default=None,
                            help=f"the server's [{'|'.join(SCHEMES)}://]HOST[:PORT] "
                                 f"(default: ${env}, else localhost)")
    if protocol:
        parser.add_argument("--protocol", choices=list(SCHEMES), default=None,
                            help=f"default: the --url scheme, else {protocol}")


def resolve_url(url: str | None, protocol: Protocol = "http") -> str:
    """HOST:PORT of the server a `protocol`-only command talks to."""
    return resolve_server(url, protocol)[0]


def add_model(parser: argparse.ArgumentParser, *, default: str | None = None,
              optional: bool = False, help: str = "the model") -> None:
    """MODEL as a positional (`optional`: may be left out, then `default`)."""
    if optional:
        parser.add_argument("model", nargs="?", default=None, metavar="MODEL",
                            help=f"{help} (default: {default})" if default else help)
    else:
        parser.add_argument("model", metavar="MODEL", help=help)


def add_models(parser: argparse.ArgumentParser, *, help: str) -> None:
    """MODEL... (none: every family model)."""
    parser.add_argument("model", nargs="*", default=[], metavar="MODEL", help=help)


def add_call_model(parser: argparse.ArgumentParser, default: str | None,
                   default_help: str = "") -> None:
    """`--model`: the front model a call goes to (the positionals are the call's inputs);
    None: the command finds it when it runs (`default_help` says how)."""
    parser.add_argument("--model", default=default,
                        help=f"the front model (default {default_help or default})")


def add_control_mode(parser: argparse.ArgumentParser) -> None:
    """`--control-mode explicit|poll`."""
    parser.add_argument("--control-mode", choices=CONTROL_MODES, default="explicit",
                        help="the server's model control mode (default explicit)")


def add_queue_timeout(parser: argparse.ArgumentParser) -> None:
    """`--queue-timeout-s SECONDS`: a queue timeout (core/timeouts.py); `--timeout-s`, its
    name before timeouts were named by kind, still works."""
    parser.add_argument("--queue-timeout-s", "--timeout-s", dest="timeout_s", type=float,
                        default=None, metavar="SECONDS",
                        help="how long the request may wait in the server's queue (default: "
                        f"the model's, {QUEUE_PRIORITY_2.seconds:g} s at priority 2 and "
                        f"{QUEUE_PRIORITY_1.seconds:g} s at 1; it may only be shorter)")


def add_wait(parser: argparse.ArgumentParser, timeout: Timeout) -> None:
    """`--wait-s SECONDS`: how long a command waits for the state it asked for (a wait of
    core/timeouts.py); `--timeout-s` still works."""
    parser.add_argument("--wait-s", "--timeout-s", dest="timeout_s", type=float,
                        default=timeout.seconds, metavar="SECONDS",
                        help=f"wait this long: {timeout.bounds} (default {timeout.seconds:g})")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document instead of the text report")


def add_repository(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY,
                        help="the model repository (default model_repository/)")


def existing_repository(repository: Path) -> Path:
    """`--repository` of a command that cannot work without one; UsageError if missing."""
    if not repository.is_dir():
        raise UsageError(f"no model repository at {repository}: pass --repository DIR")
    return repository


def options(cls: type[T], namespace: argparse.Namespace, **overrides: Any) -> T:
    """The command's typed options from the parsed arguments (fields by name)."""
    values = {f.name: getattr(namespace, f.name) for f in fields(cls)  # type: ignore[arg-type]
              if f.name not in overrides and hasattr(namespace, f.name)}
    return cls(**values, **overrides)


def repository_front(family_name: str) -> str | None:
    """The family's default front in the repository (the one its config marks
    `default_front`: core.families.catalog.default_front), or None where there is no
    repository to ask (the tools image) or no such front."""
    try:
        return default_front(DEFAULT_REPOSITORY, family_name)
    except (OSError, UnknownModelError):
        return None


def text_front() -> str:
    """The front a text command calls by default: the repository's, else the SDK's."""
    return repository_front(TEXT_EMBEDDING.name) or DEFAULT_MODEL


def model_of(namespace: argparse.Namespace, default: str | None = None) -> str | None:
    """The positional MODEL, else `default`."""
    return namespace.model or default


def models_of(namespace: argparse.Namespace) -> list[str] | None:
    """The positional MODELs; None means every model."""
    return list(namespace.model) or None


SUMMARIES: dict[str, str] = {}  # command -> its one-line summary, for the grouped `tmr --help`


def add_command(sub: argparse._SubParsersAction, name: str, summary: str,
                run: Callable[[Any], int],
                make: Callable[[argparse.Namespace], Any]) -> argparse.ArgumentParser:
    """A `tmr NAME` command: `make` turns the parsed arguments into the typed options that
    `run` takes. Not listed by argparse itself: `tmr --help` prints the groups."""
    SUMMARIES[name] = summary
    parser = sub.add_parser(name, description=summary, epilog=ENVIRONMENT_HELP,
                            formatter_class=HelpFormatter)
    parser.set_defaults(run=run, make=make)
    return parser
