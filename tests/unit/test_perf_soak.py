"""The soak's verdict: memory growth, p99 drift, steady throughput, errors, reloads."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from perf.soak import Sample, joined, verdict


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


def test_each_server_sample_takes_the_locust_window_of_its_index(tmp_path) -> None:
    import json

    from perf.locust_run import LocustRun, read_stats
    from tests.unit.test_locust_run import entry

    entries = [entry("w0000 p1", "POST", {10: 20}), entry("w0000 p2", "gRPC", {30: 80}),
               entry("w0001 p2", "POST", {40: 99}),
               entry("w0001 p2 failed", "gRPC", {5: 1}, failures=1),
               entry("w0002 p2", "POST", {50: 7})]  # the tail after the last sample
    (tmp_path / "load.json").write_text(json.dumps(entries))
    run = LocustRun(read_stats(entries), {("w0001 p2", "StatusCode.UNAVAILABLE"): 1},
                    tmp_path)
    server_side = [replace(point(t, 1000), served_rps=9.0, p50_ms=math.nan) for t in (10, 20)]
    first, second = joined(server_side, run, "load", 10.0)
    assert (first.served_rps, first.p50_ms, first.p99_ms, first.errors) == (10.0, 30, 30, {})
    assert (second.served_rps, second.p99_ms) == (9.9, 40)  # the failure has no latency
    assert second.errors == {"StatusCode.UNAVAILABLE": 1}
    assert second.rss_mb == server_side[1].rss_mb and second.t_s == 20


def test_the_open_loop_is_one_user_a_protocol_at_half_the_rate_each() -> None:
    from types import SimpleNamespace

    from perf.soak import USERS, load_env

    env = load_env(SimpleNamespace(grpc_url="localhost:9001"), 123.4, 10.0)  # type: ignore[arg-type]
    assert USERS == ["OpenLoop", "GrpcOpenLoop"]
    assert float(env["TMR_USER_RPS"]) * 2 == 123.4  # the Stages shape: ceil(123.4 / 61.7) users
    assert (env["TMR_GRPC_HOST"], env["TMR_WINDOW_S"]) == ("localhost:9001", "10.0")
