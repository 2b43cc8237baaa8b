"""How much of the machine other work used while a point ran.

The two cores are shared: a point measured while something else compiles is not a
measurement of the server. From /proc, the machine's busy CPU time minus the time of this
process and every process it started (the servers, their stubs) is other work's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (not idle, iowait)


@dataclass(frozen=True)
class CpuSample:
    """Busy clock ticks of the whole machine and of this process tree, at one moment."""

    machine: int
    ours: int


def machine_busy(stat_text: str) -> int:
    """Busy ticks from the `cpu` line of /proc/stat."""
    fields = [int(x) for x in stat_text.splitlines()[0].split()[1:]]
    return sum(fields[i] for i in BUSY_FIELDS if i < len(fields))


def parse_stat(text: str) -> tuple[int, int]:
    """(ppid, utime + stime) from one /proc/<pid>/stat (the name may hold spaces)."""
    rest = text.rsplit(")", 1)[1].split()
    return int(rest[1]), int(rest[11]) + int(rest[12])


def tree_ticks(stats: dict[int, tuple[int, int]], root: int) -> int:
    """The ticks of `root` and all its descendants, from pid -> (ppid, ticks)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0))[1]
        todo += children.get(pid, [])
    return total


def process_stats() -> dict[int, tuple[int, int]]:
    stats = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = parse_stat((entry / "stat").read_text())
            except (OSError, IndexError, ValueError):
                continue  # gone, or not readable
    return stats


def sample() -> CpuSample:
    """Now: the machine's busy ticks and this process tree's."""
    return CpuSample(machine_busy((PROC / "stat").read_text()),
                     tree_ticks(process_stats(), os.getpid()))


def foreign_share(before: CpuSample, after: CpuSample, seconds: float,
                  cores: int | None = None, hz: int | None = None) -> float:
    """The share (0..1) of all cores that work outside this process tree used between two
    samples `seconds` apart."""
    cores = cores or os.cpu_count() or 1
    hz = hz or os.sysconf("SC_CLK_TCK")
    other = (after.machine - before.machine) - (after.ours - before.ours)
    return max(0.0, min(1.0, other / (seconds * cores * hz)))
