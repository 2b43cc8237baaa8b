"""`tmr rerank QUERY DOC... [--file PATH]`: rank documents by their relevance to a query
through a running text_ranking front, and print the ranking (or --json)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tmr_client.core import Protocol

from cli.embed import TRUNCATE_CHOICES, add_call_options, read_texts, timeout_ms, truncate_policy
from cli.errors import UsageError
from cli.names import FRONT, resolve_name
from cli.options import add_command, add_json, options, repository_front, resolve_server
from core.families import TEXT_RANKING
from core.paths import DEFAULT_REPOSITORY

FAMILY = TEXT_RANKING.name
NO_RERANKER = (f"no {FAMILY} front model in {DEFAULT_REPOSITORY}: name one with --model, or "
               f"add one with `tmr add NAME --family {FAMILY} --from FOLDER`")
SHOWN_CHARS = 60  # of each document, in the text report


@dataclass(frozen=True)
class RerankOptions:
    """What `tmr rerank` was asked for."""

    query: str
    documents: list[str]
    url: str
    protocol: Protocol
    model: str
    priority: int | None
    timeout_s: float | None
    files: list[Path] = field(default_factory=list)  # more documents, one a line; `-`: stdin
    top_n: int | None = None  # None: every document
    raw_scores: bool = False
    truncate: str | None = None  # a TRUNCATE_CHOICES spelling; None: the model's policy
    json: bool = False


def reranker(model: str | None) -> str:
    """The front a rerank calls: `--model` (resolved like any call's), else the repository's
    default text_ranking front; UsageError when there is none."""
    if model:
        return resolve_name(DEFAULT_REPOSITORY, model, FRONT, strict=False)
    found = repository_front(FAMILY)
    if found is None:
        raise UsageError(NO_RERANKER)
    return found


def make_options(args: argparse.Namespace) -> RerankOptions:
    url, protocol = resolve_server(args.url, args.protocol)
    return options(RerankOptions, args, url=url, protocol=protocol, model=reranker(args.model))


def top_n(text: str) -> int:
    """`--top-n N`: an integer >= 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give an integer >= 1")
    return int(text)


def register(sub: argparse._SubParsersAction) -> None:
    parser = add_command(sub, "rerank", "rank documents by relevance to a query (a reranker)",
                         rerank_command, make_options)
    parser.add_argument("query", metavar="QUERY", help="the query to rank the documents by")
    parser.add_argument("documents", nargs="*", metavar="DOC",
                        help="the documents, one score each (or --file)")
    parser.add_argument("--file", dest="files", action="append", type=Path, default=[],
                        metavar="PATH", help="read documents from PATH, one a line (`-`: "
                                             "stdin); repeatable, after the DOC arguments")
    add_call_options(parser, None, f"the {FAMILY} front that {DEFAULT_REPOSITORY.name}/ "
                     "marks default_front")
    parser.add_argument("--top-n", type=top_n, default=None, metavar="N",
                        help="print the N best documents only (default: all)")
    parser.add_argument("--raw-scores", action="store_true",
                        help="the model's logits instead of its relevance (its activation, "
                        "sigmoid by default)")
    parser.add_argument("--truncate", choices=TRUNCATE_CHOICES, default=None,
                        help="a pair over the model's length: cut it (true, truncate), refuse "
                        "it (false, reject) or score the document in windows, keeping the "
                        "best (chunk); default: the model's overlength_policy")
    add_json(parser)


def read_documents(opts: RerankOptions) -> list[str]:
    """The DOC arguments, then each file's non-empty lines; UsageError when there is none."""
    try:
        return read_texts(opts.documents, opts.files, sys.stdin)
    except UsageError:
        raise UsageError("no document to rank: give DOC arguments or --file PATH") from None


def rerank_command(opts: RerankOptions) -> int:
    from tmr_client.sync import Client

    from server.settings import admin_key

    documents = read_documents(opts)
    with Client(opts.url, protocol=opts.protocol, model=opts.model,
                admin_key=admin_key()) as client:
        result = client.rerank_with_info(
            opts.query, documents, model=opts.model, top_n=opts.top_n,
            raw_scores=opts.raw_scores, truncate=truncate_policy(opts.truncate),
            priority=opts.priority, timeout_ms=timeout_ms(opts.timeout_s))
    if opts.json:
        print(json.dumps(json_rows(result.ranked)))
        return 0
    versions = ",".join(sorted(set(result.model_versions)))
    print(f"{result.model_name} v{versions} over {opts.protocol} ({opts.url}): "
          f"{len(documents)} documents for {opts.query[:SHOWN_CHARS]!r}")
    print("\n".join(table(result.ranked)))
    return 0


def json_rows(ranked: list[Any]) -> list[dict[str, Any]]:
    """--json: one {index, relevance_score, document} per ranked document, best first."""
    return [{"index": r.index, "relevance_score": r.score, "document": r.document}
            for r in ranked]


def table(ranked: list[Any]) -> list[str]:
    """The text report: rank, score, index and the document's first characters."""
    lines = [f"{'rank':>4}  {'score':>9}  {'index':>5}  document"]
    lines += [f"{rank:>4}  {r.score:>9.4f}  {r.index:>5}  {r.document[:SHOWN_CHARS]!r}"
              for rank, r in enumerate(ranked, 1)]
    return lines
