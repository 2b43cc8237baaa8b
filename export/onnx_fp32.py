"""FP32 ONNX export of the SentenceEmbedder and structural checks of the result."""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import torch

from export.embedder import quiet_transformers
from export.signature import INPUT_NAMES, OUTPUT_NAMES, check_onnx_signature, dynamic_axes

OPSET = 17


def export_onnx(
    model: torch.nn.Module,
    path: Path,
    sample: tuple[torch.Tensor, torch.Tensor],
    opset: int = OPSET,
) -> None:
    """Export with the TorchScript-based exporter (dynamo=False), named I/O and dynamic axes."""
    with warnings.catch_warnings(), quiet_transformers():
        # Legacy-exporter deprecation and tracer notices; parity checks catch real problems.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            sample,
            str(path),
            input_names=INPUT_NAMES,
            output_names=OUTPUT_NAMES,
            dynamic_axes=dynamic_axes(),
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )


def verify_onnx(path: Path) -> onnx.ModelProto:
    """Run onnx.checker on the file and check the I/O contract; return the loaded model."""
    onnx.checker.check_model(str(path), full_check=True)
    model = onnx.load(str(path))
    check_onnx_signature(model)
    return model


def export_settings(opset: int = OPSET) -> dict[str, object]:
    """Format-specific settings recorded in provenance and folded into the fingerprint."""
    return {
        "exporter": "torch.onnx.export(dynamo=False)",
        "opset": opset,
        "input_names": INPUT_NAMES,
        "output_names": OUTPUT_NAMES,
        "dynamic_axes": {k: {str(i): d for i, d in v.items()} for k, v in dynamic_axes().items()},
        "do_constant_folding": True,
    }
