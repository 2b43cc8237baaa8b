"""Whether the other instances of a model are running a batch right now, across processes.

Each Python-backend instance is its own process. An instance holds an exclusive flock on
its own file in a folder shared by the model's instances (per server, model and version)
while it runs a batch; another instance asks with a non-blocking shared lock on each of
its peers' files. A peer that finished a batch within the last `recent_ms` counts as busy
too (it stamps its file's mtime as it finishes): under load an instance is idle only for
the moment between two batches, while a lone client's next request comes after a round
trip. The answer is a snapshot: good enough to choose a thread count, never used for
correctness. The kernel drops the locks of a process that dies.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def peers_folder(model: str, version: str, server_pid: int | None = None) -> Path:
    """The folder the instances of one model version share, under one server process."""
    pid = os.getppid() if server_pid is None else server_pid
    return Path(tempfile.gettempdir()) / f"tmr-busy-{pid}" / f"{model}-{version}"


class BusyPeers:
    """An instance's own busy flag and a look at its peers' flags."""

    def __init__(self, folder: Path, instance: str, recent_ms: float = 6.0) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.name = folder, f"{instance}.lock"
        self.recent_ns = int(recent_ms * 1e6)
        self.own = os.open(folder / self.name, os.O_RDWR | os.O_CREAT, 0o600)
        self.peers: dict[str, int] = {}

    def others_busy(self) -> bool:
        """True when some other instance holds its flag, or let it go within recent_ms."""
        since = time.time_ns() - self.recent_ns
        for name in os.listdir(self.folder):
            if name == self.name or not name.endswith(".lock"):
                continue
            fd = self.peers.get(name)
            if fd is None:
                try:
                    fd = self.peers[name] = os.open(self.folder / name, os.O_RDONLY)
                except FileNotFoundError:
                    continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fd, fcntl.LOCK_UN)
            if os.fstat(fd).st_mtime_ns > since:
                return True
        return False

    @contextmanager
    def running(self) -> Iterator[None]:
        """Hold this instance's flag for the duration of a batch."""
        fcntl.flock(self.own, fcntl.LOCK_EX)
        try:
            yield
        finally:
            os.utime(self.own)  # the finish time peers read
            fcntl.flock(self.own, fcntl.LOCK_UN)

    def close(self) -> None:
        for fd in [self.own, *self.peers.values()]:
            os.close(fd)
        self.peers.clear()


class IdleAwareRunner:
    """Two runners of one artifact: `run`, an instance's share of the cores, and
    `idle_run`, all of them; each batch takes `idle_run` when no peer instance is busy."""

    def __init__(self, run: Callable[[Any], Any], idle_run: Callable[[Any], Any],
                 peers: BusyPeers) -> None:
        self.run, self.idle_run, self.peers = run, idle_run, peers

    def __call__(self, feeds: Any) -> tuple[Any, bool]:
        """(the outputs, whether the idle runner ran them)."""
        with self.peers.running():  # flag first: two instances starting at once see each other
            idle = not self.peers.others_busy()
            return (self.idle_run if idle else self.run)(feeds), idle

    def close(self) -> None:
        self.peers.close()
