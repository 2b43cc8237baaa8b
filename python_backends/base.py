"""The shared skeleton of every Python-backend model in this project.

A model's `model.py` is a shim that imports its class from here. Subclasses override
`setup()` and `execute_requests()` (filling `self.batch` as they go); parsing the config,
logging, the per-batch structured log line and the one error path live here once: a
`ModelError` for one request becomes that request's `TritonError`, and whatever else goes
wrong, `execute` still returns exactly one response per request (`one_per_request`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from core.cpu_policy import BulkCpu
from core.settings import ModelSettings
from core.variant import REVIEWED, Variant
from python_backends import bls, diagnostics, metrics
from python_backends.cpu_priority import NORMAL, describe, lower, scheduling_of
from python_backends.gc_pauses import apply_policy
from python_backends.pb import Log, pb_utils
from python_backends.structured_log import BatchFacts, BatchLog
from python_backends.warmup import WarmupRuns
from runtime.errors import ModelError


class BaseModel:
    """Triton's `TritonPythonModel` interface with the boilerplate done once."""

    default_filename = ""
    yields_cpu: ClassVar[bool] = True  # False: never lowered (the health check)

    def initialize(self, args: dict[str, str]) -> None:
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
        self.batch = BatchFacts()
        self.warmup = WarmupRuns(self.config, self.log, args.get("model_instance_name", "0"))
        self.setup(args)
        apply_policy(settings.gc_policy)
        if not self.warmup.active:
            self.yield_cpu()

    def yield_cpu(self) -> None:
        """Lower every thread of this stub to its `cpu_scheduling` (its runtime's pools
        included; threads started later inherit it), once set up and warmed at normal
        priority: a stub that loads while other work takes the cores still gets ready."""
        lowered = lower(*self.scheduling)
        if lowered:
            self.log.info(f"cpu scheduling {self.scheduling[0]}: {len(lowered)} thread(s)")
        # what the dashboard and `tmr health` show: the policy this model's threads run at
        metrics.Gauge("tmr_cpu_scheduling", "The CPU policy of the model's threads: 1 "
                      "under `policy` (SCHED_IDLE, nice N or normal; core/cpu_policy.py)",
                      {"model": self.name, "policy": describe(*self.scheduling)}).set(1)
        metrics.flush()

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
        began = time.monotonic()
        self.batch = BatchFacts()
        warming = self.warmup.active
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
        self.batch_log.emit(requests, responses, self.batch, began, self.degradation_level())
        metrics.flush()  # the batch's counters, one round trip each
        if warming:
            self.warmup.finished(len(requests), time.monotonic() - began)
            if not self.warmup.active:
                self.yield_cpu()
        return responses

    def degradation_level(self) -> int | None:
        """The level the batch was served at (the router knows it; plain models do not)."""
        return None

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        raise NotImplementedError

    def finalize(self) -> None:
        self.log.info("finalized")


def one_per_request(responses: Any, count: int, missing: Callable[[], Any]) -> list[Any]:
    """Exactly `count` responses: a None or absent one becomes `missing()`, extras are cut."""
    given = list(responses or [])[:count]
    given += [None] * (count - len(given))
    return [r if r is not None else missing() for r in given]


def input_array(request: Any, name: str) -> np.ndarray:
    """The named input of a request as a numpy array."""
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


def ok_response(outputs: dict[str, np.ndarray]) -> Any:
    return pb_utils.InferenceResponse(
        output_tensors=[pb_utils.Tensor(name, array) for name, array in outputs.items()]
    )


def error_response(err: ModelError) -> Any:
    """A response carrying `err` with its Triton code (INVALID_ARG -> HTTP 400, ...)."""
    code = getattr(pb_utils.TritonError, err.code, pb_utils.TritonError.INTERNAL)
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err), code))
