"""The priority mix as a Locust scenario: priority-1 single texts at a steady rate beside
priority-2 bulk calls sent back to back, over Triton's HTTP/JSON route.

Runs in its own venv (`make locust`), importing no project module:

    .peers/locust/venv/bin/locust -f perf/locustfile.py --host http://localhost:8000 \\
        --headless -u 24 -r 24 -t 60s --csv perf/results/locust SingleText Bulk

Triton takes the priority from the request body, `"parameters": {"priority": N}`, as
tritonclient's `priority=` sends it. Every text is new (a perf input text with a unique
suffix), so the response cache answers none. Environment: TMR_MODEL (default `embed`),
TMR_SINGLE_RPS (requests/s per single-text user, default 4), TMR_BULK_ROWS (default 32).
`ClosedLoop` (no wait, the model's default priority) is what perf/README.md's client-cost
measurement ran against perf.load's closed loop.
"""

from __future__ import annotations

import itertools
import json
import os
import uuid
from pathlib import Path

from locust import FastHttpUser, constant, constant_throughput, task

MODEL = os.environ.get("TMR_MODEL", "embed")
SINGLE_RPS = float(os.environ.get("TMR_SINGLE_RPS", "4"))
BULK_ROWS = int(os.environ.get("TMR_BULK_ROWS", "32"))
INPUTS = Path(__file__).resolve().parent / "inputs" / "embed.json"
BASE = [d["TEXT"]["content"][0] for d in json.loads(INPUTS.read_text())["data"]]
NONCE, COUNTER = uuid.uuid4().hex[:8], itertools.count()


def texts(n: int) -> list[str]:
    """`n` base texts in turn, each with a suffix no other request carries."""
    return [f"{BASE[i % len(BASE)]} ({NONCE}-{i})" for i in itertools.islice(COUNTER, n)]


def body(rows: list[str], priority: int) -> dict:
    """KServe v2 JSON: TEXT as BYTES [n, 1]; priority 0 leaves the model's default."""
    request: dict = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(rows), 1],
                                 "data": rows}]}
    if priority:
        request["parameters"] = {"priority": priority}
    return request


class Embedder(FastHttpUser):
    """A client of the front model; a 200 with one vector per row is a success."""

    abstract = True
    rows, priority = 1, 0

    @task
    def embed(self) -> None:
        with self.client.post(f"/v2/models/{MODEL}/infer", json=body(texts(self.rows),
                              self.priority), name=f"p{self.priority} x{self.rows}",
                              catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}")
            elif response.json()["outputs"][0]["shape"][0] != self.rows:
                response.failure("wrong row count")


class SingleText(Embedder):
    """Priority 1, one text a request, TMR_SINGLE_RPS a second per user (an open loop as
    long as the server answers within the pacing)."""

    weight, priority = 3, 1
    wait_time = constant_throughput(SINGLE_RPS)


class Bulk(Embedder):
    """Priority 2, TMR_BULK_ROWS texts a request, back to back."""

    weight, priority, rows = 1, 2, BULK_ROWS
    wait_time = constant(0)


class ClosedLoop(Embedder):
    """One text a request, no wait, the model's default priority."""

    wait_time = constant(0)
