"""`tmr embed TEXT...`: embed texts through a running server and print a short summary."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from cli.options import (
    add_call_model,
    add_command,
    add_server,
    add_timeout,
    options,
    resolve_url,
    text_front,
)
from client.core import Protocol


@dataclass(frozen=True)
class EmbedOptions:
    """What `tmr embed` was asked for."""

    texts: list[str]
    url: str
    protocol: Protocol
    model: str
    priority: int | None
    timeout_s: float | None
    truncate: str | None = None  # "true", "false", "chunk" or None (the model's policy)


TRUNCATE = {"true": True, "false": False, "chunk": "chunk", None: None}


def timeout_ms(timeout_s: float | None) -> int | None:
    """The SDK's queue timeout in ms from the command's seconds."""
    return None if timeout_s is None else max(1, round(timeout_s * 1000))


def add_call_options(parser: argparse.ArgumentParser, default_model: str | None,
                     default_help: str = "") -> None:
    """What every call command takes: the server, the front model, priority, timeout."""
    add_server(parser, protocol="http")
    add_call_model(parser, default_model, default_help)
    parser.add_argument("--priority", type=int, default=None,
                        help="1 (high) or 2 (low, shed first); default: the model's")
    add_timeout(parser, None, help="how long the request may wait in the server's queue",
                old_ms=True)


def make_options(args: argparse.Namespace) -> EmbedOptions:
    return options(EmbedOptions, args, url=resolve_url(args.url, args.protocol))


def register(sub: argparse._SubParsersAction) -> None:
    parser = add_command(sub, "embed", "embed texts through the running server",
                         embed_command, make_options)
    parser.add_argument("texts", nargs="+", metavar="TEXT")
    add_call_options(parser, text_front())
    parser.add_argument("--truncate", choices=["true", "false", "chunk"], default=None,
                        help="a text over the model's length: cut it (true), refuse it "
                        "(false) or embed it in windows pooled into one vector (chunk); "
                        "default: the model's overlength_policy")


def embed_command(opts: EmbedOptions) -> int:
    from client.errors import TritonClientError
    from client.sync import Client

    try:
        with Client(opts.url, protocol=opts.protocol, model=opts.model) as client:
            result = client.embed_with_info(opts.texts, priority=opts.priority,
                                            timeout_ms=timeout_ms(opts.timeout_s),
                                            truncate=TRUNCATE[opts.truncate])
    except TritonClientError as err:
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    versions = ",".join(sorted(set(result.model_versions)))
    print(f"{result.model_name} v{versions} over {opts.protocol} ({opts.url})")
    counts = zip(result.tokens or [None] * len(opts.texts),
                 result.truncated_tokens or [0] * len(opts.texts),
                 result.windows or [1] * len(opts.texts))
    for text, vector, (tokens, dropped, windows) in zip(opts.texts, result.embeddings, counts):
        norm = float((vector**2).sum() ** 0.5)
        head = " ".join(f"{v:+.4f}" for v in vector[:5])
        extra = (f" tokens={tokens}" if tokens is not None else "") + \
            (f" truncated={dropped}" if dropped else "") + \
            (f" windows={windows}" if windows > 1 else "")
        print(f"  norm={norm:.4f} dim={vector.shape[0]}{extra} [{head} ...]  {text[:60]!r}")
    return 0
