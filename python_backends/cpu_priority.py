"""A stub's own CPU scheduling: bulk work that yields to the kernel.

Triton never preempts an execution, but the kernel does: a thread under `SCHED_IDLE`
runs only on a core no normal thread wants, and a thread at a high nice value gets a
smaller share of a contended core. A model lowers every thread of its stub under its
config's `cpu_scheduling` (ModelSettings): "bulk", the default, is the server's bulk CPU
policy (core/cpu_policy.py: SCHED_IDLE or nice, never none), "normal" is an interactive
lane's, "idle" or "nice" pin one. Every thread that computes is lowered, its runtime's
pools included, but not the stub's own (its health beat to Triton, its message threads:
a starved health beat makes Triton fail requests with "Stub process ... is not
healthy"), once its instance is set up and warmed (python_backends/base.py `yield_cpu`;
threads started later inherit it), so an interactive lane's processes at normal priority
(core/families/lanes.py) take the cores the moment they wake, and a stub that loads
while other work takes the cores still gets ready. Lowering one's own priority needs no
privilege; raising it back would, so it is never undone.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.cpu_policy import BulkCpu
from core.settings import SCHEDULINGS

BULK, NORMAL, IDLE, NICE = SCHEDULINGS
TASKS = Path("/proc/self/task")


def threads() -> list[int]:
    """The thread ids of this process."""
    return sorted(int(p.name) for p in TASKS.iterdir() if p.name.isdigit())


def scheduling_of(configured: str, nice: int, bulk: BulkCpu) -> tuple[str, int]:
    """(policy, nice) of a stub: its config's `cpu_scheduling`, where "bulk" is the
    server's bulk CPU policy."""
    return (bulk.policy, bulk.nice) if configured == BULK else (configured, nice)


def describe(policy: str, nice: int) -> str:
    """"SCHED_IDLE", "nice N" or "normal"."""
    return {IDLE: "SCHED_IDLE", NICE: f"nice {nice}"}.get(policy, NORMAL)


def lower(policy: str, nice: int, keep: frozenset[int] = frozenset()) -> list[int]:
    """Every thread of this process under `policy` (IDLE: SCHED_IDLE; NICE: `nice`;
    NORMAL: unchanged), but those in `keep` (a front's interactive workers and the thread
    that hands requests to them); the thread ids changed. A thread that ended meanwhile is
    skipped."""
    if policy == NORMAL:
        return []
    changed = []
    for tid in threads():
        if tid in keep:
            continue
        try:
            if policy == IDLE:
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            else:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
        except ProcessLookupError:
            continue
        changed.append(tid)
    return changed
