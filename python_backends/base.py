"""The shared skeleton of every Python-backend model in this project.

A model's `model.py` is a shim that imports its class from here. Subclasses override
`setup()` and `execute_requests()` (filling `self.batch` as they go); parsing the config,
logging, the per-batch structured log line and the one error path live here once: a
`ModelError` for one request becomes that request's `TritonError`, and whatever else goes
wrong, `execute` still returns exactly one response per request (`one_per_request`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from core.cpu_policy import BulkCpu
from core.families.lanes import lane_full, lane_name
from core.host_profile import host_cores, worker_count
from core.settings import INTERACTIVE_INPUT_SUFFIX, TRACED_ENV, ModelSettings
from core.timeouts import QUEUE_PRIORITY_1, QUEUE_PRIORITY_2
from core.variant import REVIEWED, Variant
from python_backends import bls, diagnostics, metrics
from python_backends.cpu_priority import NORMAL, describe, lower, scheduling_of, threads
from python_backends.gc_pauses import apply_policy
from python_backends.pb import Log, pb_utils
from python_backends.structured_log import BatchFacts, BatchLog
from python_backends.warmup import WarmupRuns
from python_backends.workers import Pools, WorkerPool
from runtime.errors import InvalidInputError, ModelError


class BaseModel:
    """Triton's `TritonPythonModel` interface with the boilerplate done once."""

    default_filename = ""
    yields_cpu: ClassVar[bool] = True  # False: never lowered (the health check)
    pool: Pools | None = None  # the worker threads, where `worker_threads` asks
    hold_rows = 0  # bulk rows waiting that keep execute (_hold); 0: never

    def initialize(self, args: dict[str, str]) -> None:
        # The stub's own threads (its health beat, its message threads) keep normal
        # priority: Triton calls a stub "not healthy" when a reply is over 1 s late and
        # the health thread, starved under a yielding policy, missed that second too.
        self.stub_threads = frozenset(threads()) - {threading.get_native_id()}
        self.config: dict[str, Any] = json.loads(args["model_config"])
        self.name = args["model_name"]
        self.version = args["model_version"]
        self.model_dir = Path(args["model_repository"])
        # The config variant this server serves (core/variant.py), read once here: the
        # launcher names it beside --model-config-name; unset, as Triton with no flag.
        self.variant = Variant.from_environment() or REVIEWED
        self.log = Log(f"{self.name}/{self.version}")
        diagnostics.install()
        settings = ModelSettings.from_parameters(self.config)
        # the server's bulk CPU policy (core/cpu_policy.py), read once here like the variant
        self.scheduling = scheduling_of(settings.cpu_scheduling, settings.cpu_nice,
                                        BulkCpu.from_environment()) \
            if self.yields_cpu else (NORMAL, settings.cpu_nice)
        self.batch_log = BatchLog(self.log, self.name, self.version,
                                  settings.batch_log_interval_s)
        self.facts = threading.local()  # each serving thread's batch facts
        self.batch = BatchFacts()
        # Held while a batch is served, released around an encoder's run (`unlocked`):
        # workers share the model's state (ladder, cache, metrics), not their compute.
        self.serving = threading.Lock()
        self.warmup = WarmupRuns(self.config, self.log, args.get("model_instance_name", "0"))
        self.setup(args)
        # Worker threads answer after execute returns (python_backends/workers.py): made
        # before the stub yields its CPU, so they run at the model's scheduling.
        # A traced server's fronts serve in execute: Triton 2.51 crashed releasing a traced
        # request a worker had answered, and lost the trace of one (_hand_over).
        workers = 0 if os.environ.get(TRACED_ENV) else worker_count(settings.worker_threads,
                                                                      host_cores())
        self.pool = self._pools(settings, workers) if workers else None
        levels = (self.config.get("dynamic_batching") or {}).get("priority_levels") or 0
        self.hold_rows = 1 if self.pool and int(levels) else 0
        apply_policy(settings.gc_policy)
        if not self.warmup.active:
            self.yield_cpu()

    def yield_cpu(self) -> None:
        """Lower the threads of this stub that compute to its `cpu_scheduling` (its
        runtime's pools included; threads started later inherit it), once set up and
        warmed at normal priority: a stub that loads while other work takes the cores
        still gets ready. The stub's own threads (`stub_threads`) keep normal priority."""
        # With workers, the thread that hands requests over, the reapers and the
        # interactive workers keep normal priority too; the bulk workers and the
        # runtime's pools yield.
        keep = self.stub_threads | (frozenset() if self.pool is None else frozenset(
            {threading.get_native_id(), *self.pool.normal_threads()}))
        lowered = lower(*self.scheduling, keep=keep)
        if lowered:
            self.log.info(f"cpu scheduling {self.scheduling[0]}: {len(lowered)} thread(s)")
        # what the dashboard and `tmr health` show: the policy this model's threads run at
        metrics.Gauge("tmr_cpu_scheduling", "The CPU policy of the model's threads: 1 "
                      "under `policy` (SCHED_IDLE, nice N or normal; core/cpu_policy.py)",
                      {"model": self.name, "policy": describe(*self.scheduling)}).set(1)
        metrics.flush()

    @property
    def batch(self) -> BatchFacts:
        """The facts of the batch this thread serves (a worker's own, or execute's)."""
        facts = getattr(self.facts, "value", None)
        if facts is None:
            facts = self.facts.value = BatchFacts()
        return facts

    @batch.setter
    def batch(self, facts: BatchFacts) -> None:
        self.facts.value = facts

    @contextmanager
    def unlocked(self) -> Any:
        """Let other serving threads in while this one waits on a runtime (an encoder's
        call), then take the model's state back."""
        self.serving.release()
        try:
            yield
        finally:
            self.serving.acquire()

    def _pools(self, settings: ModelSettings, workers: int) -> Pools:
        """`workers` bulk workers and, where the config asks, the interactive ones."""
        rows = max(1, int(self.config.get("max_batch_size") or 1))
        # the queues' timeouts, as Triton's priority levels had them (core/timeouts.py)
        bulk = WorkerPool(self.name, workers, rows, settings.worker_queue,
                          self._answer, send_final, error_response, log=self.log.warning,
                          timeout_s=QUEUE_PRIORITY_2.seconds)
        lane_inputs = [t["name"] for t in self.config.get("input", [])
                       if t["name"].endswith(INTERACTIVE_INPUT_SUFFIX)]
        interactive = WorkerPool(
            lane_name(self.name), settings.interactive_workers, rows,
            settings.interactive_queue, self._answer, send_final, error_response,
            log=self.log.warning, full=lane_full(lane_name(self.name),
                                                 settings.interactive_queue),
            timeout_s=QUEUE_PRIORITY_1.seconds,
        ) if settings.interactive_workers and lane_inputs else None
        labels = [{"model": self.name, "priority": level} for level in ("1", "2")]
        waiting = {ls["priority"]: metrics.Gauge(
            "tmr_queue_waiting", "Requests waiting in the stub's own queue for a worker, per "
            "priority (python_backends/workers.py)", ls) for ls in labels}
        taken = {ls["priority"]: metrics.Counter(
            "tmr_requests_by_priority_total", "Requests the model's workers took, by class: "
            "1 its lane's (interactive), 2 the rest (bulk)", ls) for ls in labels}
        return Pools(bulk, interactive, lambda request: any(
            pb_utils.get_input_tensor_by_name(request, n) is not None for n in lane_inputs),
            waiting, taken)

    def setup(self, args: dict[str, str]) -> None:
        """Build heavy state (sessions, tokenizers) once per instance."""

    def artifact_path(self, default: str = "") -> Path:
        """The version folder's artifact: `default_model_filename`, else `default` or the
        class default. A model of the plain `python` backend has `model.py` there (its
        code, filled in by Triton), so its artifact is the default."""
        filename = self.config.get("default_model_filename") or ""
        if not filename or filename.endswith(".py"):
            filename = default or self.default_filename
        return self.model_dir / self.version / filename

    def execute(self, requests: list[Any]) -> list[Any]:
        """`execute_requests`, then the batch's structured log line (when it is due) and,
        for a warmup sample (python_backends/warmup.py), the warmup's line.

        The one error path: an exception escaping `execute_requests` answers every request
        of the batch with it (INTERNAL, or the ModelError's own code); a missing or extra
        response is made good, so Triton always gets one response per request."""
        warming = self.warmup.active
        if self.pool is not None and not warming:
            return self._hand_over(requests)
        began = time.monotonic()
        responses = self._answer(requests)
        if warming:
            self.warmup.finished(len(requests), time.monotonic() - began)
            if not self.warmup.active:
                self.yield_cpu()
        return responses

    def _hand_over(self, requests: list[Any]) -> list[Any] | None:
        """Every request to the pool's workers (workers.py), answered after this returns;
        but a traced one is answered here: Triton 2.51 crashed (SIGSEGV in
        TRITONBACKEND_RequestRelease) releasing a traced request whose response a worker
        had already sent. None entries are the workers' to answer."""
        inline = [bls.traced(r) for r in requests]
        if not any(inline):
            for request in requests:
                self.pool.submit(request, request.get_response_sender(),  # type: ignore[union-attr]
                                 request_rows(request))
            self._hold()
            return None
        answers = iter(self._answer([r for r, here in zip(requests, inline) if here]))
        out = []
        for request, here in zip(requests, inline):
            if not here:
                self.pool.submit(request, request.get_response_sender(),  # type: ignore[union-attr]
                                 request_rows(request))
            out.append(next(answers) if here else None)
        self._hold()
        return out

    def _hold(self) -> None:
        """Where the front's batcher has Triton priority levels (an operator's choice,
        docs/serving.md "Triton's priority on the front itself"), keep this execute while
        bulk requests wait for a worker, so later ones wait in Triton's queue, where a
        client's `priority` orders them (the stub cannot read it): priority 1 reaches a
        worker ahead of queued bulk work. At most the bulk queue's timeout."""
        if self.hold_rows:
            self.pool.bulk.hold(self.hold_rows, QUEUE_PRIORITY_2.seconds)  # type: ignore[union-attr]

    def _answer(self, requests: list[Any]) -> list[Any]:
        """One response per request of a batch, on whichever thread serves it."""
        began = time.monotonic()
        with self.serving:
            self.batch = BatchFacts()
            bls.follow(requests)
            try:
                responses = self.execute_requests(requests)
            except Exception as err:  # the one place every failure of a batch is answered
                self.log.error(f"{type(err).__name__} while executing {len(requests)} "
                               f"request(s): {err}")
                failure = err if isinstance(err, ModelError) else ModelError(
                    f"{self.name} failed: {type(err).__name__}: {err}")
                responses = [error_response(failure) for _ in requests]
            responses = one_per_request(responses, len(requests), lambda: error_response(
                ModelError(f"{self.name} produced no response for this request")))
            self.batch_log.emit(requests, responses, self.batch, began,
                                self.degradation_level())
            if self.pool is not None:
                self.pool.report()
            metrics.flush()  # the batch's counters, one round trip each
        return responses

    def degradation_level(self) -> int | None:
        """The level the batch was served at (the router knows it; plain models do not)."""
        return None

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        raise NotImplementedError

    def finalize(self) -> None:
        if self.pool is not None:
            refused = self.pool.stop()
            self.log.info(f"workers stopped, {refused} queued request(s) refused")
        self.log.info("finalized")


