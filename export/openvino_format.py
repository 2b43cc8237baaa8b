"""The `openvino` format of any family: the FP32 ONNX export, read by OpenVINO's CPU plugin
at the host's inference precision (core.hardware: bf16 where the CPU has avx512_bf16 or
AMX, fp32 otherwise).

The artifact is the same ONNX file the `onnx` format serves, not an IR: Triton's native
OpenVINO backend of NGC 24.10 reads it with `read_model` (default_model_filename
model.onnx), and an IR written by this newer OpenVINO could hold operations that the
image's older runtime does not know. What differs is the runtime and its precision, so the
checks are the runtime's: parity with eager PyTorch at fp32 (the `onnx` format's
threshold), and at any precision the family's FP32 release gate (text: mean and minimum
row cosine; images: top-1 agreement and accuracy where labels exist) on the recipe's
gate batches against eager PyTorch. The precision and the host's CPU model and flags go
into the provenance, so another host can re-check the choice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from core.hardware import FP32, host_cpu
from export.errors import ExportCheckError
from export.quality import gate_floats
from runtime.runners import Runner, openvino_runner

FORMAT = "openvino"


def openvino_version() -> str:
    import openvino as ov

    return ov.get_version()


def settings(onnx_settings: Mapping[str, Any], precision: str) -> dict[str, Any]:
    """What, beside the weights and the ONNX export, determines the format's checks."""
    return {"onnx": dict(onnx_settings),
            "openvino": {"version": openvino_version(), "precision": precision}}


def build(recipe: Any, export_onnx: Callable[[Path], None], path: Path, precision: str,
          check_parity: Callable[[Runner, str], dict[str, float]],
          output: str) -> tuple[dict[str, Any], dict[str, Any], Runner]:
    """Export the ONNX file to `path`, run it on OpenVINO at `precision` and check it;
    (checks, figures, the runner) or ExportCheckError."""
    export_onnx(path)
    run = openvino_runner(path, recipe.threads, precision=precision)
    checks: dict[str, Any] = {"precision": precision, "cpu": host_cpu(),
                              "openvino": openvino_version()}
    figures: dict[str, Any] = {"precision": precision}
    if precision == FP32:
        diffs = check_parity(run, FORMAT)
        checks["parity_max_abs_diff"] = diffs
        figures["max_abs_diff"] = f"{max(diffs.values()):.2e}"
    gates = gate_floats(recipe.family.format(FORMAT).gate)
    batches = recipe.gate_batches()
    reference = np.concatenate([recipe.eager(f)[recipe.contract.output_names[0]]
                                for f in batches])
    candidate = np.concatenate([run(f)[output] for f in batches])
    stats, why = recipe.judge_quality(reference, candidate, gates)
    checks |= {"fidelity_vs_eager": stats, "thresholds": gates,
               "gate_rows": len(reference)}
    figures |= {k: f"{v:.5f}" for k, v in stats.items()}
    if why:
        raise ExportCheckError(f"openvino {precision} vs eager PyTorch", why,
                               "the family's FP32 gate", f"{len(reference)} rows")
    return checks, figures, run
