"""The I/O contract every MiniLM artifact must honour, and checks against it.

Inputs `input_ids` and `attention_mask` are int64 [batch, sequence]; the output `embedding`
is float32 [batch, 384]. Triton's configs rely on exactly these names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import onnx

from export.errors import ExportCheckError


@dataclass(frozen=True)
class TensorSpec:
    """One named tensor: ONNX element type and dims (str = dynamic axis name, int = fixed)."""

    name: str
    elem_type: int
    dims: tuple[str | int, ...]


EMBEDDING_DIM = 384

INPUTS: tuple[TensorSpec, ...] = (
    TensorSpec("input_ids", onnx.TensorProto.INT64, ("batch", "sequence")),
    TensorSpec("attention_mask", onnx.TensorProto.INT64, ("batch", "sequence")),
)
OUTPUTS: tuple[TensorSpec, ...] = (
    TensorSpec("embedding", onnx.TensorProto.FLOAT, ("batch", EMBEDDING_DIM)),
)
INPUT_NAMES = [spec.name for spec in INPUTS]
OUTPUT_NAMES = [spec.name for spec in OUTPUTS]


def dynamic_axes() -> dict[str, dict[int, str]]:
    """The `dynamic_axes` argument of torch.onnx.export for this contract."""
    return {
        spec.name: {i: d for i, d in enumerate(spec.dims) if isinstance(d, str)}
        for spec in (*INPUTS, *OUTPUTS)
    }


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


def check_onnx_signature(model: onnx.ModelProto) -> None:
    """Raise ExportCheckError unless the graph's inputs/outputs match INPUTS/OUTPUTS."""
    initializers = {i.name for i in model.graph.initializer}
    actual = (
        tuple(_describe(v) for v in model.graph.input if v.name not in initializers),
        tuple(_describe(v) for v in model.graph.output),
    )
    for kind, expected, got in zip(("inputs", "outputs"), (INPUTS, OUTPUTS), actual, strict=True):
        same = len(expected) == len(got) and all(
            (w.name, w.elem_type) == (g.name, g.elem_type) and _dims_match(w.dims, g.dims)
            for w, g in zip(expected, got, strict=False)
        )
        if not same:
            raise ExportCheckError(f"ONNX {kind}", list(got), list(expected))


def check_forward_arguments(argument_names: Sequence[str]) -> None:
    """Raise ExportCheckError unless a TorchScript forward takes (self,) input_ids, attention_mask.

    Triton's libtorch backend maps inputs to forward-argument names, so they must not change.
    """
    names = [n for n in argument_names if n != "self"]
    if names != INPUT_NAMES:
        raise ExportCheckError("TorchScript forward arguments", names, INPUT_NAMES)
