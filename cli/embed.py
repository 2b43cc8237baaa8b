"""`tmr embed TEXT... [--file PATH]`: embed texts through a running server, print a short
summary (or --json), and write the vectors with --out (.npy or .jsonl)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

import numpy as np
from tmr_client.contract import TRUNCATE_VALUES, OverlengthPolicy
from tmr_client.core import Protocol

from cli.errors import UsageError
from cli.names import FRONT, resolve_name
from cli.options import (
    add_call_model,
    add_command,
    add_json,
    add_queue_timeout,
    add_server,
    options,
    resolve_server,
    text_front,
)
from core.paths import DEFAULT_REPOSITORY

T = TypeVar("T")


@dataclass(frozen=True)
class TextCallOptions:
    """What every text command was asked for: the texts, the server, the front model, the
    priority and the queue timeout."""

    texts: list[str]
    url: str
    protocol: Protocol
    model: str
    priority: int | None
    timeout_s: float | None


@dataclass(frozen=True)
class EmbedOptions(TextCallOptions):
    """What `tmr embed` was asked for."""

    truncate: str | None = None  # a TRUNCATE_CHOICES spelling or None (the model's policy)
    files: list[Path] = field(default_factory=list)  # more texts, one a line; `-`: stdin
    out: Path | None = None  # where to write the vectors (.npy or .jsonl)
    json: bool = False
    prompt_name: str | None = None  # one of the model's prompts; None: its default
    dimensions: int | None = None  # one of its Matryoshka sizes; None: its own


# `--truncate`: the request parameter's string spellings (true, false and the policies).
TRUNCATE_CHOICES = [value for value in TRUNCATE_VALUES if isinstance(value, str)]


def truncate_policy(spelling: str | None) -> OverlengthPolicy | None:
    """The overlength policy a `--truncate` spelling names; None leaves it to the model."""
    return None if spelling is None else TRUNCATE_VALUES[spelling]


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
    add_queue_timeout(parser)


def text_call_options(kind: type[T], args: argparse.Namespace) -> T:
    """A text command's options: the server it calls and the front model, resolved."""
    url, protocol = resolve_server(args.url, args.protocol)
    return options(kind, args, url=url, protocol=protocol,
                   model=resolve_name(DEFAULT_REPOSITORY, args.model, FRONT, strict=False))


def make_options(args: argparse.Namespace) -> EmbedOptions:
    return text_call_options(EmbedOptions, args)


def add_texts(parser: argparse.ArgumentParser, each: str) -> None:
    """A text command's inputs: TEXT arguments, then --file PATH (repeatable)."""
    parser.add_argument("texts", nargs="*", metavar="TEXT", help=f"the texts, {each} (or --file)")
    parser.add_argument("--file", dest="files", action="append", type=Path, default=[],
                        metavar="PATH", help="read texts from PATH, one a line (`-`: stdin); "
                                             "repeatable, after the TEXT arguments")


def register(sub: argparse._SubParsersAction) -> None:
    parser = add_command(sub, "embed", "embed texts through the running server",
                         embed_command, make_options)
    add_texts(parser, "one vector each")
    parser.add_argument("--out", type=Path, default=None, metavar="PATH",
                        help="write the vectors to PATH: .npy (one row per text, float32) "
                             "or .jsonl (one {\"text\", \"embedding\"} a line)")
    add_call_options(parser, text_front())
    parser.add_argument("--truncate", choices=TRUNCATE_CHOICES, default=None,
                        help="a text over the model's length: cut it (true, truncate), "
                        "refuse it (false, reject) or embed it in windows pooled into one "
                        "vector (chunk); default: the model's overlength_policy")
    parser.add_argument("--dimensions", type=int, default=None, metavar="N",
                        help="cut each vector to N values, re-normalised: one of the model's "
                             "Matryoshka sizes (`tmr add --matryoshka-dims`); default: all")
    add_prompt_name(parser)
    add_json(parser)


def add_prompt_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt-name", default=None, metavar="NAME",
                        help="put the model's prompt NAME before each text (its "
                             "config_sentence_transformers.json prompts, e.g. query); "
                             "default: the model's default prompt, if it has one")


