"""Resident memory of a running server: Triton and each model's Python stubs, from /proc."""

from __future__ import annotations

from pathlib import Path

from server.launcher import stub_processes


def memory_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, Pss) of a process in KiB; (0, 0) once it is gone."""
    try:
        rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text()
                   .splitlines() if line.startswith("VmRSS:"))
        pss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/smaps_rollup")
                   .read_text().splitlines() if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return 0, 0
    return rss, pss


def server_memory(server_pid: int) -> dict[str, dict[str, float]]:
    """Model (or "tritonserver") -> processes, RSS MiB and PSS MiB: the server and its
    Python stubs, summed per model."""
    rows = {"tritonserver": [server_pid]} | stub_processes(server_pid)
    table = {}
    for name, pids in sorted(rows.items()):
        readings = [memory_kb(p) for p in pids]
        table[name] = {"processes": len(pids), "rss_mib": sum(r for r, _ in readings) / 1024,
                       "pss_mib": sum(p for _, p in readings) / 1024}
    return table
