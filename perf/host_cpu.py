"""Who used the host's CPU in a window: the server (tritonserver and its stubs), this
process (the load generator), and everything else, plus the hypervisor's steal.

Read from /proc (Linux only): `/proc/stat` for the whole machine, `/proc/<pid>/stat` for
each process of the server's tree. A soak that drifts while `other_cores` or `steal_pct`
grows is watching its host, not its server.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


@dataclass(frozen=True)
class CpuReading:
    """Cumulative CPU seconds at one instant."""

    wall_s: float
    busy_s: float  # the whole machine, every core, steal excluded
    steal_s: float
    total_s: float  # busy + idle + iowait + steal: cores x wall time
    server_s: float
    own_s: float


@dataclass(frozen=True)
class CpuShare:
    """A window's CPU, in cores (1.0 = one core busy the whole window)."""

    server_cores: float
    load_cores: float
    other_cores: float
    steal_pct: float  # of the machine's CPU time


def machine_times(stat: str) -> tuple[float, float, float]:
    """(busy, steal, total) seconds from the text of /proc/stat's first line."""
    fields = [int(x) for x in stat.split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq
    return busy * TICK_S, steal * TICK_S, (busy + idle + iowait + steal) * TICK_S


def process_cpu_s(stat: str) -> tuple[int, float]:
    """(parent pid, utime + stime seconds) from the text of /proc/<pid>/stat."""
    after_name = stat.rsplit(")", 1)[1].split()
    return int(after_name[1]), (int(after_name[11]) + int(after_name[12])) * TICK_S


def tree_cpu_s(root: int) -> float:
    """CPU seconds of `root` and of every descendant alive now."""
    parents: dict[int, tuple[int, float]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = process_cpu_s((entry / "stat").read_text())
            except (OSError, IndexError, ValueError):
                continue  # gone since the listing
    inside, total, grew = {root}, 0.0, True
    while grew:
        grew = False
        for pid, (ppid, _) in parents.items():
            if ppid in inside and pid not in inside:
                inside.add(pid)
                grew = True
    for pid in inside:
        total += parents.get(pid, (0, 0.0))[1]
    return total


def read(server_pid: int) -> CpuReading:
    busy, steal, total = machine_times((PROC / "stat").read_text().splitlines()[0])
    own = os.times()
    return CpuReading(time.monotonic(), busy, steal, total, tree_cpu_s(server_pid),
                      own.user + own.system)


def share(before: CpuReading, after: CpuReading) -> CpuShare:
    """The window between two readings, in cores."""
    wall = max(after.wall_s - before.wall_s, 1e-9)
    busy = (after.busy_s - before.busy_s) / wall
    server = (after.server_s - before.server_s) / wall
    own = (after.own_s - before.own_s) / wall
    total = after.total_s - before.total_s
    steal = 100 * (after.steal_s - before.steal_s) / total if total > 0 else 0.0
    return CpuShare(round(server, 3), round(own, 3), round(max(busy - server - own, 0.0), 3),
                    round(steal, 2))
