"""`tmr export NAME` and `tmr add NAME --family F --from SOURCE` (also `python -m export`)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from core.paths import DEFAULT_REPOSITORY

if TYPE_CHECKING:
    from rich.progress import Progress


def add_export_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help="export a model of the repository into new version folders")
    parser.add_argument("name", nargs="?",
                        help="the model: its name, its front model or one of its encoders")
    parser.add_argument("--all", action="store_true", help="every model of the repository")
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    parser.add_argument("--format", dest="formats", action="extend", nargs="+",
                        help="formats to export, repeatable (default: every format)")
    parser.add_argument("--force", action="store_true",
                        help="write a new version even if the latest is up to date")
    parser.add_argument("--threads", type=int, default=2, help="torch/onnxruntime threads")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each step")
    parser.set_defaults(func=export_command)


def add_add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "add", help="add a model of a known family: export, configure, wire to its front")
    parser.add_argument("name", help="the new model's name; its encoders are NAME_<format>")
    parser.add_argument("--family", required=True, help="e.g. text_embedding")
    parser.add_argument("--from", dest="source", required=True,
                        help="a model folder, an installed distribution, or parts:NAME-{001..N}")
    parser.add_argument("--front", default=None, help="the front model's name (default: NAME)")
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--url", default=None,
                        help="a running server (explicit mode) that should load the new models")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each step")
    parser.set_defaults(func=add_command)


def _print(result: object) -> None:
    print(result.summary(), flush=True)  # type: ignore[attr-defined]


class Stages:
    """An export's progress: a line as each stage starts (seconds since the command began)
    and the result line as each format ends, both plain prints that read the same in a CI
    log; on a terminal, a transient bar above them: the stage, formats done of all, elapsed."""

    def __init__(self, progress: Progress, total: int) -> None:
        self.progress, self.began = progress, time.perf_counter()
        self.task = progress.add_task("export", total=total)

    def stage(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.began:6.1f}s] {text}", flush=True)
        self.progress.update(self.task, description=text)

    def result(self, result: object) -> None:
        _print(result)
        self.progress.advance(self.task)


def progress_bar() -> Progress:
    """rich's Progress with a spinner, formats done of all and the elapsed time; off when
    stdout is no terminal (rich would add a blank line to the log)."""
    from rich import get_console
    from rich.progress import MofNCompleteColumn, Progress, SpinnerColumn, TimeElapsedColumn

    return Progress(SpinnerColumn(), *Progress.get_default_columns()[:2], MofNCompleteColumn(),
                    TimeElapsedColumn(), transient=True,
                    disable=not get_console().is_interactive)


def _logging(verbose: bool) -> None:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("export.progress").setLevel(logging.INFO)  # a slow stage's own steps
    if verbose:
        logging.getLogger("export").setLevel(logging.INFO)


def export_command(args: argparse.Namespace) -> int:
    """Export from parsed arguments, a line per format; 0 ok, 1 a check failed, 2 bad name."""
    _logging(args.verbose)
    from core.families.catalog import UnknownModelError, catalog, find
    from export.errors import ExportCheckError
    from export.pipeline import export_model, wanted_formats  # imports torch: when exporting

    if bool(args.name) == bool(args.all):
        print("error: name one model, or --all", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:
        models = catalog(args.repository) if args.all else [find(args.repository, args.name)]
        total = sum(len(wanted_formats(m, args.formats)) for m in models)
        with progress_bar() as progress:
            stages = Stages(progress, total)
            for model in models:
                export_model(args.repository, model, args.formats, force=args.force,
                             threads=args.threads, on_result=stages.result,
                             on_stage=stages.stage)
    except (UnknownModelError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ExportCheckError as exc:
        print(f"export failed, nothing written for this format: {exc}", file=sys.stderr)
        return 1
    print(f"done in {time.perf_counter() - started:.1f}s")
    return 0


def add_command(args: argparse.Namespace) -> int:
    """`tmr add`; 0 added (or already there), 1 a check failed, 2 refused."""
    _logging(args.verbose)
    from export.errors import ExportCheckError
    from export.pipeline import AddError, add_model
    from export.sources import SourceError

    started = time.perf_counter()
    try:
        add_model(args.repository, args.name, args.family, args.source, args.front,
                  args.threads, on_result=_print)
    except (AddError, SourceError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ExportCheckError as exc:
        print(f"tmr add failed, nothing was added: {exc}", file=sys.stderr)
        return 1
    print(f"added '{args.name}' ({args.family}) to {args.repository} in "
          f"{time.perf_counter() - started:.1f}s")
    if args.url:
        from core.families.catalog import find
        from server.admin import load_models

        loaded = load_models(args.url, find(args.repository, args.name).models)
        print(f"loaded on {args.url}: {', '.join(loaded)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m export`: the `export` and `add` commands."""
    parser = argparse.ArgumentParser(prog="python -m export", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_export_parser(subparsers)
    add_add_parser(subparsers)
    args = parser.parse_args(argv)
    return args.func(args)
