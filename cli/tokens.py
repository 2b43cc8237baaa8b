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

from cli.embed import (
    TextCallOptions,
    add_call_options,
    add_prompt_name,
    add_texts,
    read_texts,
    text_call_options,
    timeout_ms,
)
from cli.options import add_command, add_json, text_front


@dataclass(frozen=True)
class TokensOptions(TextCallOptions):
    """What `tmr tokens` was asked for."""

    files: list[Path] = field(default_factory=list)
    prompt_name: str | None = None
    json: bool = False


def register(sub: argparse._SubParsersAction) -> None:
    parser = add_command(sub, "tokens", "count texts' tokens as the served model does",
                         tokens_command, lambda a: text_call_options(TokensOptions, a))
    add_texts(parser, "one count each")
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