def one_per_request(responses: Any, count: int, missing: Callable[[], Any]) -> list[Any]:
    """Exactly `count` responses: a None or absent one becomes `missing()`, extras are cut."""
    given = list(responses or [])[:count]
    given += [None] * (count - len(given))
    return [r if r is not None else missing() for r in given]


def request_rows(request: Any) -> int:
    """A request's batch size: its first input's first dimension (1 when unknown)."""
    try:
        shape = request.inputs()[0].shape()
        return int(shape[0]) if len(shape) else 1
    except (AttributeError, IndexError, TypeError):
        return 1


def send_final(sender: Any, response: Any) -> None:
    """A request's one response, sent after execute returned, with the final flag."""
    sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def input_array(request: Any, name: str) -> np.ndarray:
    """The named input of a request as a numpy array: `name`, or its `_INTERACTIVE` twin
    where the front's ensemble lane sent it (core/families/lanes.py)."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        tensor = pb_utils.get_input_tensor_by_name(request, name + INTERACTIVE_INPUT_SUFFIX)
    if tensor is None:
        raise InvalidInputError(f"the request has no input {name!r}")
    return tensor.as_numpy()


def ok_response(outputs: dict[str, np.ndarray]) -> Any:
    return pb_utils.InferenceResponse(
        output_tensors=[pb_utils.Tensor(name, array) for name, array in outputs.items()]
    )


def error_response(err: ModelError) -> Any:
    """A response carrying `err` with its Triton code (INVALID_ARG -> HTTP 400, ...)."""
    code = getattr(pb_utils.TritonError, err.code, pb_utils.TritonError.INTERNAL)
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err), code))
