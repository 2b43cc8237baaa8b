"""`tmr classify FILE...`: classify JPEG, PNG or WebP files through a running server and
print each file's top-k labels and probabilities."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tmr_client.core import Protocol

from cli.embed import add_call_options, timeout_ms
from cli.errors import Tried, UsageError, message_for, with_scheme
from cli.names import FRONT, resolve_name
from cli.options import add_command, add_json, options, repository_front, resolve_server
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
    json: bool = False


def make_options(args: argparse.Namespace) -> ClassifyOptions:
    url, protocol = resolve_server(args.url, args.protocol)
    return options(ClassifyOptions, args, url=url, protocol=protocol,
                   model=resolve_name(DEFAULT_REPOSITORY, args.model, FRONT, strict=False)
                   if args.model else repository_front(FAMILY))


def register(sub: argparse._SubParsersAction) -> None:
    parser = add_command(sub, "classify",
                         "classify JPEG, PNG or WebP files through the running server",
                         classify_command, make_options)
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE",
                        help="the images, one call each")
    add_call_options(parser, None, f"the {FAMILY} front that {DEFAULT_REPOSITORY.name}/ "
                     "marks default_front")
    parser.add_argument("--top-k", type=int, default=None,
                        help="classes per image (default: the model's)")
    add_json(parser)


def classify_command(opts: ClassifyOptions) -> int:
    """Each file in its own call, so an error names its file; 1 if any file failed."""
    from tmr_client.errors import ServerUnreachableError, TritonClientError
    from tmr_client.sync import Client

    from server.settings import admin_key

    if opts.model is None:
        raise UsageError(f"no {FAMILY} front model in {DEFAULT_REPOSITORY}; "
                         "name one with --model")
    failed, done = 0, []
    with Client(opts.url, protocol=opts.protocol, model=opts.model,
                admin_key=admin_key()) as client:
        for path in opts.files:
            try:
                result = client.classify([path.read_bytes()], top_k=opts.top_k,
                                         priority=opts.priority,
                                         timeout_ms=timeout_ms(opts.timeout_s))
            except OSError as err:
                print(f"tmr classify: error: {path}: cannot read it: {err.strerror or err}",
                      file=sys.stderr)
                failed += 1
                continue
            except ServerUnreachableError:
                raise  # the same for every file: the error boundary's one line
            except TritonClientError as err:
                text, _ = message_for(err, Tried("classify", with_scheme(opts.url, opts.protocol),
                                                 opts.model))
                print(f"tmr classify: error: {path}: {text}", file=sys.stderr)
                failed += 1
                continue
            done.append(file_report(path, result))
            if not opts.json:
                print_file(done[-1])
    if opts.json:
        print(json.dumps({"model": opts.model, "url": opts.url, "protocol": opts.protocol,
                          "files": done, "failed": failed}, indent=2))
    return 1 if failed else 0


def file_report(path: Path, result: Any) -> dict:
    """One file's top-k classes and what served it."""
    return {"file": str(path), "served_by": result.served_by[0],
            "classes": [{"class_id": r.class_id, "label": r.label,
                         "probability": float(r.probability)} for r in result.predictions[0]]}


def print_file(report: dict) -> None:
    print(f"{report['file']}  ({report['served_by']})")
    for rank in report["classes"]:
        print(f"  {rank['probability']:7.4f}  {rank['label']}  (class {rank['class_id']})")
