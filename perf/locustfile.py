"""Every HTTP and gRPC load of perf/ as Locust users and one load shape, in Locust's own venv
(`make locust`); perf/locust_run.py starts it and reads its JSON stats. Every text is new (a
perf input with a unique suffix), so no cache answers. Users, each class with its TMR_*
settings: `ClosedLoop` (the peers' ladder), `HighClosed` / `LowClosed` (priority 1 / 2),
`SingleText` and `Bulk` (the priority mix), `ImageLoop` (perf/memory.py), and `OpenLoop` /
`GrpcOpenLoop`: arrivals whatever the server does, TMR_HIGH_SHARE at priority 1.

`TMR_STAGES` (`[[seconds, requests_per_s, "phase"], ...]`) turns on the `Stages` shape;
`TMR_WINDOW_S` names requests by their window (`w0003`) for the soak. Names end in the
priority (`overload p1`); a failed request goes under its name + FAILED. TMR_ENDPOINT:
`kserve`, `openai` or `infer` (the seeds' peers); TMR_PATH overrides the route, TMR_HEADERS
(JSON) adds headers. Locust rounds latencies over 100 ms to 10 ms, over 1 s to 100 ms.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
from locust import FastHttpUser, LoadTestShape, User, constant, events, task

ENV = os.environ
MODEL = ENV.get("TMR_MODEL", "")  # the front model: the caller names it (perf.subjects)
ENDPOINT = ENV.get("TMR_ENDPOINT", "kserve")
PATH = ENV.get("TMR_PATH") or {"kserve": f"/v2/models/{MODEL}/infer",
                               "openai": "/v1/embeddings", "infer": "/infer"}[ENDPOINT]
HEADERS = json.loads(ENV.get("TMR_HEADERS", "{}"))
SINGLE_RPS = float(ENV.get("TMR_SINGLE_RPS", "4"))
BULK_ROWS, BULK_WORDS = int(ENV.get("TMR_BULK_ROWS", "16")), int(ENV.get("TMR_BULK_WORDS", "0"))
USER_RPS = float(ENV.get("TMR_USER_RPS", "5"))
HIGH_SHARE = float(ENV.get("TMR_HIGH_SHARE", "0.2"))
STAGES = json.loads(ENV.get("TMR_STAGES", "[]"))
WINDOW_S = float(ENV.get("TMR_WINDOW_S", "0"))
# The families' perf inputs, from their descriptions (perf/locust_run.py FAMILY_INPUTS)
INPUTS = Path(ENV["TMR_TEXT_INPUTS"])
BASE = [d["TEXT"]["content"][0] for d in json.loads(INPUTS.read_text())["data"]]
NONCE, COUNTER = uuid.uuid4().hex[:8], itertools.count()
FAILED = " failed"
STARTED = [time.monotonic()]
RUNNER: list = []  # the environment's runner, for the failures written at quit


@events.init.add_listener
def _init(environment: object, **_kwargs: object) -> None:
    RUNNER.append(environment)


@events.test_start.add_listener
def _started(**_kwargs: object) -> None:
    STARTED[0] = time.monotonic()


@events.quit.add_listener
def _write_failures(**_kwargs: object) -> None:
    """Every failure by name and error, once the last answer is in (TMR_FAILURES_FILE):
    Locust's own _failures.csv is written a second at a time and can miss the last ones."""
    if ENV.get("TMR_FAILURES_FILE") and RUNNER and RUNNER[0].runner:
        errors = RUNNER[0].runner.stats.errors.values()
        Path(ENV["TMR_FAILURES_FILE"]).write_text(json.dumps(
            [[e.name, str(e.error), e.occurrences] for e in errors]))


def phase(elapsed_s: float) -> str:
    """The name of the stage running `elapsed_s` into the run ("" past the last)."""
    for seconds, _rps, name in STAGES:
        if elapsed_s < seconds:
            return name
        elapsed_s -= seconds
    return ""


def texts(n: int, words: int = 0) -> list[str]:
    """`n` base texts in turn (repeated to `words` words), each with a new suffix."""
    base = [" ".join((b.split() * words)[:words]) for b in BASE] if words else BASE
    return [f"{base[i % len(base)]} ({NONCE}-{i})" for i in itertools.islice(COUNTER, n)]


def label(priority: int, rows: int = 1) -> str:
    """The request's name in the stats: its phase or window, its priority, its rows."""
    elapsed = time.monotonic() - STARTED[0]
    head = f"w{int(elapsed // WINDOW_S):04d}" if WINDOW_S else phase(elapsed)
    tail = f"p{priority}" + (f" x{rows}" if rows > 1 else "")
    return f"{head} {tail}".strip()


