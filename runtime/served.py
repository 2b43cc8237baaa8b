"""The runner an encoder's config describes: the one mapping from a `config.pbtxt` (its
backend or platform, artifact, threads and precision) to an in-process call.

What a Python-based backend instance runs (python_backends/tensor_model.py), what a front
runs in its own process (python_backends/in_process.py), and what `tmr perf plan` times in
its own (server/plan.py) are this one function's answer, so the three cannot drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.host_profile import runtime_threads
from core.params import (
    OPENVINO_THREADS_PARAMETER,
    ORT_THREADS_PARAMETER,
    TORCH_THREADS_PARAMETER,
    ConfigError,
    non_negative_int,
    parameter,
    tensor_names,
)
from core.settings import ENCODER_THREADS, BackendSettings, OpenVinoSettings
from runtime.input_limits import InputLimitError, read_limits
from runtime.runners import Runner, RunnerError, artifact_runner, openvino_runner


@dataclass(frozen=True)
class Backend:
    """How a config's `backend` (or `platform`) runs in-process."""

    runtime: str  # runtime.runners.artifact_runner's runtime
    default_filename: str  # the native backend's default artifact name
    threads_parameter: str  # the native backend's thread setting
    idle_session: bool  # supports the idle session (python_backends/busy_peers.py)


ONNXRUNTIME = Backend("onnxruntime", "model.onnx", ORT_THREADS_PARAMETER, True)
# The native backend's default is model.xml; configs name model.onnx.
OPENVINO = Backend("openvino", "model.xml", OPENVINO_THREADS_PARAMETER, True)
TORCHSCRIPT = Backend("pytorch", "model.pt", TORCH_THREADS_PARAMETER, False)
BACKENDS: dict[str, Backend] = {"onnxruntime": ONNXRUNTIME, "openvino": OPENVINO,
                                "pytorch_libtorch": TORCHSCRIPT, "pytorch": TORCHSCRIPT}


def backend_of(config: Mapping[str, Any]) -> Backend:
    """The in-process backend of a config (Triton's JSON form); ConfigError if none."""
    kind = config.get("backend") or config.get("platform") or ""
    if kind not in BACKENDS:
        raise ConfigError(f"{config.get('name')!r} is served by {kind!r}, which no "
                          f"in-process runner knows ({', '.join(BACKENDS)})")
    return BACKENDS[kind]


def config_threads(config: Mapping[str, Any]) -> int:
    """An instance's threads by the config (0 there: every usable core)."""
    return runtime_threads(parameter(config, backend_of(config).threads_parameter,
                                     ENCODER_THREADS, non_negative_int))


def config_runner(config: Mapping[str, Any], path: Path, threads: int,
                  idle: bool = False) -> Runner:
    """The call of one batch over the artifact at `path` as the config says; `idle`: the
    idle session's, whose threads do not spin. OpenVINO runs behind the input checks
    onnxruntime makes and it does not (runtime/input_limits.py)."""
    backend = backend_of(config)
    if backend is not OPENVINO:
        spinning = BackendSettings.from_parameters(config).allow_spinning and not idle
        return artifact_runner(path, backend.runtime, threads, tensor_names(config, "input"),
                               tensor_names(config, "output"), spinning)
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


def same_shape_inputs(config: Mapping[str, Any]) -> tuple[tuple[str, ...], ...]:
    """Groups of inputs that the config declares with the same data type and dims."""
    groups: dict[tuple, list[str]] = {}
    for tensor in config.get("input", []):
        key = (tensor.get("data_type"), tuple(tensor.get("dims", [])))
        groups.setdefault(key, []).append(tensor["name"])
    return tuple(tuple(names) for names in groups.values() if len(names) > 1)


def served_runner(config: Mapping[str, Any], version_dir: Path,
                  threads: int | None = None) -> Runner:
    """The runner an encoder's served config describes over the artifact of one version
    folder, with the threads of one of its instances (or `threads`) and no idle session."""
    filename = config.get("default_model_filename") or backend_of(config).default_filename
    return config_runner(config, version_dir / filename, threads or config_threads(config))
