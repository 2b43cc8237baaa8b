"""Who used the host's CPU, from /proc (Linux only): `/proc/stat` for the whole machine,
`/proc/<pid>/stat` for each process, summed over process trees.

Two views of a window between two `read()`s: the soak's `share` (the server's tree, the
load's cores: this process and its children outside the server's tree, everyone else's,
and the hypervisor's steal; a soak that drifts while `other_cores` or `steal_pct` grows is
watching its host, not its server) and the peer comparison's `foreign_share` (the share
of all cores that work outside this process tree used: the cores are shared, and a point
measured while something else compiles is not a measurement of the server).
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
    server_s: float  # the server's tree (0 without one)
    ours_s: float  # this process's tree, alive (the server's too, when it is our child)
    reaped_s: float  # this process's children that have exited and been waited for


@dataclass(frozen=True)
class CpuShare:
    """A window's CPU, in cores (1.0 = one core busy the whole window)."""

    server_cores: float
    load_cores: float
    other_cores: float
    steal_pct: float  # of the machine's CPU time


def machine_times(stat: str | None = None) -> tuple[float, float, float]:
    """(busy, steal, total) seconds of every core, from /proc/stat (or its text): busy
    leaves out idle, iowait and steal; total is all four."""
    line = (stat or (PROC / "stat").read_text()).splitlines()[0]
    fields = [int(x) for x in line.split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq
    return busy * TICK_S, steal * TICK_S, (busy + idle + iowait + steal) * TICK_S


def process_cpu_s(stat: str) -> tuple[int, float]:
    """(parent pid, utime + stime seconds) from the text of /proc/<pid>/stat (the name may
    hold spaces)."""
    after_name = stat.rsplit(")", 1)[1].split()
    return int(after_name[1]), (int(after_name[11]) + int(after_name[12])) * TICK_S


def processes() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds) of every process alive now."""
    found = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = process_cpu_s((entry / "stat").read_text())
            except (OSError, IndexError, ValueError):
                continue  # gone since the listing, or not readable
    return found


def tree_cpu_s(procs: dict[int, tuple[int, float]], root: int) -> float:
    """CPU seconds of `root` and all its descendants, from pid -> (parent pid, seconds)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += procs.get(pid, (0, 0.0))[1]
        todo += children.get(pid, [])
    return total


def read(server_pid: int | None = None) -> CpuReading:
    busy, steal, total = machine_times()
    procs, own = processes(), os.times()
    return CpuReading(time.monotonic(), busy, steal, total,
                      tree_cpu_s(procs, server_pid) if server_pid else 0.0,
                      tree_cpu_s(procs, os.getpid()), own.children_user + own.children_system)


def share(before: CpuReading, after: CpuReading) -> CpuShare:
    """The window between two readings, in cores; the load is this process's tree outside
    the server's."""
    wall = max(after.wall_s - before.wall_s, 1e-9)
    busy = (after.busy_s - before.busy_s) / wall
    server = (after.server_s - before.server_s) / wall
    own = (after.ours_s - before.ours_s) / wall - server
    total = after.total_s - before.total_s
    steal = 100 * (after.steal_s - before.steal_s) / total if total > 0 else 0.0
    return CpuShare(round(server, 3), round(own, 3), round(max(busy - server - own, 0.0), 3),
                    round(steal, 2))


def foreign_share(before: CpuReading, after: CpuReading, cores: int | None = None) -> float:
    """The share (0..1) of all cores that work outside this process tree used (steal
    included) between two readings. A child that exited meanwhile (Locust, once a point is
    over) is in no live process's time but in our reaped children's, so it counts as ours."""
    cores = cores or os.cpu_count() or 1
    machine = (after.busy_s + after.steal_s) - (before.busy_s + before.steal_s)
    ours = (after.ours_s + after.reaped_s) - (before.ours_s + before.reaped_s)
    wall = max(after.wall_s - before.wall_s, 1e-9)
    return max(0.0, min(1.0, (machine - ours) / (wall * cores)))
