"""Queue capacities from a model's own `dynamic_batching` config (pure; no Triton imports).

Triton exports how many requests are pending (`nv_inference_pending_request_count`) but
not how many a model may queue. `embed` exports these capacities as `tmr_queue_capacity`
so the 60% / 80% queue alerts divide by the real configured size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.settings import ModelSettings

NO_PRIORITY = "0"  # the label of a model's single queue when it has no priority levels


def _size(policy: Mapping[str, Any] | None) -> int:
    return int((policy or {}).get("max_queue_size", 0) or 0)


def queue_capacities(config: Mapping[str, Any]) -> dict[str, int]:
    """{priority level: max_queue_size} of every bounded queue; unbounded (0) ones are left out.

    A level without its own `priority_queue_policy` uses `default_queue_policy`. A front
    whose workers hold the queue (python_backends/workers.py) has the stub's queues: its
    lane's (`interactive_queue`, priority 1) and its bulk workers' (`worker_queue`, 2).
    """
    settings = ModelSettings.from_parameters(config)
    if settings.worker_threads != "0":
        return {"1": settings.interactive_queue, "2": settings.worker_queue} \
            if settings.interactive_workers else {NO_PRIORITY: settings.worker_queue}
    batching = config.get("dynamic_batching")
    if not batching:
        return {}
    default = _size(batching.get("default_queue_policy"))
    levels = int(batching.get("priority_levels", 0) or 0)
    if levels == 0:
        return {NO_PRIORITY: default} if default else {}
    policies = batching.get("priority_queue_policy", {}) or {}
    sizes = {str(level): _size(policies.get(str(level))) if str(level) in policies else default
             for level in range(1, levels + 1)}
    return {level: size for level, size in sizes.items() if size > 0}
