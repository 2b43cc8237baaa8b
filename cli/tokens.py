"""`tmr tokens TEXT... [--file PATH]`: each text's tokens as the served model counts them
(special tokens and the prompt included) and what each overlength policy would do with
it, without running the encoder: a long document's budget before sending it."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tmr_client.contract import OVERLENGTH_POLICIES
from tmr_client.core import Protocol

from cli.embed import add_call_options, add_prompt_name, read_texts, timeout_ms
from cli.names import FRONT, resolve_name
from cli.options import add_command, add_json, options, resolve_server, text_front
from core.paths import DEFAULT_REPOSITORY


@dataclass(frozen=True)
class TokensOptions:
    """What `tmr tokens` was asked for."""

    texts: list[str]
    url: str
    protocol: Protocol
    model: str
    priority: int | None
    timeout_s: float | None
    files: list[Path] = field(default_factory=list)
    prompt_name: str | None = None
    json: bool = False


def make_options(args: argparse.Namespace) -> TokensOptions:
    url, protocol = resolve_server(args.url, args.protocol)
    return options(TokensOptions, args, url=url, protocol=protocol,
                   model=resolve_name(DEFAULT_REPOSITORY, args.model, FRONT, strict=False))


def register(sub: argparse._SubParsersAction) -> None:
    parser = add_command(sub, "tokens", "count texts' tokens as the served model does",
                         tokens_command, make_options)
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="the texts (or --file)")
    parser.add_argument("--file", dest="files", action="append", type=Path, default=[],
                        metavar="PATH", help="read texts from PATH, one a line (`-`: stdin)")
    add_call_options(parser, text_front())
    add_prompt_name(parser)
    add_json(parser)


def tokens_command(opts: TokensOptions) -> int:
    from tmr_client.sync import Client

    from server.settings import admin_key

    texts = read_texts(opts.texts, opts.files, sys.stdin)
    with Client(opts.url, protocol=opts.protocol, model=opts.model,
                admin_key=admin_key()) as client:
        result = client.count_tokens(texts, prompt_name=opts.prompt_name,
                                     priority=opts.priority,
                                     timeout_ms=timeout_ms(opts.timeout_s))
    rows = [{"text": text, "tokens": c.tokens, "truncated_tokens": c.truncated_tokens,
             "windows": c.windows, **{p: c.outcome(p) for p in OVERLENGTH_POLICIES}}
            for text, c in zip(texts, result.counts)]
    if opts.json:
        print(json.dumps({"model": result.model_name, "total": result.total, "texts": rows}))
        return 0
    print(f"{result.model_name}: {result.total} tokens in {len(texts)} texts")
    for row in rows:
        fate = "fits" if row["reject"] == "fits" else ", ".join(
            f"{p}: {row[p]}" for p in OVERLENGTH_POLICIES)
        print(f"  {row['tokens']:>6}  {fate:<44} {row['text'][:50]!r}")
    return 0
