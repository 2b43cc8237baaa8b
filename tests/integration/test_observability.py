"""The real Prometheus scraping the session's real Triton: recorded series, coverage, alerts.

Prometheus runs the production rules with every `for:` shortened to 1 s and a 1 s scrape
and evaluation interval, so an overload of a few seconds shows in the alert states.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from core.ports import free_port
from python_backends.structured_log import FIELDS, parse_line
from server.launcher import TritonServer
from server.observability import (
    DASHBOARDS_DIR,
    RULES_FILE,
    PrometheusServer,
    base_metrics,
    metric_names,
    prometheus_values,
    shorten_for,
    write_config_dir,
)
from server.watchdog import Watchdog
from tests.integration.helpers import assert_serving, reset_router, steady_high_priority_load
from tests.load import sdk_open_loop

# Exported by Triton only where it sees a GPU: allowed to be absent on the CPU server.
GPU_ONLY_METRICS = {"nv_gpu_memory_used_bytes", "nv_gpu_memory_total_bytes",
                    "nv_gpu_utilization", "nv_gpu_power_usage"}
# The front models' per-version rollout series: their labels name a candidate version, so
# they exist once a rollout has sent traffic (tests/integration/test_rollout.py checks them).
ROLLOUT_ONLY_METRICS = {"tmr_rollout_calls_total", "tmr_rollout_call_errors_total",
                        "tmr_rollout_rows_total", "tmr_rollout_call_seconds_bucket",
                        "tmr_rollout_call_seconds_count", "tmr_rollout_call_seconds_sum",
                        "tmr_rollout_disagreement_sum", "tmr_rollout_agreement_rows_total",
                        "tmr_rollout_agreement_below_total"}
# Both priorities far above the ~220 infer/s this machine serves, for long enough to fill
# both queues (512 + 128) past 80%.
OVERLOAD_RPS = 1200
# The queue must stay over 80% for two evaluations, not just touch it. On a slow or busy
# machine one burst may not hold it there, so the overload repeats in bursts until both
# alerts fire (or the budget runs out and the test fails).
OVERLOAD_BURST_S = 8.0
OVERLOAD_BUDGET_S = 40.0
QUEUE_ALERTS = ("TmrQueueFilling", "TmrQueueNearlyFull")
_NAME = re.compile(r"^(?:# TYPE )?([a-zA-Z_:][a-zA-Z0-9_:]*)", re.MULTILINE)


@pytest.fixture(scope="module")
def watchdog_target(triton: TritonServer) -> str:
    """The watchdog's own /metrics endpoint. Its loop is not started: it would reload
    models of the shared session server."""
    port = free_port()
    Watchdog(triton.http_url, triton.metrics_url, [], metrics_port=port)
    return f"localhost:{port}"


@pytest.fixture(scope="module")
def prometheus(triton: TritonServer, watchdog_target: str,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    values = prometheus_values(f"localhost:{triton.opts.ports.metrics}", watchdog_target,
                               scrape_interval="1s", evaluation_interval="1s")
    config = write_config_dir(tmp_path_factory.mktemp("prometheus"), values,
                              shorten_for(RULES_FILE.read_text(), "1s"))
    with PrometheusServer(config.parent) as server:
        # Prometheus applies new targets every 5 s: load sent before it scrapes is lost.
        wait_for(server, 'count_over_time(up{job="triton"}[1m]) >= 2')
        yield server


def wait_for(prom: PrometheusServer, expr: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """The first non-empty result of `expr`, polled; fails the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = prom.query(expr)
        if result:
            return result
        time.sleep(0.5)
    pytest.fail(f"no result for {expr!r} within {timeout_s:.0f} s")


def value(sample: dict[str, Any]) -> float:
    return float(sample["value"][1])


