"""`tmr classify FILE...`: classify JPEG or PNG files through a running server and print
each file's top-k labels and probabilities."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from cli.embed import add_call_options, timeout_ms
from cli.options import add_command, options, resolve_url
from client.core import Protocol

DEFAULT_IMAGE_MODEL = "efficientnet_lite0"  # the repository's ImageNet front model


@dataclass(frozen=True)
class ClassifyOptions:
    """What `tmr classify` was asked for."""

    files: list[Path]
    url: str
    protocol: Protocol
    model: str
    top_k: int | None
    priority: int | None
    timeout_s: float | None


def make_options(args: argparse.Namespace) -> ClassifyOptions:
    return options(ClassifyOptions, args, url=resolve_url(args.url, args.protocol))


def register(sub: argparse._SubParsersAction) -> None:
    parser = add_command(sub, "classify", "classify JPEG or PNG files through the running server",
                         classify_command, make_options)
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    add_call_options(parser, DEFAULT_IMAGE_MODEL)
    parser.add_argument("--top-k", type=int, default=None,
                        help="classes per image (default: the model's)")


def classify_command(opts: ClassifyOptions) -> int:
    """Each file in its own call, so an error names its file; 1 if any file failed."""
    from client.errors import TritonClientError
    from client.sync import Client

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
