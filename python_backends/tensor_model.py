"""Python-based replacements for Triton's native `onnxruntime` and `pytorch` backends.

The CPU dev server's wheel has neither native backend, so `backends/<name>/model.py`
loads these. One `config.pbtxt` then serves on both paths: native backends in the GPU
image, these on CPU. A whole dynamic batch runs as one runtime call (concatenate,
run, split), counted in `tmr_backend_runtime_calls_total`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from core.host_profile import runtime_threads
from core.params import (
    IDLE_THREADS_PARAMETER,
    OPENVINO_THREADS_PARAMETER,
    ORT_THREADS_PARAMETER,
    TORCH_THREADS_PARAMETER,
    ConfigError,
    non_negative_int,
    parameter,
    positive_int,
    tensor_names,
)
from core.settings import ENCODER_THREADS, BackendSettings, OpenVinoSettings
from python_backends.base import BaseModel, error_response, input_array, ok_response
from python_backends.batching import concat_feeds, group_by_shape, split_outputs
from python_backends.busy_peers import BusyPeers, IdleAwareRunner, peers_folder
from python_backends.errors import ModelError
from python_backends.input_limits import InputLimitError, read_limits
from python_backends.metrics import Counter
from python_backends.runners import Runner, RunnerError, artifact_runner, openvino_runner
from python_backends.structured_log import BatchFacts


class TensorModel(BaseModel):
    """The shared request loop of the Python-based backends: one runner per instance."""

    threads_parameter = ORT_THREADS_PARAMETER  # the native backend's parameter name
    runtime: str  # python_backends.runners.artifact_runner's runtime (each subclass's)
    idle_threads_supported = False  # a second session with more threads (ONNX, OpenVINO)
    idle_aware: IdleAwareRunner | None = None

    def setup(self, args: dict[str, str]) -> None:
        self.inputs = tensor_names(self.config, "input")
        self.outputs = tensor_names(self.config, "output")
        self.threads = runtime_threads(parameter(self.config, self.threads_parameter,
                                                 ENCODER_THREADS, non_negative_int))
        labels = {"model": self.name, "version": self.version}
        self.calls = Counter("tmr_backend_runtime_calls_total",
                             "Runtime (session) calls made by a Python-based backend", labels)
        self.rows = Counter("tmr_backend_runtime_rows_total",
                            "Rows (batch items) passed to runtime calls", labels)
        path = self.artifact_path()
        self.run = self.runner(path, self.threads)
        self.log.info(f"loaded {path} with {self.threads} thread(s) on {self.runtime}")
        idle = parameter(self.config, IDLE_THREADS_PARAMETER, self.threads, positive_int)
        if idle > self.threads:
            self._setup_idle_session(path, idle, args.get("model_instance_name", "0"), labels)

    def runner(self, path: Any, threads: int, idle: bool = False) -> Runner:
        """The runtime call of one batch with `threads` threads; `idle`: the idle
        session's, whose threads do not spin."""
        return self.make_runner(self.config, path, threads, idle)

    @classmethod
    def make_runner(cls, config: Mapping[str, Any], path: Any, threads: int,
                    idle: bool = False) -> Runner:
        """The runner of this backend for `config` (Triton's JSON form) over the artifact
        at `path`: what an instance runs, and what a front running its primary in process
        (python_backends/in_process.py) runs. onnxruntime or TorchScript here."""
        spinning = BackendSettings.from_parameters(config).allow_spinning and not idle
        return artifact_runner(path, cls.runtime, threads, tensor_names(config, "input"),
                               tensor_names(config, "output"), spinning)

    def _setup_idle_session(self, path: Any, threads: int, instance: str,
                            labels: dict[str, str]) -> None:
        """A second session with `threads` threads (no spinning), run when no other
        instance of this model is running a batch: a lone request gets every core, and
        under load each instance keeps its own thread."""
        if not self.idle_threads_supported:
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

    default_filename = "model.onnx"
    runtime = "onnxruntime"
    idle_threads_supported = True


class OpenVinoModel(TensorModel):
    """`backend: "openvino"` on the CPU, through the openvino package: the parameters of
    Triton's native OpenVINO backend (INFERENCE_NUM_THREADS; one stream in latency mode per
    instance) plus `inference_precision` (fp32 or bf16, which the native one reads as
    HINT_BF16)."""

    default_filename = "model.xml"  # the native backend's default; configs name model.onnx
    runtime = "openvino"
    threads_parameter = OPENVINO_THREADS_PARAMETER
    idle_threads_supported = True  # a second compiled model: +38 MiB for MiniLM, measured

    def runner(self, path: Any, threads: int, idle: bool = False) -> Runner:
        ov = OpenVinoSettings.from_parameters(self.config)
        self.log.info(f"OpenVINO: {threads} thread(s), {ov.NUM_STREAMS} stream(s), "
                      f"{ov.PERFORMANCE_HINT}, {ov.inference_precision}")
        return self.make_runner(self.config, path, threads, idle)

    @classmethod
    def make_runner(cls, config: Mapping[str, Any], path: Any, threads: int,
                    idle: bool = False) -> Runner:
        """OpenVINO's call, behind the input checks onnxruntime makes and it does not
        (python_backends/input_limits.py)."""
        ov = OpenVinoSettings.from_parameters(config)
        limits = read_limits(path, same_shape_inputs(config))
        run = openvino_runner(path, threads, tensor_names(config, "output"),
                              ov.inference_precision, ov.NUM_STREAMS, ov.PERFORMANCE_HINT)

        def checked(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            try:
                limits.check(feeds)
            except InputLimitError as err:
                raise RunnerError(str(err)) from err
            return run(feeds)

        return checked


def same_shape_inputs(config: dict[str, Any]) -> tuple[tuple[str, ...], ...]:
    """Groups of inputs that the config declares with the same data type and dims."""
    groups: dict[tuple, list[str]] = {}
    for tensor in config.get("input", []):
        key = (tensor.get("data_type"), tuple(tensor.get("dims", [])))
        groups.setdefault(key, []).append(tensor["name"])
    return tuple(tuple(names) for names in groups.values() if len(names) > 1)


class TorchScriptModel(TensorModel):
    """`platform: "pytorch_libtorch"` on the CPU, through torch.jit.

    Inputs are passed positionally in config order, which must match the forward()
    arguments (the native backend maps them by name)."""

    default_filename = "model.pt"
    runtime = "pytorch"
    threads_parameter = TORCH_THREADS_PARAMETER


# The Python-based backend of each `backend` (or `platform`) an encoder's config names.
BACKENDS: dict[str, type[TensorModel]] = {
    "onnxruntime": OnnxRuntimeModel, "openvino": OpenVinoModel,
    "pytorch_libtorch": TorchScriptModel, "pytorch": TorchScriptModel}


def served_runner(config: Mapping[str, Any], version_dir: Path,
                  threads: int | None = None) -> Runner:
    """The runner an encoder's served config describes over the artifact of one version
    folder, with the threads of one of its instances (or `threads`) and no idle session:
    an instance's call, made by another process (python_backends/in_process.py)."""
    kind = config.get("backend") or config.get("platform") or ""
    if kind not in BACKENDS:
        raise ConfigError(f"{config.get('name')!r} is served by {kind!r}, which no "
                          f"in-process runner knows ({', '.join(BACKENDS)})")
    backend = BACKENDS[kind]
    filename = config.get("default_model_filename") or backend.default_filename
    threads = threads or runtime_threads(parameter(config, backend.threads_parameter,
                                                   ENCODER_THREADS, non_negative_int))
    return backend.make_runner(config, version_dir / filename, threads)
