"""A burst of ~10x capacity, 20% high / 80% low: high is served, low is shed by Triton's
queues with typed errors; the router refuses nothing.

The client cannot always send at 10x capacity: on a 2-core host it shares the cores with the
server, and a CI run sent 207 requests in the burst second instead of 2,200, which the server
served within the low queue's 2 s. So a low request is a re-index job's batch of 16 texts:
even at that rate the low work offered is about 8 s of the server's time, past the queue's
2 s timeout on any host that cannot also run 10x faster than this one. Its texts differ
(the front serves a repeated row once): a CI run whose 48 texts were one text repeated
was served whole within 4 s and shed nothing."""

from __future__ import annotations

import asyncio
from collections import Counter

from tests.integration.helpers import assert_serving, metric_value, reset_router
from tests.load import by_priority, sdk_open_loop

CAPACITY_RPS = 220  # embed, single texts, c16, this machine (docs/serving.md)
# Bounded so the high queue (512 places, 10 s timeout) holds every high request of the burst
# even if nothing were served meanwhile: 20% of 10x for 1 s is 440 requests. With 2 s, a
# machine slower than CAPACITY_RPS (a busy CI host) filled it and high requests were shed.
BURST_S = 1.0
BULK_TEXTS = 48  # texts a low request: well past the bulk queue's 2 s on a slow host
SHED_ERRORS = {"QueueFullError", "DeadlineExceededError", "UnavailableError"}


def test_overload_burst_serves_high_priority_and_sheds_low_with_typed_errors(triton) -> None:
    refused_before = metric_value(triton.metrics_url, "tmr_rejections_total")
    try:
        outcomes = asyncio.run(sdk_open_loop(triton.grpc_url, 10 * CAPACITY_RPS, BURST_S, seed=7,
                                             bulk_texts=BULK_TEXTS))
        assert_serving(triton.http_url)
    finally:
        counted = metric_value(triton.metrics_url, "tmr_rejections_total") - refused_before
        reset_router(triton.http_url)
    summary = {row.priority: row for row in by_priority(outcomes, BURST_S)}
    print(f"\noverload burst: {[row.__dict__ for row in summary.values()]}")
    high, low = summary[1], summary[2]
    assert high.success_ratio >= 0.99, high
    assert set(low.failures) <= SHED_ERRORS, low.failures  # no 5xx but the documented 503s
    assert low.success_ratio < 1.0, "10x capacity shed nothing"
    # Shedding is Triton's queue policy: the router refused nothing, by its own count.
    assert counted == 0
    assert Counter(o.error for o in outcomes)["UnavailableError"] == 0
