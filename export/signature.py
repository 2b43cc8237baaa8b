"""The I/O contract an exported artifact must honour, and checks against it.

The contract comes from the model's family (core/families): the encoder's
input and output names and types, with a dynamic batch axis, dynamic axes where the
family's dims are -1, and the model's own dimension. Triton's configs rely on exactly
these names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import onnx

from core.families import Family
from core.families.configs import sizes_of
from export.errors import ExportCheckError

ONNX_TYPES = {"TYPE_INT64": onnx.TensorProto.INT64, "TYPE_FP32": onnx.TensorProto.FLOAT,
              "TYPE_INT32": onnx.TensorProto.INT32}


@dataclass(frozen=True)
class TensorSpec:
    """One named tensor: ONNX element type and dims (str = dynamic axis name, int = fixed)."""

    name: str
    elem_type: int
    dims: tuple[str | int, ...]


@dataclass(frozen=True)
class Signature:
    """The encoder's inputs and outputs as an export must write them."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @property
    def input_names(self) -> list[str]:
        return [spec.name for spec in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [spec.name for spec in self.outputs]

    def dynamic_axes(self) -> dict[str, dict[int, str]]:
        """The `dynamic_axes` argument of torch.onnx.export for this contract."""
        return {spec.name: {i: d for i, d in enumerate(spec.dims) if isinstance(d, str)}
                for spec in (*self.inputs, *self.outputs)}


def signature(family: Family, dimension: int, input_shape: tuple[int, ...] = ()) -> Signature:
    """The family's encoder contract for a model of `dimension` (and of `input_shape`,
    sizing Family.input_dims: an image's), with the batch axis first."""
    sizes = sizes_of(dimension, input_shape, family.input_dims)

    def spec(name: str, data_type: str, dims: tuple, axis: str) -> TensorSpec:
        shape = tuple(sizes[d] if isinstance(d, str) else
                      ((axis if i == 0 else f"{axis}{i}") if d == -1 else d)
                      for i, d in enumerate(dims))
        return TensorSpec(name, ONNX_TYPES[data_type], ("batch", *shape))

    contract = family.contract
    return Signature(
        tuple(spec(t.name, t.data_type, t.dims, "sequence") for t in contract.encoder_inputs),
        (spec(contract.encoder_output.name, contract.encoder_output.data_type,
              contract.encoder_output.dims, "axis"),))


def _describe(value: onnx.ValueInfoProto) -> TensorSpec:
    tensor = value.type.tensor_type
    dims = tuple(d.dim_param if d.HasField("dim_param") else d.dim_value for d in tensor.shape.dim)
    return TensorSpec(value.name, tensor.elem_type, dims)


def _dims_match(expected: tuple[str | int, ...], actual: tuple[str | int, ...]) -> bool:
    """Same rank; a named (dynamic) axis must be dynamic, a fixed one fixed-equal or dynamic.

    The exporter leaves the embedding width symbolic; Triton accepts a dynamic model dim there.
    """
    if len(expected) != len(actual):
        return False
    dynamic = [isinstance(d, str) or d == 0 for d in actual]
    return all(
        is_dyn if isinstance(want, str) else (is_dyn or got == want)
        for want, got, is_dyn in zip(expected, actual, dynamic, strict=True)
    )


def check_onnx_signature(model: onnx.ModelProto, contract: Signature) -> None:
    """Raise ExportCheckError unless the graph's inputs/outputs match the contract."""
    initializers = {i.name for i in model.graph.initializer}
    actual = (
        tuple(_describe(v) for v in model.graph.input if v.name not in initializers),
        tuple(_describe(v) for v in model.graph.output),
    )
    expected_both = (contract.inputs, contract.outputs)
    for kind, expected, got in zip(("inputs", "outputs"), expected_both, actual, strict=True):
        same = len(expected) == len(got) and all(
            (w.name, w.elem_type) == (g.name, g.elem_type) and _dims_match(w.dims, g.dims)
            for w, g in zip(expected, got, strict=False)
        )
        if not same:
            raise ExportCheckError(f"ONNX {kind}", list(got), list(expected))


def check_forward_arguments(argument_names: Sequence[str], contract: Signature) -> None:
    """Raise ExportCheckError unless a TorchScript forward takes (self,) the contract's
    inputs in order: Triton's libtorch backend maps inputs to forward-argument names."""
    names = [n for n in argument_names if n != "self"]
    if names != contract.input_names:
        raise ExportCheckError("TorchScript forward arguments", names, contract.input_names)
