"""The soak's verdict: memory growth, p99 drift, steady throughput, errors, reloads."""

from __future__ import annotations

import gc
import time

import pytest

from perf.soak import Sample, quiet_caller_heap, verdict


def point(t: float, rss: float, p99: float = 50.0, rps: float = 100.0, errors: int = 0,
          reloads: int = 0) -> Sample:
    return Sample(t, rps, 20.0, p99, {"QueueFullError": errors} if errors else {},
                  {"tritonserver": 300.0, "embed": rss}, reloads, 100.0, 5000.0)


def test_a_steady_run_holds_every_target_counting_growth_only_after_warm_up() -> None:
    points = [point(30, 900)] + [point(t, 1000 + t / 100) for t in range(60, 1800, 30)]
    result = verdict(points, warmup_s=60, stretch_s=300)
    assert result.passed, result.checks
    assert result.checks["RSS growth over the second half (MB)"][0] < 20  # warm-up not counted


def test_one_step_of_the_allocator_in_the_first_half_is_not_a_leak() -> None:
    points = [point(t, 1000 + (40 if t >= 300 else 0)) for t in range(60, 1800, 30)]
    assert verdict(points, warmup_s=60, stretch_s=300).checks[
        "RSS growth over the second half (MB)"][0] == 0


def test_one_step_of_the_allocator_in_the_second_half_is_not_a_leak() -> None:
    # The CI soak of 2026-12-01 21:57: one 66 MB step at 80 s of 120, flat after it.
    rss = {40: 4103.6, 50: 4105.0, 60: 4098.1, 70: 4105.6, 80: 4171.7, 90: 4172.2,
           100: 4171.8, 111: 4174.6}
    growth = verdict([point(t, mb) for t, mb in rss.items()], warmup_s=30, stretch_s=30).checks[
        "RSS growth over the second half (MB)"]
    assert growth[2] and growth[0] == pytest.approx(2 * 2.4, abs=0.01), growth


def test_a_leak_counts_in_full_and_growth_in_both_quarters_misses_the_target() -> None:
    leak = [point(t, 1000 + t / 2) for t in range(60, 1800, 30)]  # 0.5 MB/s
    growth = verdict(leak, warmup_s=60, stretch_s=300).checks[
        "RSS growth over the second half (MB)"]
    assert not growth[2] and growth[0] == pytest.approx(435, abs=30), growth
    two_steps = [point(t, 1000 + 30 * (t >= 1200) + 30 * (t >= 1600)) for t in range(60, 1800, 30)]
    assert verdict(two_steps, warmup_s=60, stretch_s=300).checks[
        "RSS growth over the second half (MB)"][0] == 60


def test_leaks_decay_errors_and_reloads_each_miss_their_target() -> None:
    points = [point(t, 1000 + t / 10, p99=50 + t / 20, rps=100 - t / 30, errors=int(t == 900),
                    reloads=int(t > 1000)) for t in range(30, 1800, 30)]
    checks = verdict(points, warmup_s=60, stretch_s=300).checks
    assert {name for name, (_, _, held) in checks.items() if not held} == {
        "RSS growth over the second half (MB)", "p99 last / first stretch",
        "throughput last / first stretch", "errors", "watchdog reloads"}


def test_the_progress_line_counts_the_errors_of_the_last_minute_and_shows_the_latest_rss() -> None:
    from perf.soak import live_status

    assert live_status([]) == "waiting for the first sample"
    points = [point(30, 1000, errors=5), point(60, 1010, errors=2), point(90, 1020, errors=1)]
    assert live_status(points) == "errors in the last minute 3  RSS 1320 MB"  # t 60 and 90
    assert live_status(points[:1]) == "errors in the last minute 5  RSS 1300 MB"


def test_the_progress_bar_stays_silent_in_a_log_and_stops_with_the_load(
        capsys: pytest.CaptureFixture[str]) -> None:
    import threading
    from types import SimpleNamespace

    from perf.soak import load_progress

    before = threading.active_count()
    with load_progress(2.0, SimpleNamespace(samples=[point(30, 1000)])):  # type: ignore[arg-type]
        time.sleep(1.1)  # one tick of the bar
        print("  30/120 s  a sampler line")
    assert capsys.readouterr().out == "  30/120 s  a sampler line\n"
    assert threading.active_count() == before


def test_the_load_runs_with_the_callers_heap_frozen_and_its_collections_timed() -> None:
    held = [[i] for i in range(10_000)]  # the caller's heap, as pytest's after many tests
    with quiet_caller_heap() as pauses:
        assert gc.get_freeze_count() >= len(held)
        gc.collect()
    assert gc.get_freeze_count() == 0
    assert pauses.collections[2] == 1 and pauses.longest_s > 0
    gc.collect()
    assert pauses.collections[2] == 1  # removed from gc.callbacks on the way out
