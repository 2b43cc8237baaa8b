"""`tmr classify FILE...`: classify JPEG, PNG or WebP files through a running server and
print each file's top-k labels and probabilities."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from cli.embed import add_call_options, timeout_ms
from cli.options import add_command, options, repository_front, resolve_url
from client.core import Protocol
from core.families import IMAGE_CLASSIFICATION
from core.paths import DEFAULT_REPOSITORY

FAMILY = IMAGE_CLASSIFICATION.name


@dataclass(frozen=True)
class ClassifyOptions:
    """What `tmr classify` was asked for."""

    files: list[Path]
    url: str
    protocol: Protocol
    model: str | None  # None: no --model, and the repository has no image front
    top_k: int | None
    priority: int | None
    timeout_s: float | None


def make_options(args: argparse.Namespace) -> ClassifyOptions:
    return options(ClassifyOptions, args, url=resolve_url(args.url, args.protocol),
                   model=args.model or repository_front(FAMILY))


def register(sub: argparse._SubParsersAction) -> None:
    parser = add_command(sub, "classify",
                         "classify JPEG, PNG or WebP files through the running server",
                         classify_command, make_options)
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    add_call_options(parser, None, f"the {FAMILY} front that {DEFAULT_REPOSITORY.name}/ "
                     "marks default_front")
    parser.add_argument("--top-k", type=int, default=None,
                        help="classes per image (default: the model's)")


def classify_command(opts: ClassifyOptions) -> int:
    """Each file in its own call, so an error names its file; 1 if any file failed."""
    from client.errors import TritonClientError
    from client.sync import Client

    if opts.model is None:
        print(f"error: no {FAMILY} front model in {DEFAULT_REPOSITORY}; name one with --model",
              file=sys.stderr)
        return 2
    failed = 0
    with Client(opts.url, protocol=opts.protocol, model=opts.model) as client:
        for path in opts.files:
            try:
                result = client.classify([path.read_bytes()], top_k=opts.top_k,
                                         priority=opts.priority,
                                         timeout_ms=timeout_ms(opts.timeout_s))
            except OSError as err:
                print(f"error: {path}: cannot read it: {err.strerror or err}", file=sys.stderr)
                failed += 1
                continue
            except TritonClientError as err:
                print(f"error: {path}: {type(err).__name__}: {err}", file=sys.stderr)
                failed += 1
                continue
            print(f"{path}  ({result.served_by[0]})")
            for rank in result.predictions[0]:
                print(f"  {rank.probability:7.4f}  {rank.label}  (class {rank.class_id})")
    return 1 if failed else 0
