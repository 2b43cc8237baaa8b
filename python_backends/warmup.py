"""An instance's warmup as the Python models see it (core/families/warmup.py has the samples).

Triton runs a config's `model_warmup` samples on each instance right after `initialize`
and before the model reports READY, on that instance's own thread and before any request
(core r24.10, `TritonModelInstance::WarmUp`). So the first `executions(config)` batches an
instance executes are its warmup: `WarmupRuns` counts them and logs one line for each
("warmup 1/4 on <model>_0_1: ..."), the record of each instance warmed before READY.
What a model does differently for them: an encoder with an idle session runs both of its
sessions (python_backends/tensor_model.py), a front calls its encoder only once the
server has started (python_backends/front_warmup.py, `server_started`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from core.families.warmup import executions
from python_backends.pb import Log

LISTEN = "0A"  # a TCP socket's state in /proc/net/tcp: listening


class WarmupRuns:
    """Which executions of this instance are its warmup, and the log line of each."""

    def __init__(self, config: dict, log: Log, instance: str) -> None:
        self.total = executions(config)
        self.done = 0
        self.log, self.instance = log, instance
        self.note = ""  # what the execution under way warmed, when the model says

    @property
    def active(self) -> bool:
        """The execution under way is a warmup sample (asked before `finished`)."""
        return self.done < self.total

    def finished(self, requests: int, took_s: float) -> None:
        """One warmup execution done: counted and logged, with its `note`."""
        self.done += 1
        detail = f" ({self.note})" if self.note else ""
        self.note = ""
        self.log.info(f"warmup {self.done}/{self.total} on {self.instance}: {requests} "
                      f"request(s) in {took_s * 1000:.1f} ms{detail}")


def listening_inodes(tables: Iterable[str]) -> set[str]:
    """The socket inodes in LISTEN state of /proc/net/tcp and tcp6 texts."""
    found = set()
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN:
                found.add(fields[9])
    return found


def socket_inodes(links: Iterable[str]) -> set[str]:
    """The inodes of the sockets among a process's fd links ("socket:[12345]")."""
    return {link[len("socket:["):-1] for link in links if link.startswith("socket:[")}


def server_started(pid: int | None = None, proc: Path = Path("/proc")) -> bool:
    """Whether Triton (this stub's parent) has started: it listens on a TCP port. Its
    HTTP, gRPC and metrics endpoints open only once every model of its start is loaded
    (r24.10 src/main.cc: TRITONSERVER_ServerNew, then StartEndpoints), and until then it
    takes no BLS call. Read from /proc, with no call to Triton: asking Triton while it
    starts can crash it (python_backends/front_warmup.py)."""
    pid = os.getppid() if pid is None else pid
    fds = proc / str(pid) / "fd"
    try:
        names = os.listdir(fds)
        tables = [(proc / "net" / name).read_text() for name in ("tcp", "tcp6")
                  if (proc / "net" / name).exists()]
    except OSError:
        return False
    return bool(socket_inodes(_link(fds / fd) for fd in names) & listening_inodes(tables))


def _link(path: Path) -> str:
    """An fd's link, or "" when it closed meanwhile."""
    try:
        return os.readlink(path)
    except OSError:
        return ""
