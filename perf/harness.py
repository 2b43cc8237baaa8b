"""One run of a benchmark: its results folder, a copy of the repository, a Triton server on
distinct free ports, and its report. Every perf module that starts a server starts it here.

    out = harness.run_dir("overload")
    with harness.served_copy(out / "tritonserver.log") as server:
        ...
    harness.write_report(out, "overload", markdown, data)
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from core.files import write_atomically
from core.paths import DEFAULT_REPOSITORY, results_dir
from core.ports import free_ports
from core.repository import copy_repository
from core.startup import startup_models
from core.versions import PROFILE_ENV
from perf.stamp import current_stamp
from server.launcher import TritonServer
from server.profile import select
from server.settings import ALL_MODELS, Ports, ServerOptions


def run_dir(kind: str) -> Path:
    """A new perf/results/<kind>-<timestamp>/ (git-ignored)."""
    out = results_dir(kind, time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    return out


@functools.cache
def served_profile() -> tuple[str | None, str]:
    """What `tmr serve` serves on this host (server.profile.select over the repository):
    (its --model-config-name, the line saying why). Every benchmark measures it, and a
    copy of the repository carries its configs/host.pbtxt. Where $TMR_CONFIG_NAME is set
    (the test suite sets it empty: the reviewed configs), that variant instead."""
    if PROFILE_ENV in os.environ:
        name = os.environ[PROFILE_ENV]
        return name or None, f"serving {name or 'the reviewed configs'} (${PROFILE_ENV})"
    return select(DEFAULT_REPOSITORY)


def server(repository: Path = DEFAULT_REPOSITORY, log_path: Path | None = None,
           load_all: bool = True) -> TritonServer:
    """A server (not started) for `repository` on three distinct free ports, serving what
    `tmr serve` serves on this host (served_profile); `with` it to start it, wait for ready
    and stop it. It loads every model, or with `load_all=False` those `tmr serve` loads at
    start (core.startup)."""
    ports = Ports(*free_ports(3))
    name = served_profile()[0]
    load = ALL_MODELS if load_all else tuple(startup_models(repository, name or ""))
    return TritonServer(ServerOptions(repository=repository, ports=ports, load_models=load,
                                      model_config_name=name), log_path=log_path)


@contextmanager
def served_copy(log_path: Path | None = None,
                sources: Iterable[Path] = (DEFAULT_REPOSITORY,),
                edit: Callable[[Path], object] | None = None,
                load_all: bool = True) -> Iterator[TritonServer]:
    """A temporary copy of `sources`, changed by `edit(copy)`, served on free ports (every
    model loaded, or with `load_all=False` as `tmr serve` loads them); the copy goes when
    the server has stopped."""
    with tempfile.TemporaryDirectory(prefix="tmr-perf-") as tmp:
        repo = copy_repository(sources, Path(tmp) / "repository")
        if edit is not None:
            edit(repo)
        with server(repo, log_path, load_all) as running:
            yield running


def write_report(out: Path, name: str, markdown: str, data: Any = None) -> None:
    """`<name>.md` and, with `data`, `<name>.json` in `out`; prints the markdown and where
    the results are."""
    markdown = f"{markdown}\n\n{current_stamp().markdown()}"
    write_atomically(out / f"{name}.md", markdown + "\n")
    if data is not None:
        write_atomically(out / f"{name}.json", json.dumps(data, indent=1, default=float) + "\n")
    print(markdown)
    print(f"\nresults in {out}")
