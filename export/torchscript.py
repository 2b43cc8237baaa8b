"""TorchScript export (torch.jit.trace) of a torch module for Triton's libtorch backend."""

from __future__ import annotations

from pathlib import Path

import torch

from export.quiet import quiet_export
from export.signature import Signature, check_forward_arguments


def export_torchscript(model: torch.nn.Module, path: Path,
                       sample: tuple[torch.Tensor, ...]) -> None:
    """Trace the model on a sample batch (dynamic shapes follow from the traced ops) and save."""
    with quiet_export(), torch.no_grad():
        traced = torch.jit.trace(model, sample, check_trace=False)
    traced.save(str(path))


def load_torchscript(path: Path, contract: Signature) -> torch.jit.ScriptModule:
    """Load a saved TorchScript module on CPU and check its forward argument names."""
    module = torch.jit.load(str(path), map_location="cpu").eval()
    check_forward_arguments([arg.name for arg in module.forward.schema.arguments], contract)
    return module


def export_settings() -> dict[str, object]:
    """Format-specific settings recorded in provenance and folded into the fingerprint."""
    return {"method": "torch.jit.trace", "check_trace": False, "map_location": "cpu"}
