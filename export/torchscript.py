"""TorchScript export (torch.jit.trace) of a torch module for Triton's libtorch backend."""

from __future__ import annotations

from pathlib import Path

import torch

from export.quiet import quiet_export
from export.signature import Signature, check_forward_arguments
from runtime.runners import Runner, torchscript_runner


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


def traced_runner(model: torch.nn.Module, path: Path, sample: tuple[torch.Tensor, ...],
                  contract: Signature, threads: int) -> Runner:
    """The model traced to `path`, loaded back with its arguments checked against the
    contract, and a runner of the saved file (what the format's parity is measured on)."""
    export_torchscript(model, path, sample)
    load_torchscript(path, contract)
    return torchscript_runner(path, threads, contract.input_names, contract.output_names)


def export_settings() -> dict[str, object]:
    """Format-specific settings recorded in provenance and folded into the fingerprint."""
    return {"method": "torch.jit.trace", "check_trace": False, "map_location": "cpu"}
