"""Typed access to a model config's `parameters {}` (settings are data, not code)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from core.errors import CoreError

T = TypeVar("T")


# Each CPU backend's intra-op threads parameter, as its native backend names it
# (core/families/spec.py Format.threads_parameter; python_backends/tensor_model.py).
ORT_THREADS_PARAMETER = "intra_op_thread_count"  # onnxruntime
TORCH_THREADS_PARAMETER = "INTRA_OP_THREAD_COUNT"  # pytorch_libtorch
OPENVINO_THREADS_PARAMETER = "INFERENCE_NUM_THREADS"
# An onnxruntime encoder's second session, run when its peer instances are idle
# (python_backends/tensor_model.py); its configs set it to instances x threads.
IDLE_THREADS_PARAMETER = "idle_intra_op_thread_count"


class ConfigError(CoreError, ValueError):
    """A config parameter is present but cannot be used; raised from initialize()."""

    exit_code = 2


def parameter(config: Mapping[str, Any], key: str, default: T, cast: Callable[[str], T]) -> T:
    """`parameters[key].string_value` cast with `cast`, or `default` when absent."""
    raw = config.get("parameters", {}).get(key, {}).get("string_value")
    if raw is None or raw == "":
        return default
    try:
        return cast(raw)
    except ValueError as err:
        raise ConfigError(f"parameter {key!r}={raw!r} is invalid: {err}") from err


def required(config: Mapping[str, Any], key: str) -> str:
    """`parameters[key].string_value`, which the config must set (a generated one does)."""
    raw = config.get("parameters", {}).get(key, {}).get("string_value")
    if not raw:
        raise ConfigError(f"parameter {key!r} is missing; the config must set it")
    return raw


def positive_int(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError("must be a positive integer")
    return value


def non_negative_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError("must be an integer >= 0")
    return value


def one_of(*choices: str) -> Callable[[str], str]:
    def cast(raw: str) -> str:
        if raw not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return raw

    return cast


def flag(raw: str) -> bool:
    """"true" or "false", in any case."""
    return one_of("true", "false")(raw.lower()) == "true"


def tensor_names(config: Mapping[str, Any], kind: str) -> list[str]:
    """Names of the config's `input` or `output` tensors, in config order."""
    return [t["name"] for t in config.get(kind, [])]