def body(rows: list[str], priority: int) -> dict:
    """The request for ENDPOINT; priority 0 leaves the model's default."""
    if ENDPOINT == "openai":
        return {"model": MODEL, "input": rows}
    if ENDPOINT == "infer":
        return {"text": rows[0]}
    request: dict = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(rows), 1],
                                 "data": rows}]}
    if priority:
        request["parameters"] = {"priority": priority, **({"truncate": True} if BULK_WORDS else {})}
    return request


def vectors(answer: dict) -> list:
    """The vectors in an answer of ENDPOINT."""
    if ENDPOINT == "openai":
        return [d["embedding"] for d in answer["data"]]
    if ENDPOINT == "infer":
        return [answer["result"]]
    out = next(o for o in answer["outputs"] if o["name"] == "EMBEDDING")
    width = out["shape"][1]  # the model's own size, as its answer declares it
    return [out["data"][i * width:(i + 1) * width] for i in range(out["shape"][0])]


def problem(status: int, answer: dict, rows: int) -> str | None:
    """None for `rows` finite vectors of one size, else the failure as Locust records it."""
    if status != 200:
        message = re.sub(r"^\[request id: [^]]*\] ", "", str(answer.get("error", "")))
        return f"HTTP {status}: {message[:80]}"
    try:
        got = vectors(answer)
    except (KeyError, IndexError, TypeError, StopIteration):
        return "malformed answer"
    good = len({len(v) for v in got}) == 1 and all(v and all(map(math.isfinite, v)) for v in got)
    return None if len(got) == rows and good else "not one vector a row"


class Embedder(FastHttpUser):
    """A client of the text front over HTTP JSON."""

    abstract = True
    rows, priority = 1, 0
    concurrency, network_timeout = 32, 30.0
    path = PATH
    wait_time = constant(0)  # back to back, unless a class paces itself

    def send(self, rows: int, priority: int) -> None:
        batch = texts(rows, BULK_WORDS if priority == 2 else 0)
        with self.client.post(self.path, json=body(batch, priority), headers=HEADERS,
                              name=label(priority, rows), catch_response=True) as response:
            try:
                answer = response.json()
            except ValueError:
                answer = {"error": response.text}
            error = problem(response.status_code, answer, rows)
            if error:
                response.request_meta["name"] += FAILED
                response.failure(error)


class Steady(Embedder):
    """Sends its rows at its priority as its wait_time allows."""

    abstract = True

    @task
    def embed(self) -> None:
        self.send(self.rows, self.priority)


class ClosedLoop(Steady):
    """One text a request, no wait, the model's default priority."""


def images(model: str) -> list[str]:
    """The base64 images a model's clients send: perf/inputs/<model>.json, else its family's."""
    path = INPUTS.parent / f"{model}.json"
    path = path if path.exists() else Path(ENV["TMR_IMAGE_INPUTS"])
    return [d["IMAGE"]["content"][0] for d in json.loads(path.read_text())["data"]]


class ImageLoop(FastHttpUser):
    """One image a request to one of TMR_IMAGE_MODELS, back to back; classes must come back."""

    wait_time = constant(0)

    def on_start(self) -> None:
        self.inputs = {m: images(m) for m in ENV["TMR_IMAGE_MODELS"].split(",")}

    @task
    def classify(self) -> None:
        model = random.choice(list(self.inputs))
        request = {"inputs": [{"name": "IMAGE", "datatype": "BYTES", "shape": [1, 1],
                               "data": [random.choice(self.inputs[model])]}]}
        with self.client.post(f"/v2/models/{model}/infer", json=request, headers=HEADERS,
                              name=f"{model} image", catch_response=True) as response:
            ids = next((o for o in response.json().get("outputs", [])
                        if o["name"] == "CLASS_IDS"), None) if response.status_code == 200 \
                else None
            if not ids or not ids["data"]:
                response.request_meta["name"] += FAILED
                response.failure(f"HTTP {response.status_code}: {response.text[:80]}")


class HighClosed(Steady):
    """Priority 1 back to back, TMR_HIGH_USERS of them (with LowClosed: the recover load)."""

    priority, fixed_count = 1, int(ENV.get("TMR_HIGH_USERS", "0"))


class LowClosed(Steady):
    """Priority 2 back to back, TMR_LOW_USERS of them."""

    priority, fixed_count = 2, int(ENV.get("TMR_LOW_USERS", "0"))


