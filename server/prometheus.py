"""Reading Triton's Prometheus endpoint with Prometheus's own text-format parser."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def samples(metrics_url: str) -> list:
    """Every sample exposed at `metrics_url`."""
    with urllib.request.urlopen(metrics_url, timeout=10) as r:
        text = r.read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def metric_value(metrics_url: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels` (0 when absent).

    The parser names counter samples `<name>_total`; both spellings match.
    """
    return sum(s.value for s in samples(metrics_url)
               if s.name in (name, f"{name}_total")
               and all(s.labels.get(k) == v for k, v in labels.items()))
