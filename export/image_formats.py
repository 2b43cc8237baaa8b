"""The FP32 formats of an image classifier: ONNX and TorchScript export, I/O checks, parity.

The I/O contract: one input `pixel_values` float32 [batch, C, H, W] and one output `logits`
float32 [batch, classes], the batch axis dynamic; the TorchScript forward argument is named
`pixel_values` too.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from export.errors import ExportCheckError
from export.image_eval import LogitsFn
from export.image_nets import INPUT_NAME, OUTPUT_NAME, ImageNet
from export.parity import check_max_abs_diff, max_abs_diff

OPSET = 17


def export_onnx(model: torch.nn.Module, path: Path, sample: torch.Tensor) -> None:
    """TorchScript-based exporter (dynamo=False), named I/O, dynamic batch axis, opset 17."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # legacy-exporter deprecation notice; parity checks follow
        torch.onnx.export(
            model, (sample,), str(path), input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            opset_version=OPSET, do_constant_folding=True, dynamo=False,
        )  # fmt: skip


def _dims(value: onnx.ValueInfoProto) -> list[str | int]:
    dims = value.type.tensor_type.shape.dim
    return [d.dim_param if d.HasField("dim_param") else d.dim_value for d in dims]


def check_onnx_io(path: Path, net: ImageNet) -> dict[str, Any]:
    """onnx.checker (full) and the I/O contract; returns the I/O as recorded in the report."""
    onnx.checker.check_model(str(path), full_check=True)
    graph = onnx.load(str(path)).graph
    found = {
        "inputs": [(v.name, v.type.tensor_type.elem_type, _dims(v)) for v in graph.input],
        "outputs": [(v.name, v.type.tensor_type.elem_type, _dims(v)) for v in graph.output],
    }
    float32 = onnx.TensorProto.FLOAT
    expected = {"inputs": [(INPUT_NAME, float32, ["batch", *net.spec.shape])],
                "outputs": [(OUTPUT_NAME, float32, ["batch", net.classes])]}  # fmt: skip
    if found != expected:
        raise ExportCheckError(f"{path.name} I/O", found, expected)
    return {kind: [{"name": n, "dims": d} for n, _, d in v] for kind, v in found.items()}


def export_torchscript(model: torch.nn.Module, path: Path, sample: torch.Tensor) -> None:
    """torch.jit.trace on a sample batch and save (the batch axis stays dynamic for convs)."""
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(model, (sample,), check_trace=False)
    traced.save(str(path))


def load_torchscript(path: Path) -> torch.jit.ScriptModule:
    """Load on CPU and check that forward takes one argument named `pixel_values`."""
    module = torch.jit.load(str(path), map_location="cpu").eval()
    arguments = [a.name for a in module.forward.schema.arguments][1:]  # after `self`
    if arguments != [INPUT_NAME]:
        raise ExportCheckError(f"{path.name} forward arguments", arguments, [INPUT_NAME])
    return module


def parity(
    reference: LogitsFn, candidate: LogitsFn, inputs: np.ndarray, name: str, limit: float,
    full: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, float]:
    """Max abs diff of logits at batch 1 and 8 (and over a full set); raise above `limit`."""
    diffs = {f"batch{b}": max_abs_diff(reference(inputs[:b]), candidate(inputs[:b]))
             for b in (1, min(8, len(inputs)))}  # fmt: skip
    if full is not None:
        diffs[f"eval_set_{len(full[0])}"] = max_abs_diff(*full)
    for case, diff in diffs.items():
        check_max_abs_diff(f"{name} {case}", diff, limit)
    return diffs