class SingleText(Steady):
    """Priority 1, one text a request, TMR_SINGLE_RPS a second per user, TMR_SINGLE_USERS of
    them, to TMR_P1_HOST / TMR_P1_PATH where set. Poisson: users paced in step would send
    bursts of one a user at once, measured as a batch's time."""

    weight, priority = 3, 1
    fixed_count = int(ENV.get("TMR_SINGLE_USERS", "0"))
    wait_time = staticmethod(lambda: random.expovariate(SINGLE_RPS))
    path = ENV.get("TMR_P1_HOST", "") + (ENV.get("TMR_P1_PATH") or PATH)  # --host is every class's

    def send(self, rows: int, priority: int) -> None:
        """Over HTTP, or by the SDK over gRPC to TMR_SDK_HOST, which routes to the lane."""
        if not ENV.get("TMR_SDK_HOST"):
            return super().send(rows, priority)
        if not hasattr(self, "sdk"):
            from tmr_client import Client

            self.sdk = Client(f"grpc://{ENV['TMR_SDK_HOST']}", model=MODEL, max_batch_size=64)
        return timed(self, rows, priority, lambda: self.sdk.embed(texts(rows), priority=priority))

    def on_stop(self) -> None:
        if hasattr(self, "sdk"):
            self.sdk.close()  # here: a gRPC channel closed at exit under gevent hangs


class Bulk(Steady):
    """Priority 2, TMR_BULK_ROWS texts of TMR_BULK_WORDS words a request, back to back,
    TMR_BULK_USERS of them."""

    weight, priority, rows = 1, 2, BULK_ROWS
    fixed_count = int(ENV.get("TMR_BULK_USERS", "0"))


def arrive(user: User) -> None:
    """One arrival on the user's fixed schedule (its phase random, so users do not send
    together), sent on its own greenlet."""
    if not hasattr(user, "rng"):
        user.rng = random.Random()
        user.due = time.monotonic() + user.rng.random() / USER_RPS
    user.due += 1.0 / USER_RPS
    gevent.sleep(max(0.0, user.due - time.monotonic()))
    gevent.spawn(user.send, 1, 1 if user.rng.random() < HIGH_SHARE else 2)


class OpenLoop(Embedder):
    """TMR_USER_RPS arrivals a second a user over HTTP, whatever the server does."""

    @task
    def embed(self) -> None:
        arrive(self)


def timed(user: User, rows: int, priority: int, call: Callable[[], Any]) -> None:
    """`call()` (its embeddings) timed into Locust's stats under the request's label."""
    import numpy as np

    name, began, error = label(priority, rows), time.perf_counter(), None
    try:
        got = call()
        if got.ndim != 2 or got.shape[0] != rows or not got.size or not np.isfinite(got).all():
            error = ValueError("not one vector a row")
    except Exception as err:  # tritonclient's and the SDK's errors alike
        error = err
    user.environment.events.request.fire(
        request_type="gRPC", name=name + FAILED if error else name, exception=error,
        response_time=(time.perf_counter() - began) * 1000, response_length=0, context={})


class GrpcOpenLoop(User):
    """The open loop over gRPC (tritonclient), to TMR_GRPC_HOST."""

    wait_time = constant(0)

    def on_start(self) -> None:
        import tritonclient.grpc as grpcclient

        self.grpc = grpcclient
        self.client = grpcclient.InferenceServerClient(ENV["TMR_GRPC_HOST"])

    def send(self, rows: int, priority: int) -> None:
        import numpy as np

        text = self.grpc.InferInput("TEXT", [rows, 1], "BYTES")
        text.set_data_from_numpy(np.array([[t.encode()] for t in texts(rows)], dtype=object))
        timed(self, rows, priority, lambda: self.client.infer(
            MODEL, [text], priority=priority, headers=HEADERS).as_numpy("EMBEDDING"))

    @task
    def embed(self) -> None:
        arrive(self)


if ENV.get("TMR_GRPC_HOST") or ENV.get("TMR_SDK_HOST"):  # gRPC's waits yield to gevent
    import grpc.experimental.gevent as grpc_gevent

    grpc_gevent.init_gevent()

if STAGES:
    class Stages(LoadTestShape):
        """Open-loop users enough for each stage's rate, in turn (`label` names the
        requests by the stage they were sent in)."""

        def tick(self) -> tuple[int, float] | None:
            t = self.get_run_time()
            for seconds, rps, _name in STAGES:
                if t < seconds:
                    return math.ceil(rps / USER_RPS), 1000.0
                t -= seconds
            return None
