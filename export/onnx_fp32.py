"""FP32 ONNX export of a torch module, with the family's named I/O, and structural checks."""

from __future__ import annotations

from pathlib import Path

import onnx
import torch

from export.quiet import quiet_export
from export.signature import Signature, check_onnx_signature

OPSET = 17


def export_onnx(
    model: torch.nn.Module,
    path: Path,
    sample: tuple[torch.Tensor, ...],
    contract: Signature,
    opset: int = OPSET,
) -> None:
    """Export with the TorchScript-based exporter (dynamo=False), named I/O and dynamic axes."""
    with quiet_export():
        torch.onnx.export(
            model,
            sample,
            str(path),
            input_names=contract.input_names,
            output_names=contract.output_names,
            dynamic_axes=contract.dynamic_axes(),
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )


def verify_onnx(path: Path, contract: Signature) -> onnx.ModelProto:
    """Run onnx.checker on the file and check the I/O contract; return the loaded model."""
    onnx.checker.check_model(str(path), full_check=True)
    model = onnx.load(str(path))
    check_onnx_signature(model, contract)
    return model


def export_settings(contract: Signature, opset: int = OPSET) -> dict[str, object]:
    """Format-specific settings recorded in provenance and folded into the fingerprint."""
    return {
        "exporter": "torch.onnx.export(dynamo=False)",
        "opset": opset,
        "input_names": contract.input_names,
        "output_names": contract.output_names,
        "dynamic_axes": {k: {str(i): d for i, d in v.items()}
                         for k, v in contract.dynamic_axes().items()},
        "do_constant_folding": True,
    }