def read_texts(texts: list[str], files: list[Path], stdin: TextIO) -> list[str]:
    """The TEXT arguments, then each file's non-empty lines (`-`: stdin)."""
    found = list(texts)
    for path in files:
        lines = stdin.read().splitlines() if str(path) == "-" else \
            path.read_text(encoding="utf-8").splitlines()
        found += [line for line in lines if line.strip()]
    if not found:
        raise UsageError("no text to embed: give TEXT arguments or --file PATH")
    return found


OUT_FORMATS = (".npy", ".jsonl")


def check_out(path: Path | None) -> None:
    if path is not None and path.suffix not in OUT_FORMATS:
        raise UsageError(f"--out {path}: tmr embed writes {' or '.join(OUT_FORMATS)}")


def write_vectors(path: Path, texts: list[str], vectors: np.ndarray) -> None:
    """`.npy`: the matrix; `.jsonl`: one {"text", "embedding"} per line."""
    if path.suffix == ".npy":
        np.save(path, vectors.astype(np.float32))
        return
    with path.open("w", encoding="utf-8") as out:
        for text, vector in zip(texts, vectors):
            out.write(json.dumps({"text": text, "embedding": vector.tolist()}) + "\n")


def embed_command(opts: EmbedOptions) -> int:
    from tmr_client.sync import Client

    from server.settings import admin_key

    texts = read_texts(opts.texts, opts.files, sys.stdin)
    check_out(opts.out)
    with Client(opts.url, protocol=opts.protocol, model=opts.model,
                admin_key=admin_key()) as client, \
            progress_bar() as progress:
        task = progress.add_task("embedding", total=len(texts))
        result = client.embed_with_info(
            texts, priority=opts.priority, timeout_ms=timeout_ms(opts.timeout_s),
            truncate=truncate_policy(opts.truncate), prompt_name=opts.prompt_name,
            dimensions=opts.dimensions,
            on_progress=lambda done, total: progress.update(task, completed=done, total=total))
    if opts.out is not None:
        write_vectors(opts.out, texts, result.embeddings)
    rows = summary_rows(texts, result)
    versions = ",".join(sorted(set(result.model_versions)))
    if opts.json:
        print(json.dumps({"model": result.model_name, "versions": versions,
                          "url": opts.url, "protocol": opts.protocol,
                          "out": str(opts.out) if opts.out else None, "texts": rows}))
        return 0
    print(f"{result.model_name} v{versions} over {opts.protocol} ({opts.url})")
    for row in rows[:SHOWN]:
        extra = "".join(f" {k}={row[k]}" for k in ("tokens", "truncated", "windows")
                        if row[k] not in (None, 0, 1))
        head = " ".join(f"{v:+.4f}" for v in row["head"])
        print(f"  norm={row['norm']:.4f} dim={row['dim']}{extra} [{head} ...]  "
              f"{row['text'][:60]!r}")
    if len(rows) > SHOWN:
        print(f"  ... and {len(rows) - SHOWN} more")
    if opts.out is not None:
        print(f"wrote {len(texts)} vectors to {opts.out}")
    return 0


SHOWN = 20  # texts the text report lists


def summary_rows(texts: list[str], result: object) -> list[dict]:
    """Per text: its norm, dimension, first values, tokens, truncated tokens, windows (and,
    for --json, the whole vector)."""
    n = len(texts)
    counts = zip(result.tokens or [None] * n,  # type: ignore[attr-defined]
                 result.truncated_tokens or [0] * n,  # type: ignore[attr-defined]
                 result.windows or [1] * n)  # type: ignore[attr-defined]
    return [{"text": text, "norm": float((vector ** 2).sum() ** 0.5), "dim": vector.shape[0],
             "tokens": tokens, "truncated": dropped, "windows": windows,
             "head": [float(v) for v in vector[:5]], "embedding": vector.tolist()}
            for text, vector, (tokens, dropped, windows)
            in zip(texts, result.embeddings, counts)]  # type: ignore[attr-defined]


def progress_bar() -> Any:
    """rich's bar on stderr, only on a terminal (a log gets nothing)."""
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    return Progress(console=console, transient=True, disable=not console.is_interactive)
