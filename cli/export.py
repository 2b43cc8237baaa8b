"""`tmr export MODEL` and `tmr add MODEL --family F --from SOURCE`."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cli.errors import UsageError
from cli.options import add_command, add_model, add_repository, options, parse_url
from core.host_profile import DEFAULT_MEMORY_BUDGET_MB
from core.variant import REVIEWED, Variant

if TYPE_CHECKING:
    from rich.progress import Progress


@dataclass(frozen=True)
class ExportOptions:
    """What `tmr export` was asked for: one model (or every one), which formats."""

    model: str | None
    all: bool
    repository: Path
    formats: list[str] | None
    force: bool
    threads: int
    verbose: bool


@dataclass(frozen=True)
class AddOptions:
    """What `tmr add` was asked for: a new model of a known family, and where from."""

    model: str
    family: str
    source: str
    front: str | None
    repository: Path
    threads: int
    url: str | None
    verbose: bool
    primary: str | None = None
    no_tune: bool = False
    matryoshka_dims: tuple[int, ...] = ()  # smaller sizes its embeddings may be cut to


def register(sub: argparse._SubParsersAction) -> None:
    """`tmr export` and `tmr add`."""
    parser = add_command(sub, "export", "export a model into new version folders",
                         export_command, lambda a: options(ExportOptions, a))
    add_model(parser, optional=True,
              help="the model: its name, its front model or one of its encoders")
    parser.add_argument("--all", action="store_true", help="every model of the repository")
    add_repository(parser)
    parser.add_argument("--format", dest="formats", action="extend", nargs="+",
                        help="formats to export, repeatable (default: every format); "
                        "`primary`: the one the model's front serves on this host")
    parser.add_argument("--force", action="store_true",
                        help="write a new version even if the latest is up to date")
    parser.add_argument("--threads", type=int, default=2, help="torch/onnxruntime threads")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each step")

    parser = add_command(sub, "add", "add a model of a known family: export, configure, wire",
                         add_model_command, lambda a: options(
                             AddOptions, a, url=a.url and parse_url(a.url, "http")[0]))
    add_model(parser, help="the new model's name; its encoders are MODEL_<format>")
    parser.add_argument("--family", required=True, help="e.g. text_embedding")
    parser.add_argument("--from", dest="source", required=True,
                        help="a model folder, an installed distribution, or parts:NAME-{001..N}")
    parser.add_argument("--front", default=None, help="the front model's name (default: MODEL)")
    add_repository(parser)
    parser.add_argument("--threads", type=int, default=2, help="torch/onnxruntime threads")
    parser.add_argument("--url", default=None,
                        help="HOST:PORT of a running server (explicit mode) that should load "
                             "the new models (default: none)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each step")
    parser.add_argument("--primary", default=None, metavar="FORMAT",
                        help="the format the front calls in its reviewed config (e.g. onnx, "
                             "openvino; default: the family's); `tmr tune` fits it to the host")
    parser.add_argument("--no-tune", action="store_true",
                        help="do not re-tune the host profile afterwards (`tmr tune`)")
    parser.add_argument("--matryoshka-dims", type=matryoshka_dims, default=(), metavar="N,N",
                        help="a text model's smaller sizes its embeddings were trained to be "
                             "cut to (e.g. 256,128), which `dimensions` then accepts; "
                             "default: the folder's config_sentence_transformers.json, else "
                             "none")


def matryoshka_dims(raw: str) -> tuple[int, ...]:
    """`--matryoshka-dims 256,128`: positive sizes, largest first."""
    from core.settings import dims_list

    try:
        return dims_list(raw)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{raw!r}: sizes are positive integers, comma-"
                                         f"separated ({err})") from None


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


def primary_variant(args: ExportOptions) -> Variant:
    """The variant whose primary `--format primary` names: what `tmr serve` serves from
    the repository on this host (the reviewed configs' when no format says `primary`)."""
    from export.pipeline import PRIMARY
    from server.profile import served_variant

    return served_variant(args.repository)[0] if PRIMARY in (args.formats or []) else REVIEWED


def export_command(args: ExportOptions) -> int:
    """Export from parsed arguments, a line per format; 0 ok, 1 a check failed. A refused
    request raises (cli/errors.py gives its line and exit code)."""
    _logging(args.verbose)
    from core.families.catalog import catalog, find
    from export.errors import ExportCheckError
    from export.pipeline import export_model, wanted_formats  # imports torch: when exporting

    if bool(args.model) == bool(args.all):
        raise UsageError("name one model, or --all")
    started = time.perf_counter()
    try:
        variant = primary_variant(args)
        models = (catalog(args.repository, variant) if args.all
                  else [find(args.repository, args.model, variant)])
        total = sum(len(wanted_formats(m, args.formats)) for m in models)
        with progress_bar() as progress:
            stages = Stages(progress, total)
            for model in models:
                export_model(args.repository, model, args.formats, force=args.force,
                             threads=args.threads, on_result=stages.result,
                             on_stage=stages.stage)
    except ExportCheckError as exc:
        print(f"export failed, nothing written for this format: {exc}", file=sys.stderr)
        return 1
    print(f"done in {time.perf_counter() - started:.1f}s")
    return 0


def add_model_command(args: AddOptions) -> int:
    """`tmr add`; 0 added (or already there), 1 a check failed. A refused request raises
    (cli/errors.py gives its line and exit code)."""
    _logging(args.verbose)
    from core.families import family
    from export.errors import ExportCheckError
    from export.pipeline import add_model as add_to_repository

    started = time.perf_counter()
    try:
        total = len(family(args.family).formats)
        with progress_bar() as progress:
            stages = Stages(progress, total)
            add_to_repository(args.repository, args.model, args.family, args.source,
                              args.front, args.threads, on_result=stages.result,
                              primary=args.primary, on_stage=stages.stage,
                              matryoshka_dims=args.matryoshka_dims)
    except ExportCheckError as exc:
        print(f"tmr add failed, nothing was added: {exc}", file=sys.stderr)
        return 1
    print(f"added '{args.model}' ({args.family}) to {args.repository} in "
          f"{time.perf_counter() - started:.1f}s")
    if not args.no_tune:
        from cli.tune import TuneOptions, tune_command

        tune_command(TuneOptions(args.repository, "default", DEFAULT_MEMORY_BUDGET_MB,
                                 show=False, if_stale=True, only=(args.model,)))
    if args.url:
        from core.families.catalog import find
        from server.admin import load_models

        loaded = load_models(args.url, find(args.repository, args.model).models)
        print(f"loaded on {args.url}: {', '.join(loaded)}")
    return 0
