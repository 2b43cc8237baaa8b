"""TorchScript export (torch.jit.trace) of the SentenceEmbedder for Triton's libtorch backend."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from export.embedder import quiet_transformers
from export.signature import check_forward_arguments


def export_torchscript(
    model: torch.nn.Module, path: Path, sample: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """Trace the model on a sample batch (dynamic shapes follow from the traced ops) and save."""
    with warnings.catch_warnings(), quiet_transformers(), torch.no_grad():
        warnings.simplefilter("ignore")  # tracer notices; parity checks catch real problems
        traced = torch.jit.trace(model, sample, check_trace=False)
    traced.save(str(path))


def load_torchscript(path: Path) -> torch.jit.ScriptModule:
    """Load a saved TorchScript module on CPU and check its forward argument names."""
    module = torch.jit.load(str(path), map_location="cpu").eval()
    check_forward_arguments([arg.name for arg in module.forward.schema.arguments])
    return module


def export_settings() -> dict[str, object]:
    """Format-specific settings recorded in provenance and folded into the fingerprint."""
    return {"method": "torch.jit.trace", "check_trace": False, "map_location": "cpu"}
