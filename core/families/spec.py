"""What a model family is: tensors, formats and the front model that serves them (pure).

A family describes a kind of model once; the repository holds the models of that kind
(their `config.pbtxt` parameters carry every model-specific value). Export, the release
commands, health and the watchdog, `tmr serve`, perf and the tests read both.

A `Family` holds its name, its fronts' backend, its formats and its perf inputs, and one
group per concern:

- `contract` (`TensorContract`): the front's artifact and tensors and the encoders'; the
  configs (core/families/configs.py), export's signatures and the stubs use it;
- `serving` (`ServingDefaults`): what a new front config gets (settings, batching,
  instances, max_batch_size, primary and fallback formats, warmup); the configs use it;
- `probes` (`Probes`): the health probes and their check, which python_backends/health.py
  (and the watchdog) run through core/probes.py, and `describe_answer`, used only by
  server/serve.py;
- `rollout` (`AgreementHooks`): a rollout's agreement and its gates, which the front
  (python_backends/front.py) and server/rollout.py judge by.

The stubs in python_backends use the contract, the serving defaults, the probes and the
agreement hooks, which is why all of it stays in core.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from core.families.warmup import WarmupPlan
from core.params import (
    OPENVINO_THREADS_PARAMETER,
    ORT_THREADS_PARAMETER,
    TORCH_THREADS_PARAMETER,
)
from core.served_by import OUTPUT as SERVED_BY_OUTPUT
from core.settings import DynamicBatching, OpenVinoSettings, ParameterSettings

DIM = "dim"  # a tensor dimension that is the model's own (its embedding size, its classes)
IMAGE_DIMS = ("channels", "height", "width")  # an image model's input, its own too
# Any other name in an encoder input's dims is also the model's own size: a family names
# its input's sizes as it likes (Family.input_dims), and a model's input_shape gives them.


class AgreementGates(NamedTuple):
    """The config parameters that judge a rollout's agreement: on the mean over rows, and
    on each row (None: the family judges the mean only)."""

    mean: str
    per_row: str | None


@dataclass(frozen=True)
class Tensor:
    """One input or output: name, Triton data type and dims without the batch dimension;
    a named dim (DIM, IMAGE_DIMS) is the model's own size, given when resolved."""

    name: str
    data_type: str  # Triton's TYPE_* name
    dims: tuple[int | str, ...]

    def resolved(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(sizes[d] if isinstance(d, str) else int(d) for d in self.dims)


# What served each row of every front's answer: core/served_by.py
SERVED_BY = Tensor(SERVED_BY_OUTPUT, "TYPE_STRING", (1,))


@dataclass(frozen=True)
class Format:
    """One exported form of a family's network, served by one Triton backend."""

    name: str  # the model folder is "<base>_<name>"
    precision: str  # "fp32" or "int8", what SERVED_BY reports
    artifact: str  # the file in each version folder
    backend: str = ""  # `backend:` of the config (onnxruntime), or
    platform: str = ""  # `platform:` (pytorch_libtorch)
    output_suffix: str = ""  # libtorch wants outputs named "<name>__<index>"
    threads_parameter: str = ORT_THREADS_PARAMETER  # the CPU backend's thread setting
    gpu: bool = True  # has a GPU profile (configs/gpu.pbtxt)
    gate: Mapping[str, str] = field(default_factory=dict)  # default gate_* parameters
    parameters: Mapping[str, str] = field(default_factory=dict)  # the backend's own settings
    host_precision: bool = False  # runs at the host's precision (inference_precision)
    idle_session: bool = False  # its CPU backend can add a session for a lone request

    @property
    def runtime(self) -> str:
        """What runs the artifact in-process (runtime.runners.artifact_runner)."""
        return self.backend or "pytorch"


PRECISION_PARAMETER = "inference_precision"  # fp32 or bf16, of a host_precision format
# The settings of Triton's native OpenVINO backend (r24.10 src/openvino.cc) that the
# Python-based one reads too: one stream per instance, latency mode (Triton's instances and
# dynamic batcher do the parallelism), and padding a short batch to max_batch_size, without
# which the native backend refuses any batch but a full one (docs/gpu_hosts.md).
OPENVINO_PARAMETERS = {k: v for k, v in OpenVinoSettings().to_parameters().items()
                       if k != PRECISION_PARAMETER}


def standard_formats(fp32_gate: Mapping[str, str],
                     int8_gate: Mapping[str, str]) -> tuple[Format, ...]:
    """ONNX FP32, TorchScript FP32, ONNX INT8 (the fallback, CPU only) and the FP32 ONNX
    file run by OpenVINO at the host's precision (CPU only), each with its release-gate
    defaults: the formats every family exports. The primary is chosen among the formats
    that pass the FP32 gate by measurement on the host (export/primary_choice.py)."""
    return (
        Format("onnx", "fp32", "model.onnx", backend="onnxruntime", gate=fp32_gate,
               idle_session=True),
        Format("torchscript", "fp32", "model.pt", platform="pytorch_libtorch",
               output_suffix="__0", threads_parameter=TORCH_THREADS_PARAMETER, gate=fp32_gate),
        Format("int8", "int8", "model.onnx", backend="onnxruntime", gpu=False, gate=int8_gate,
               idle_session=True),
        Format("openvino", "fp32", "model.onnx", backend="openvino", gpu=False,
               threads_parameter=OPENVINO_THREADS_PARAMETER, gate=fp32_gate,
               parameters=OPENVINO_PARAMETERS, host_precision=True, idle_session=True),
    )


# A health probe: (front or encoder config parameters) -> (inputs, outputs to ask for).
Probe = Callable[[Mapping[str, str]], tuple[dict[str, np.ndarray], list[str]]]
# Checks a probe's first output: None when sane, else what is wrong.
ProbeCheck = Callable[[np.ndarray, Mapping[str, str]], str | None]
# One line for a person about a front model's answer, from its outputs by name.
Describe = Callable[[Mapping[str, np.ndarray]], str]


def zeros_probe(encoder_input: Tensor, encoder_output: Tensor) -> Probe:
    """The encoder probe of a family whose encoder takes one float32 input of the model's
    own size: one row of zeros of the config's input dims (core/probes.py `input_dims`)."""

    def probe(params: Mapping[str, str]) -> tuple[dict[str, np.ndarray], list[str]]:
        shape = [int(d) for d in params["input_dims"].split(",")]
        return ({encoder_input.name: np.zeros([1, *shape], dtype=np.float32)},
                [params.get("output", encoder_output.name)])

    return probe


@dataclass(frozen=True)
class TensorContract:
    """The tensors of a family's front and encoders, and the file a front's version
    folder holds (its tokenizer, its labels)."""

    front_artifact: str
    front_inputs: tuple[Tensor, ...]
    front_outputs: tuple[Tensor, ...]
    encoder_inputs: tuple[Tensor, ...]
    encoder_output: Tensor


@dataclass(frozen=True)
class ServingDefaults:
    """What a new front config gets from its family, and the formats it calls."""

    primary: str  # the format the front calls normally
    fallback: str  # ... and when degraded
    front_settings: tuple[ParameterSettings, ...]  # a new front's parameters (core/settings)
    front_batching: DynamicBatching  # ... and its dynamic_batching
    front_instances: int
    max_batch_size: int
    warmup: WarmupPlan  # the samples every instance runs before READY (core/families/warmup)

    @property
    def front_parameters(self) -> dict[str, str]:
        """The parameters a new front config gets from the family (its settings)."""
        return {key: value for settings in self.front_settings
                for key, value in settings.to_parameters().items()}


@dataclass(frozen=True)
class Probes:
    """The health probes of a family's fronts and encoders, their check, and what
    `tmr serve` prints of its example call."""

    front_probe: Probe
    encoder_probe: Probe
    check_probe: ProbeCheck
    describe_answer: Describe


@dataclass(frozen=True)
class AgreementHooks:
    """A rollout's per-row agreement of a candidate's encoder outputs with the served
    version's, and the gate parameters judging it."""

    agreement: Callable[[np.ndarray, np.ndarray], np.ndarray]
    agreement_gates: AgreementGates


@dataclass(frozen=True)
class Family:
    """One description of a kind of model; see the module docstring."""

    name: str
    backend: str  # the Python-based backend (python_backends/backends/<name>) of its fronts
    formats: tuple[Format, ...]
    perf_inputs: str  # perf_analyzer input data of a front, under perf/inputs/
    contract: TensorContract
    serving: ServingDefaults
    probes: Probes
    rollout: AgreementHooks

    @property
    def input_dims(self) -> tuple[str, ...]:
        """The named sizes of the encoder's first input that a model gives (its
        `input_shape`, in this order): an image's channels, height and width; none for
        text, whose inputs are only dynamic."""
        return tuple(d for d in self.contract.encoder_inputs[0].dims
                     if isinstance(d, str) and d != DIM)

    def format(self, name: str) -> Format:
        for fmt in self.formats:
            if fmt.name == name:
                return fmt
        raise KeyError(f"family {self.name!r} has no format {name!r}; it has "
                       f"{', '.join(f.name for f in self.formats)}")

    def encoder_name(self, base: str, fmt: str) -> str:
        return f"{base}_{self.format(fmt).name}"

    def split_encoder_name(self, name: str) -> tuple[str, str]:
        """(base, format) of an encoder's name "<base>_<format>"; ValueError otherwise."""
        for fmt in sorted(self.formats, key=lambda f: -len(f.name)):
            if name.endswith("_" + fmt.name):
                return name.removesuffix("_" + fmt.name), fmt.name
        raise ValueError(f"{name!r} is not an encoder of the {self.name} family "
                         f"(<base>_<format>; formats {', '.join(f.name for f in self.formats)})")
