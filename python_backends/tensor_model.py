"""Python-based replacements for Triton's native `onnxruntime` and `pytorch` backends.

The CPU dev server's wheel has neither native backend, so `backends/<name>/model.py`
loads these. One `config.pbtxt` then serves on both paths: native backends in the GPU
image, these on CPU. A whole dynamic batch runs as one runtime call (concatenate,
run, split), counted in `tmr_backend_runtime_calls_total`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.params import (
    IDLE_THREADS_PARAMETER,
    ConfigError,
    parameter,
    positive_int,
    tensor_names,
)
from core.settings import OpenVinoSettings
from python_backends.base import BaseModel, error_response, input_array, ok_response
from python_backends.busy_peers import BusyPeers, IdleAwareRunner, peers_folder
from python_backends.metrics import Counter
from python_backends.structured_log import BatchFacts
from runtime.batching import concat_feeds, group_by_shape, split_outputs
from runtime.errors import ModelError
from runtime.runners import Runner, RunnerError
from runtime.served import (
    ONNXRUNTIME,
    OPENVINO,
    TORCHSCRIPT,
    Backend,
    config_runner,
    config_threads,
)


class TensorModel(BaseModel):
    """The shared request loop of the Python-based backends: one runner per instance."""

    backend: Backend  # runtime/served.py: how its config runs in-process (each subclass's)
    idle_aware: IdleAwareRunner | None = None

    def setup(self, args: dict[str, str]) -> None:
        self.inputs = tensor_names(self.config, "input")
        self.outputs = tensor_names(self.config, "output")
        self.threads = config_threads(self.config)
        labels = {"model": self.name, "version": self.version}
        self.calls = Counter("tmr_backend_runtime_calls_total",
                             "Runtime (session) calls made by a Python-based backend", labels)
        self.rows = Counter("tmr_backend_runtime_rows_total",
                            "Rows (batch items) passed to runtime calls", labels)
        path = self.artifact_path()
        self.run = self.runner(path, self.threads)
        self.log.info(f"loaded {path} with {self.threads} thread(s) on {self.backend.runtime}")
        idle = parameter(self.config, IDLE_THREADS_PARAMETER, self.threads, positive_int)
        if idle > self.threads:
            self._setup_idle_session(path, idle, args.get("model_instance_name", "0"), labels)

    def runner(self, path: Any, threads: int, idle: bool = False) -> Runner:
        """The runtime call of one batch with `threads` threads; `idle`: the idle
        session's, whose threads do not spin (runtime/served.py config_runner)."""
        return config_runner(self.config, path, threads, idle)

    def _setup_idle_session(self, path: Any, threads: int, instance: str,
                            labels: dict[str, str]) -> None:
        """A second session with `threads` threads (no spinning), run when no other
        instance of this model is running a batch: a lone request gets every core, and
        under load each instance keeps its own thread."""
        if not self.backend.idle_session:
            raise ConfigError(f"{IDLE_THREADS_PARAMETER} is for onnxruntime and openvino "
                              f"models, not {type(self).__name__}")
        self.idle_aware = IdleAwareRunner(
            self.run, self.runner(path, threads, idle=True),
            BusyPeers(peers_folder(self.name, self.version), instance))
        self.idle_calls = Counter(
            "tmr_backend_idle_session_calls_total",
            "Runtime calls made with the idle session (no other instance was busy)", labels)
        self.log.info(f"idle session: {threads} intra-op threads when no peer is busy")

    def finalize(self) -> None:
        if self.idle_aware is not None:
            self.idle_aware.close()
        super().finalize()

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        feeds = [{name: input_array(r, name) for name in self.inputs} for r in requests]
        self.batch = BatchFacts(
            batch_size=sum(len(next(iter(f.values()))) for f in feeds if f),
            input_bytes=sum(a.nbytes for f in feeds for a in f.values()))
        responses: list[Any] = [None] * len(requests)
        for group in group_by_shape(feeds):
            batch, sizes = concat_feeds([feeds[i] for i in group])
            try:
                parts = split_outputs(self._counted_run(batch, sum(sizes)), sizes)
            except (RunnerError, ValueError) as err:
                failure = error_response(ModelError(f"{type(err).__name__}: {err}"))
                for i in group:
                    responses[i] = failure
                continue
            for i, part in zip(group, parts):
                responses[i] = ok_response(part)
        return responses

    def _counted_run(self, batch: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        if self.idle_aware is None:
            out = self.run(batch)
        elif self.warmup.active and rows == 1:  # both: which one serves depends on peers
            out = self.run(batch)
            self.idle_aware.idle_run(batch)
            self.warmup.note = "the instance's session and the idle session"
        elif self.warmup.active:  # a batch comes under load, when the idle session is not
            out = self.run(batch)  # used: warming it too held memory it never needs
        else:
            out, idle = self.idle_aware(batch)
            if idle:
                self.idle_calls.inc()
        self.calls.inc()
        self.rows.inc(rows)
        return out


class OnnxRuntimeModel(TensorModel):
    """`backend: "onnxruntime"` on the CPU, through the onnxruntime package."""

    default_filename = ONNXRUNTIME.default_filename
    backend = ONNXRUNTIME


class OpenVinoModel(TensorModel):
    """`backend: "openvino"` on the CPU, through the openvino package: the parameters of
    Triton's native OpenVINO backend (INFERENCE_NUM_THREADS; one stream in latency mode per
    instance) plus `inference_precision` (fp32 or bf16, which the native one reads as
    HINT_BF16). Its idle session is a second compiled model: +38 MiB for MiniLM, measured."""

    default_filename = OPENVINO.default_filename
    backend = OPENVINO

    def runner(self, path: Any, threads: int, idle: bool = False) -> Runner:
        ov = OpenVinoSettings.from_parameters(self.config)
        self.log.info(f"OpenVINO: {threads} thread(s), {ov.NUM_STREAMS} stream(s), "
                      f"{ov.PERFORMANCE_HINT}, {ov.inference_precision}")
        return super().runner(path, threads, idle)


class TorchScriptModel(TensorModel):
    """`platform: "pytorch_libtorch"` on the CPU, through torch.jit.

    Inputs are passed positionally in config order, which must match the forward()
    arguments (the native backend maps them by name)."""

    default_filename = TORCHSCRIPT.default_filename
    backend = TORCHSCRIPT
