"""Reading Locust's JSON stats and failures CSV back (perf/locust_run.py)."""

from __future__ import annotations

import ast
import math
import sys

from perf.locust_run import (
    LOCUSTFILE,
    TOTAL,
    histogram_percentile,
    load_point,
    read_failures,
    read_stats,
)


def entry(name: str, method: str, times: dict[int, int], failures: int = 0,
          span: tuple[float, float] = (100.0, 110.0)) -> dict:
    """One entry as Locust's --json-file writes it (its keys are strings there)."""
    return {"name": name, "method": method, "num_requests": sum(times.values()),
            "num_failures": failures, "response_times": {str(k): v for k, v in times.items()},
            "start_time": span[0], "last_request_timestamp": span[1]}


def test_a_percentile_of_a_histogram_is_the_first_bucket_that_reaches_its_rank() -> None:
    counts = {10: 50, 20: 49, 900: 1}
    assert histogram_percentile(counts, 50) == 10
    assert histogram_percentile(counts, 99) == 20
    assert histogram_percentile(counts, 100) == 900
    assert math.isnan(histogram_percentile({}, 50))


def test_both_protocols_merge_and_a_failed_twin_counts_without_its_latencies() -> None:
    stats = read_stats([
        entry("2x p1", "POST", {10: 4}),
        entry("2x p1", "gRPC", {30: 4}, span=(101.0, 108.0)),
        entry("2x p1 failed", "POST", {1: 2}, failures=2),
        entry("2x p2", "POST", {50: 10}),
    ])
    high = stats["2x p1"]
    assert (high.requests, high.failures, high.served) == (10, 2, 8)
    assert (high.p50_ms, high.p99_ms) == (10, 30)  # the 1 ms failures are not in them
    assert high.rps == 1.0  # 10 requests over 100..110 s
    assert stats[TOTAL].requests == 20 and stats[TOTAL].failures == 2


def test_failures_are_read_by_name_and_error_over_both_protocols() -> None:
    failures = read_failures([["10x p2 failed", "HTTP 429: server is overloaded", 7],
                              ["10x p2 failed", "HTTP 429: server is overloaded", 2],
                              ["10x p2 failed", "[StatusCode.UNAVAILABLE] overloaded", 3]])
    assert failures[("10x p2", "HTTP 429: server is overloaded")] == 9
    assert sum(failures.values()) == 12


def test_a_load_point_counts_served_requests_over_the_run() -> None:
    stat = read_stats([entry("c4", "POST", {20: 396}), entry("c4 failed", "POST", {5: 4}, 4)])
    point = load_point(4, 4.0, stat["c4"], {"HTTP 503": 4})
    assert (point.requests, point.errors, point.rps, point.p50_ms) == (396, 4, 99.0, 20)


def test_the_locustfile_imports_no_project_module_and_speaks_the_text_contract() -> None:
    from core.families import TEXT_EMBEDDING

    text = LOCUSTFILE.read_text()
    roots = {alias.name.split(".")[0] for node in ast.walk(ast.parse(text))
             if isinstance(node, ast.Import | ast.ImportFrom)
             for alias in ([ast.alias(node.module)] if isinstance(node, ast.ImportFrom)
                           else node.names) if alias.name}
    # tmr_client: the SDK that ships alone (client/), as an application imports it
    runs_there = {"gevent", "grpc", "locust", "numpy", "tritonclient", "tmr_client",
                  "__future__"}
    assert roots - runs_there - set(sys.stdlib_module_names) == set()
    contract = TEXT_EMBEDDING.contract
    assert f'"name": "{contract.front_inputs[0].name}"' in text
    assert f'o["name"] == "{contract.front_outputs[0].name}"' in text
    assert f'"{contract.front_outputs[0].name}")' in text  # the gRPC user's output


def test_the_locustfile_takes_each_familys_perf_inputs_from_its_description() -> None:
    """No model or file of one is named in the locustfile: the image users need the models
    named, and the families' input files come from their descriptions."""
    from core.families import IMAGE_CLASSIFICATION, TEXT_EMBEDDING
    from perf.locust_run import FAMILY_INPUTS

    text = LOCUSTFILE.read_text()
    assert [w for w in ("embed.json", "images.json", '"digits"') if w in text] == []
    assert FAMILY_INPUTS["TMR_TEXT_INPUTS"].endswith(TEXT_EMBEDDING.perf_inputs)
    assert FAMILY_INPUTS["TMR_IMAGE_INPUTS"].endswith(IMAGE_CLASSIFICATION.perf_inputs)
    image = IMAGE_CLASSIFICATION.contract
    assert f'"name": "{image.front_inputs[0].name}"' in text
    assert f'o["name"] == "{image.front_outputs[0].name}"' in text
