"""Why a tritonserver stop is slow: stack dumps while it still runs, and the stop's phase
read from its log afterwards.

A stop still running at 80% of Triton's exit timeout has a model that does not unload:
`slow_stop_report` asks every stub still alive for its Python stacks (into the server's
log; python_backends/diagnostics.py installs the handler), writes tritonserver's native
stacks beside the log (gdb, where installed) and names the stubs in one line.
`stop_phase` tells from the log where the exit timeout went.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from enum import StrEnum
from pathlib import Path

from core.stacks import DUMP_STACKS_SIGNAL

_CONNECTIONS = re.compile(r"Found [1-9]\d* \S+ service connections")
_IN_FLIGHT = re.compile(r"Found [1-9]\d* model versions that have in-flight inferences")
_LIVE = re.compile(r"Found [1-9]\d* live models")


def native_stacks(pid: int, out: Path) -> Path | None:
    """Every thread's native stack of process `pid` written to `out` by gdb (None without
    gdb, or when it cannot attach): where a server that does not stop is waiting."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return None
    try:
        result = subprocess.run([gdb, "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                                capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if "Thread " not in result.stdout:
        return None
    out.write_text(result.stdout)
    return out


def slow_stop_report(server_pid: int, stubs: dict[str, list[int]], log_path: Path,
                     after_s: float) -> str:
    """Signal `stubs` (model -> PIDs) to write their stacks into `log_path`, dump the
    server's native stacks beside it, and say so in one line."""
    for pids in stubs.values():
        for stub in pids:
            with contextlib.suppress(OSError):
                os.kill(stub, DUMP_STACKS_SIGNAL)
    time.sleep(1.0)  # the stubs write their stacks
    live = ", ".join(f"{model} (pids {' '.join(map(str, pids))})"
                     for model, pids in sorted(stubs.items())) or "none"
    native = native_stacks(server_pid, log_path.with_suffix(".native-stacks.txt"))
    return (f"tritonserver still running {after_s:.0f} s after SIGTERM; stubs alive: "
            f"{live}; their threads' stacks are in {log_path}"
            + (f", tritonserver's own in {native}" if native else ""))


class StopPhase(StrEnum):
    """Where Triton's last stop spent its exit timeout."""

    CLEAN = "clean"  # it did not run out
    CONNECTIONS = "connections"  # clients kept HTTP connections open: 2.51 waits for them
    IN_FLIGHT = "in-flight"  # inferences still running
    UNLOAD = "unload"  # every inference done, yet some model never unloaded


def stop_phase(log_text: str) -> StopPhase:
    """The StopPhase of the last stop in Triton's log."""
    stop = log_text[max(0, log_text.rfind("Signal (")):]
    if "Exit timeout expired" not in stop:
        return StopPhase.CLEAN
    if _CONNECTIONS.search(stop):
        return StopPhase.CONNECTIONS
    if _IN_FLIGHT.search(stop):
        return StopPhase.IN_FLIGHT
    return StopPhase.UNLOAD if _LIVE.search(stop) else StopPhase.CLEAN
