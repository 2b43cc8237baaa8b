"""What a running server holds in memory, read from /proc: Triton and each model's stubs.

One reader for everyone who reports it: `tmr serve`'s memory line, the `health` model's
report (it runs inside Triton, a child of the server it measures), `tmr tune`'s candidates,
`make bench`'s table and the soak. RSS counts every resident page a process maps, its
shared libraries included, so a sum over processes counts a shared page once per process;
PSS divides each shared page among the processes that map it (the sum is what the server
costs the machine). Both are reported; the budgets are on RSS.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SERVER = "tritonserver"  # the row of the server process itself
STUB = b"triton_python_backend_stub"


def memory_kb(pid: int, proc: Path = Path("/proc")) -> tuple[int, int]:
    """(VmRSS, Pss) of a process in KiB; (0, 0) once it is gone."""
    try:
        rss = next(int(line.split()[1]) for line in (proc / str(pid) / "status").read_text()
                   .splitlines() if line.startswith("VmRSS:"))
        pss = next(int(line.split()[1]) for line in (proc / str(pid) / "smaps_rollup")
                   .read_text().splitlines() if line.startswith("Pss:"))
    except (OSError, StopIteration, ValueError):
        return 0, 0
    return rss, pss


def stub_processes(server_pid: int, proc: Path = Path("/proc")) -> dict[str, list[int]]:
    """Model name -> PIDs of the Python stubs serving it, children of `server_pid`.

    A stub's argv[1] is the model file, `<repository>/<model>/<version>/<file>`."""
    stubs: dict[str, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone, or not ours to read
        if ppid == server_pid and argv[0].endswith(STUB) and len(argv) > 1:
            model = Path(argv[1].decode(errors="replace")).parents[1].name
            stubs.setdefault(model, []).append(int(entry.name))
    return {model: sorted(pids) for model, pids in stubs.items()}


def scheduling(pid: int, proc: Path = Path("/proc")) -> str:
    """The CPU policy a process runs at, as /proc says: "SCHED_IDLE", "nice N" (N > 0) or
    "normal"; "" once it is gone."""
    try:
        fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        nice, policy = int(fields[16]), int(fields[38])  # stat fields 19 and 41
    except (OSError, IndexError, ValueError):
        return ""
    if policy == os.SCHED_IDLE:
        return "SCHED_IDLE"
    return f"nice {nice}" if nice > 0 else "normal"



@dataclass(frozen=True)
class Usage:
    """One row of the table: a model's stubs (or the server process), summed, and the CPU
    policy they run at (core/cpu_policy.py)."""

    processes: int
    rss_mib: float
    pss_mib: float
    cpu: str = ""

    def to_json(self) -> dict[str, float | str]:
        return {"processes": self.processes, "rss_mib": round(self.rss_mib, 1),
                "pss_mib": round(self.pss_mib, 1), **({"cpu": self.cpu} if self.cpu else {})}


def server_memory(server_pid: int, proc: Path = Path("/proc")) -> dict[str, Usage]:
    """Model (or SERVER) -> its processes, RSS MiB, PSS MiB and CPU policy, by name."""
    rows = {SERVER: [server_pid]} | stub_processes(server_pid, proc)
    table = {}
    for name, pids in sorted(rows.items()):
        readings = [memory_kb(p, proc) for p in pids]
        table[name] = Usage(len(pids), sum(r for r, _ in readings) / 1024,
                            sum(p for _, p in readings) / 1024,
                            ", ".join(sorted({policy for p in pids
                                              for policy in thread_schedulings(p, proc)})))
    return table


def thread_schedulings(pid: int, proc: Path = Path("/proc")) -> set[str]:
    """The CPU policies of a process's threads: a front whose workers serve both classes
    runs its bulk workers yielding and its lane's worker at normal (python_backends/
    workers.py), so it shows both; the process's own policy where its threads are gone."""
    try:
        tasks = [int(t.name) for t in (proc / str(pid) / "task").iterdir() if t.name.isdigit()]
    except OSError:
        tasks = []
    found = {scheduling(t, proc / str(pid) / "task") for t in tasks} - {""}
    return found or {scheduling(pid, proc)} - {""}


def tree_memory(root_pid: int, proc: Path = Path("/proc")) -> Usage:
    """A process and all its descendants, summed (a peer server and its workers)."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    pids, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo += children.get(pid, [])
    readings = [memory_kb(p, proc) for p in pids]
    alive = [r for r in readings if r != (0, 0)]
    return Usage(len(alive), sum(r for r, _ in alive) / 1024, sum(p for _, p in alive) / 1024)


def total(table: dict[str, Usage]) -> Usage:
    """The whole server: every row summed."""
    return Usage(sum(u.processes for u in table.values()),
                 sum(u.rss_mib for u in table.values()),
                 sum(u.pss_mib for u in table.values()))


def summary(table: dict[str, Usage]) -> str:
    """One line: the total, then each row by RSS, largest first."""
    whole = total(table)
    rows = sorted(table.items(), key=lambda item: -item[1].rss_mib)
    return (f"{whole.rss_mib:,.0f} MiB RSS (PSS {whole.pss_mib:,.0f}) in {whole.processes} "
            f"processes: " + ", ".join(f"{name} {u.rss_mib:.0f}" for name, u in rows))
