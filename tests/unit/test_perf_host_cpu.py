"""Who used the host's CPU in a window (perf/host_cpu.py), and the soak's host-or-server
report built on it (perf/soak.py drift, Control and its reading of the load's cores)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from perf import host_cpu
from perf.host_cpu import CpuReading, machine_times, process_cpu_s, share
from perf.soak import Control, cpu_reading, drift

TICK = host_cpu.TICK_S


def test_the_machine_line_splits_busy_steal_and_total() -> None:
    busy, steal, total = machine_times("cpu  100 10 50 800 20 0 5 15 0 0")
    assert busy == pytest.approx(165 * TICK)
    assert steal == pytest.approx(15 * TICK)
    assert total == pytest.approx((165 + 800 + 20 + 15) * TICK)


def test_a_process_line_gives_its_parent_and_cpu_even_with_spaces_in_its_name() -> None:
    stat = "4242 (triton python stub) S 17 4242 17 0 -1 4194560 1 0 0 0 300 45 0 0 20 0 9"
    assert process_cpu_s(stat) == (17, pytest.approx(345 * TICK))


def test_a_window_splits_the_busy_cores_into_server_load_and_others() -> None:
    before = CpuReading(0.0, busy_s=0.0, steal_s=0.0, total_s=0.0, server_s=0.0, own_s=0.0)
    after = CpuReading(10.0, busy_s=17.0, steal_s=1.0, total_s=20.0, server_s=12.0, own_s=2.0)
    cpu = share(before, after)
    assert (cpu.server_cores, cpu.load_cores, cpu.other_cores) == (1.2, 0.2, 0.3)
    assert cpu.steal_pct == 5.0


def test_this_process_tree_is_read_from_proc() -> None:
    reading = host_cpu.read(os.getpid())
    assert reading.server_s > 0 and reading.total_s >= reading.busy_s > 0


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
            before = cpu_reading(server.pid)
            assert locust.stdout is not None and locust.stdout.readline() == "burnt\n"
            after = cpu_reading(server.pid)  # the "Locust" child has burnt 0.3 s, alive
        finally:
            server.kill()
            locust.kill()
    assert after.own_s - before.own_s >= 0.25
    assert after.server_s - before.server_s < 0.05
