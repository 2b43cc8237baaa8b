"""Command line: `python -m export minilm [--repository DIR] [--format F ...] [--force]`."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from export.layout import DEFAULT_REPOSITORY, FORMATS


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the `minilm` export options to a parser and make run_cli its handler."""
    parser.add_argument(
        "--repository", type=Path, default=DEFAULT_REPOSITORY,
        help=f"model repository to write into (default: {DEFAULT_REPOSITORY})",
    )  # fmt: skip
    parser.add_argument(
        "--format", dest="formats", action="extend", nargs="+", choices=FORMATS,
        help="formats to export, repeatable (default: all of %(choices)s)",
    )  # fmt: skip
    parser.add_argument(
        "--force", action="store_true", help="write a new version even if the latest is up to date"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch/onnxruntime threads")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each step")
    parser.set_defaults(handler=run_cli)
    return parser


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the `minilm` subcommand on an existing subparsers object."""
    parser = subparsers.add_parser(
        "minilm", help="export all-MiniLM-L6-v2 as ONNX, TorchScript and INT8 ONNX"
    )
    return configure_parser(parser)


def _print(result: object) -> None:
    print(result.summary(), flush=True)  # type: ignore[attr-defined]


def run_cli(args: argparse.Namespace) -> int:
    """Run the export from parsed arguments, printing one line per model; 0 ok, 1 check failed."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.verbose:
        logging.getLogger("export").setLevel(logging.INFO)
    from export.errors import ExportCheckError
    from export.minilm import export_minilm  # imports torch: only when exporting

    started = time.perf_counter()
    try:
        export_minilm(
            args.repository, tuple(args.formats or FORMATS), force=args.force,
            threads=args.threads, on_result=_print,
        )  # fmt: skip
    except ExportCheckError as exc:
        print(f"export failed, nothing written for this model: {exc}", file=sys.stderr)
        return 1
    print(f"done in {time.perf_counter() - started:.1f}s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m export`."""
    parser = argparse.ArgumentParser(prog="python -m export", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_parser(subparsers)
    args = parser.parse_args(argv)
    return args.handler(args)
