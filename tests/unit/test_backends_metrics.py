"""python_backends.metrics: what reaches Triton, and when. Inside Triton each increment
or set is a round trip over the stub's IPC; here a recorder takes pb_utils' Metric's
place and lists the calls that would be sent."""

from __future__ import annotations

import threading

from python_backends import metrics


class Recorder:
    """Stands where pb_utils' Metric object is: the calls it got, in order."""

    def __init__(self, name: str, calls: list) -> None:
        self.name, self.calls = name, calls

    def increment(self, amount: float) -> None:
        self.calls.append((self.name, "increment", amount))

    def set(self, value: float) -> None:
        self.calls.append((self.name, "set", value))


def wired(metric, name: str, calls: list):
    metric._metric = Recorder(name, calls)
    return metric


def test_a_batch_of_increments_is_one_call_per_counter_in_first_counted_order():
    calls: list = []
    total = wired(metrics.Counter("t_sum", "", {}), "sum", calls)
    rows = wired(metrics.Counter("t_rows", "", {}), "rows", calls)
    for _ in range(5):
        total.inc(0.9)
        rows.inc(1)
    rows.inc(0)
    assert calls == []  # nothing before the batch ends
    metrics.flush()
    assert [c[:2] for c in calls] == [("sum", "increment"), ("rows", "increment")]
    assert abs(calls[0][2] - 4.5) < 1e-9 and calls[1][2] == 5
    assert (total.value, rows.value) == (4.5, 5)
    metrics.flush()
    assert len(calls) == 2  # nothing new, nothing sent


def test_a_gauge_is_sent_once_a_batch_and_only_when_it_changed():
    calls: list = []
    gauge = wired(metrics.Gauge("t_gauge", "", {}), "gauge", calls)
    gauge.set(1)
    gauge.set(2)
    metrics.flush()
    gauge.set(2)
    metrics.flush()
    gauge.set(3)
    gauge.set(2)  # back to what Triton has: the queued send carries 2
    metrics.flush()
    assert calls == [("gauge", "set", 2), ("gauge", "set", 2)]


def test_counts_from_another_thread_are_sent_by_the_next_flush_and_none_are_lost():
    calls: list = []
    counter = wired(metrics.Counter("t_threads", "", {}), "c", calls)

    def count() -> None:
        for _ in range(1000):
            counter.inc()

    threads = [threading.Thread(target=count) for _ in range(4)]
    for thread in threads:
        thread.start()
    for _ in range(50):
        metrics.flush()
    for thread in threads:
        thread.join()
    metrics.flush()
    assert sum(amount for _, _, amount in calls) == 4000 == counter.value


def test_a_histogram_is_cumulative_buckets_count_and_sum():
    histogram = metrics.Histogram("t_hist", "", {}, (8, 64))
    for value in (4, 10, 100):
        histogram.observe(value)
    assert [c.value for _, c in histogram.buckets] == [1, 2, 3]
    assert (histogram.count.value, histogram.sum.value) == (3, 114)
