"""Who used the host's CPU (core/cpu_share.py): the soak's window and host-or-server report
(perf/soak.py drift, Control), and the share other work used during a peers' point."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from core import cpu_share as host_cpu
from core.cpu_share import CpuReading, foreign_share, machine_times, process_cpu_s, share
from perf.soak import Control, drift

TICK = host_cpu.TICK_S


def test_the_machine_line_splits_busy_steal_and_total() -> None:
    busy, steal, total = machine_times("cpu  100 10 50 800 20 0 5 15 0 0")
    assert busy == pytest.approx(165 * TICK)
    assert steal == pytest.approx(15 * TICK)
    assert total == pytest.approx((165 + 800 + 20 + 15) * TICK)
    busy, steal, _ = machine_times("cpu  100 5 50 9000 70 1 2 3 0 0\ncpu0 50 2 25 4500 35 0 1 1\n")
    assert busy + steal == pytest.approx((100 + 5 + 50 + 1 + 2 + 3) * TICK)  # the first line


def test_a_process_line_gives_its_parent_and_cpu_even_with_spaces_in_its_name() -> None:
    stat = "4242 (triton python stub) S 17 4242 17 0 -1 4194560 1 0 0 0 300 45 0 0 20 0 9"
    assert process_cpu_s(stat) == (17, pytest.approx(345 * TICK))
    stat = "42 (python -m x) S 7 42 42 0 -1 4194304 1 0 0 0 30 12 0 0 20 0 1 0"
    assert process_cpu_s(stat) == (7, pytest.approx(42 * TICK))


def test_a_tree_sums_a_process_and_all_its_descendants() -> None:
    procs = {1: (0, 5.0), 10: (1, 7.0), 11: (10, 3.0), 12: (10, 2.0), 20: (1, 100.0)}
    assert host_cpu.tree_cpu_s(procs, 10) == 12.0
    assert host_cpu.tree_cpu_s(procs, 99) == 0.0


def test_a_window_splits_the_busy_cores_into_server_load_and_others() -> None:
    before = CpuReading(0.0, busy_s=0.0, steal_s=0.0, total_s=0.0, server_s=0.0, ours_s=0.0,
                        reaped_s=0.0)
    after = CpuReading(10.0, busy_s=17.0, steal_s=1.0, total_s=20.0, server_s=12.0, ours_s=14.0,
                       reaped_s=9.0)  # ours: the server's tree and the load's 2.0
    cpu = share(before, after)
    assert (cpu.server_cores, cpu.load_cores, cpu.other_cores) == (1.2, 0.2, 0.3)
    assert cpu.steal_pct == 5.0


def test_this_process_tree_is_read_from_proc() -> None:
    reading = host_cpu.read(os.getpid())
    assert reading.server_s > 0 and reading.total_s >= reading.busy_s > 0
    assert 0 < reading.ours_s <= reading.busy_s + reading.steal_s
    assert host_cpu.read().server_s == 0.0


def test_the_foreign_share_is_machine_time_outside_our_tree_over_all_cores() -> None:
    def at(wall: float, busy: float, ours: float, reaped: float = 0.0) -> CpuReading:
        return CpuReading(wall, busy - 1, 1.0, 0.0, 0.0, ours, reaped)  # steal is busy here

    assert foreign_share(at(0, 10, 4), at(1, 13, 6), cores=2) == pytest.approx(0.5)
    assert foreign_share(at(0, 10, 4), at(1, 11, 6), cores=2) == 0.0
    assert foreign_share(at(0, 10, 4), at(1, 13, 5, reaped=1), cores=2) == pytest.approx(0.5)


def test_an_exited_client_process_is_counted_as_ours() -> None:
    before = host_cpu.read()
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\n"
                    "while time.process_time() - t < 0.3: pass"], check=True)
    after = host_cpu.read()
    assert after.ours_s - before.ours_s < 0.2  # gone from the live tree...
    assert after.reaped_s - before.reaped_s >= 0.2  # ...and in the reaped children's time


def test_the_control_blames_the_server_only_when_the_soaked_one_stays_slower() -> None:
    assert Control((30.0, 32.0, 31.0), (30.0, 29.0, 31.0)).ratio == pytest.approx(31 / 30)
    assert "not the server's" in Control((30.0, 32.0, 31.0), (30.0, 29.0, 31.0)).finding
    assert "is the server's" in Control((40.0, 42.0, 41.0), (30.0, 29.0, 31.0)).finding


def test_the_drift_report_pairs_the_first_and_last_stretch_medians() -> None:
    from tests.unit.test_perf_soak import point

    first = [point(0, 900, p99=20.0), point(10, 900, p99=22.0)]
    last = [point(20, 900, p99=30.0)]
    assert drift(first, last)["p99 ms"] == (21.0, 30.0)


def test_the_soak_counts_its_children_outside_the_server_as_the_load() -> None:
    burn = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
            "print('burnt', flush=True)\ntime.sleep(30)")
    with subprocess.Popen(["sleep", "30"]) as server, subprocess.Popen(
            [sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True) as locust:
        try:
            before = host_cpu.read(server.pid)
            assert locust.stdout is not None and locust.stdout.readline() == "burnt\n"
            after = host_cpu.read(server.pid)  # the "Locust" child has burnt 0.3 s, alive
        finally:
            server.kill()
            locust.kill()
    assert (after.ours_s - after.server_s) - (before.ours_s - before.server_s) >= 0.25
    assert after.server_s - before.server_s < 0.05
