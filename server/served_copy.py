"""A Triton server of our own on three distinct free ports, serving what `tmr serve` serves on
this host, and the same on a temporary copy of the repository (changed first, if asked).

The one way a command starts a server to measure: `tmr perf sweep` without `--url`
(server/sweep.py), `tmr perf plan --check` (server/plan.py, a copy with the proposal) and
every benchmark in perf/.

    with served_copy(log, edit=lambda repo: ...) as server:
        ...server.grpc_url...
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from core.paths import DEFAULT_REPOSITORY
from core.ports import free_ports
from core.repository import copy_repository
from core.startup import startup_models
from server.launcher import TritonServer
from server.profile import served_variant
from server.settings import ALL_MODELS, Ports, ServerOptions


def free_port_server(repository: Path = DEFAULT_REPOSITORY, log_path: Path | None = None,
                     load_all: bool = True, models: Sequence[str] = ()) -> TritonServer:
    """A server (not started) for `repository` on three distinct free ports, serving what
    `tmr serve` serves on this host (served_variant); `with` it to start it, wait for ready
    and stop it. It loads every model, or with `load_all=False` those `tmr serve` loads at
    start (core.startup), or with `models` those `tmr serve --models` loads."""
    ports = Ports(*free_ports(3))
    variant = served_variant(repository)[0]
    load = ALL_MODELS if load_all and not models else tuple(
        startup_models(repository, variant, wanted=models))
    return TritonServer(ServerOptions(repository=repository, ports=ports, load_models=load,
                                      variant=variant), log_path=log_path)


@contextmanager
def served_copy(log_path: Path | None = None,
                sources: Iterable[Path] = (DEFAULT_REPOSITORY,),
                edit: Callable[[Path], object] | None = None,
                load_all: bool = True) -> Iterator[TritonServer]:
    """A temporary copy of `sources`, changed by `edit(copy)`, served on free ports (every
    model loaded, or with `load_all=False` as `tmr serve` loads them); the copy goes when
    the server has stopped."""
    with tempfile.TemporaryDirectory(prefix="tmr-served-") as tmp:
        repo = copy_repository(sources, Path(tmp) / "repository")
        if edit is not None:
            edit(repo)
        with free_port_server(repo, log_path, load_all) as running:
            yield running