def exposed_names(url: str) -> set[str]:
    """Metric names an endpoint declares (`# TYPE`) or has samples for; a declared
    histogram with no samples yet declares its _bucket, _sum and _count series."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    histograms = re.findall(r"^# TYPE (\S+) histogram$", text, re.MULTILINE)
    return ({m for m in _NAME.findall(text) if m != "#"}
            | {f"{h}_{part}" for h in histograms for part in ("bucket", "sum", "count")})


def referenced_metrics() -> set[str]:
    """Every metric a rule or a dashboard panel reads, recording rules expanded."""
    rules = [r for g in yaml.safe_load(RULES_FILE.read_text())["groups"] for r in g["rules"]]
    recording = {r["record"]: r["expr"] for r in rules if "record" in r}
    names = {n for r in rules for n in metric_names(r["expr"])}
    for path in DASHBOARDS_DIR.glob("*.json"):
        for panel in json.loads(path.read_text())["panels"]:
            names |= {n for t in panel.get("targets", []) for n in metric_names(t["expr"])}
    return base_metrics(names, recording)


@pytest.mark.timeout(180)
def test_p99_and_batch_size_series_are_sane_under_load(triton: TritonServer,
                                                       prometheus: PrometheusServer) -> None:
    # Priority 2: the shared front's batches (priority 1 goes to the lane)
    served, errors = asyncio.run(steady_high_priority_load(triton.grpc_url, 3.0, priority=2))
    assert served and not errors, errors[:3]
    p99 = wait_for(prometheus,
                   'model_quantile:tmr_request_latency_ms:max{model="embed",quantile="0.99"} > 0')
    batch = wait_for(prometheus, 'model:tmr_batch_size:avg1m{model="embed"} >= 0')
    print(f"\nembed p99 {value(p99[0]):.1f} ms, average batch {value(batch[0]):.2f} rows")
    assert math.isfinite(value(p99[0])) and value(p99[0]) > 0
    assert math.isfinite(value(batch[0])) and value(batch[0]) >= 1


@pytest.mark.timeout(120)
def test_every_metric_of_the_rules_and_dashboards_is_exposed(
        triton: TritonServer, prometheus: PrometheusServer, watchdog_target: str) -> None:
    wait_for(prometheus, 'up{job="watchdog"} == 1')
    exposed = (exposed_names(triton.metrics_url) | exposed_names(f"http://{watchdog_target}")
               | prometheus.series_names())
    needed = referenced_metrics()
    assert needed >= GPU_ONLY_METRICS, "GPU_ONLY_METRICS lists metrics nothing reads"
    print(f"\nabsent on this CPU server (GPU only): {sorted(GPU_ONLY_METRICS - exposed)}")
    assert needed - exposed - GPU_ONLY_METRICS - ROLLOUT_ONLY_METRICS == set()


@pytest.mark.timeout(240)
def test_overload_drives_the_queue_alerts_through_pending_to_firing(
        triton: TritonServer, prometheus: PrometheusServer) -> None:
    wait_for(prometheus, 'model:tmr_queue_capacity:sum{model="embed"}')
    seen: set[tuple[str, str]] = set()
    done = threading.Event()

    def watch_alerts() -> None:
        while not done.is_set():
            seen.update((a["labels"]["alertname"], a["state"]) for a in prometheus.alerts())
            done.wait(0.25)

    watcher = threading.Thread(target=watch_alerts, daemon=True)
    watcher.start()
    try:
        deadline = time.monotonic() + OVERLOAD_BUDGET_S
        burst = 0
        while time.monotonic() < deadline and not all(
                (alert, "firing") in seen for alert in QUEUE_ALERTS):
            asyncio.run(sdk_open_loop(triton.grpc_url, OVERLOAD_RPS, OVERLOAD_BURST_S,
                                      high_share=0.5, seed=11 + burst))
            burst += 1
        history = wait_for(prometheus, 'count by (alertname, alertstate) '
                                       '(max_over_time(ALERTS{alertname=~"TmrQueue.*"}[2m]))')
        peak = wait_for(prometheus, 'max_over_time(model:tmr_queue_fill:ratio{model="embed"}[2m])')
        fills = prometheus.query('model:tmr_queue_fill:ratio{model="embed"}[2m]')
    finally:
        done.set()
        watcher.join(10)
        reset_router(triton.http_url)
    seen |= {(s["metric"]["alertname"], s["metric"]["alertstate"]) for s in history}
    trace = [f"{float(v):.2f}" for _, v in fills[0]["values"]] if fills else []
    print(f"\n{burst} bursts; peak embed queue fill {value(peak[0]):.0%}; "
          f"alerts seen: {sorted(seen)}; fill per scrape: {' '.join(trace)}")
    for alert in QUEUE_ALERTS:
        assert {(alert, "pending"), (alert, "firing")} <= seen, (seen, trace)
    assert_serving(triton.http_url)


def test_backend_batch_log_lines_are_json_with_the_documented_fields(
        triton: TritonServer) -> None:
    asyncio.run(steady_high_priority_load(triton.grpc_url, 0.5, priority=2))
    records = [r for r in map(parse_line, triton.log_text().splitlines())
               if r and r.get("event") == "batch"]
    models = {r["model"] for r in records}
    assert {"embed", "minilm_onnx"} <= models, models
    for record in records:
        assert tuple(record) == FIELDS
        # 0 rows: every request of that batch was refused (the bad-input tests share the log)
        assert record["batch_size"] >= 0 and record["input_bytes"] >= 0
        assert record["latency_ms"] > 0
    served = {r["model"] for r in records if r["batch_size"] >= 1 and r["input_bytes"] > 0}
    assert {"embed", "minilm_onnx"} <= served, served
    embed = [r for r in records if r["model"] == "embed"]
    assert all(r["degradation_level"] is not None for r in embed)
