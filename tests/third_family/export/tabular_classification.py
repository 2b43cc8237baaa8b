"""Export recipe of the tabular family (a third family, registered by a test): a folder
with `model.json` ({"columns": [...], "hidden": H, "classes": C}) and `weights.pt`, the
state dict of a two-layer MLP. The gate's rows are seeded normal rows: ONNX FP32,
TorchScript and OpenVINO within PARITY_MAX_ABS_DIFF of eager PyTorch, INT8 (dynamic) in
top-1 agreement with FP32 ONNX."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from core.families.catalog import FamilyModel
from core.families.tabular_classification import (
    COLUMNS_PARAMETER,
    TABULAR_CLASSIFICATION,
)
from core.families.warmup import serialized
from core.versions import sha256_file
from export import onnx_fp32, openvino_format, quantize, torchscript
from export.errors import ExportCheckError
from export.formats import FormatBuilders
from export.parity import check_max_abs_diff, max_abs_diff
from export.quality import Judgement, top1_quality
from export.signature import signature
from export.sources import SourceError
from export.warmup import client_inputs
from runtime.runners import Runner, onnx_runner

FAMILY = TABULAR_CLASSIFICATION
PARITY_MAX_ABS_DIFF = 1e-4
ROWS, BATCH = 512, 64
INT8 = quantize.VARIANTS[0]


class TabularNet(nn.Module):
    """Two linear layers; the forward argument is named like the family's input."""

    def __init__(self, columns: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(columns, hidden), nn.ReLU(),
                                    nn.Linear(hidden, classes))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.layers(features)


@dataclass(frozen=True)
class TabularFacts:
    weights: Path
    dimension: int  # classes
    columns: tuple[str, ...]
    hidden: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (len(self.columns),)

    @property
    def front_parameters(self) -> dict[str, str]:
        return {COLUMNS_PARAMETER: str(len(self.columns))}


def read_facts(folder: Path) -> TabularFacts:
    try:
        spec = json.loads((folder / "model.json").read_text())
        return TabularFacts(folder / "weights.pt", int(spec["classes"]),
                            tuple(spec["columns"]), int(spec["hidden"]))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SourceError(f"{folder}: {err}; a tabular model folder holds model.json "
                          "(columns, hidden, classes) and weights.pt") from None


class TabularRecipe(FormatBuilders):
    family = FAMILY

    def __init__(self, folder: Path, threads: int = 2) -> None:
        self.facts = read_facts(folder)
        self.threads = threads
        self.contract = signature(FAMILY, self.facts.dimension, self.facts.input_shape)
        self.network = TabularNet(len(self.facts.columns), self.facts.hidden,
                                  self.facts.dimension)
        self.network.load_state_dict(torch.load(self.facts.weights, weights_only=True))
        self.network.eval()
        self.rows = np.random.default_rng(0).normal(
            size=(ROWS, len(self.facts.columns))).astype(np.float32)
        torch.set_num_threads(threads)

    @cached_property
    def weights_sha256(self) -> str:
        return sha256_file(self.facts.weights)

    def _recipe_settings(self) -> dict[str, Any]:
        return {"columns": list(self.facts.columns), "hidden": self.facts.hidden}

    def _int8_settings(self) -> dict[str, Any]:
        return {"quantization": INT8.settings(), "gate": dict(FAMILY.format("int8").gate)}

    def eager(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with torch.inference_mode():
            out = self.network(torch.from_numpy(feeds[self.contract.input_names[0]]))
        return {self.contract.output_names[0]: out.numpy()}

    def logits(self, run: Runner) -> np.ndarray:
        output = self.contract.output_names[0]
        return np.concatenate([run(feeds)[output] for feeds in self.gate_batches()])

    def check_parity(self, run: Runner, name: str) -> dict[str, float]:
        diffs = {f"rows_{ROWS}": max_abs_diff(self.logits(self.eager), self.logits(run))}
        for case, diff in diffs.items():
            check_max_abs_diff(f"{name} {case}", diff, PARITY_MAX_ABS_DIFF)
        return diffs

    def _fp32_onnx(self, path: Path) -> Runner:
        onnx_fp32.export_onnx(self.network, path, (torch.from_numpy(self.rows[:2]),),
                              self.contract)
        onnx_fp32.verify_onnx(path, self.contract)
        return onnx_runner(path, self.threads)

    def _parity_figures(self, run: Runner, name: str) -> tuple[dict, dict]:
        diffs = self.check_parity(run, name)
        return {"parity_max_abs_diff": diffs}, {"max_abs_diff": f"{max(diffs.values()):.2e}"}

    def _onnx(self, work: Path, artifact: str) -> tuple[dict, dict]:
        return self._parity_figures(self._fp32_onnx(work / artifact), "onnx")

    def _torchscript(self, work: Path, artifact: str) -> tuple[dict, dict]:
        run = torchscript.traced_runner(self.network, work / artifact,
                                        (torch.from_numpy(self.rows[:2]),), self.contract,
                                        self.threads)
        return self._parity_figures(run, "torchscript")

    def _int8(self, work: Path, artifact: str) -> tuple[dict, dict]:
        fp32_path, target = work / "fp32.onnx", work / artifact
        fp32 = self.logits(self._fp32_onnx(fp32_path))
        quantize.quantize_int8(fp32_path, target, INT8)
        fp32_path.unlink()
        onnx_fp32.verify_onnx(target, self.contract)
        gates = openvino_format.gate_floats(FAMILY.format("int8").gate)
        stats, why = self.judge_quality(fp32, self.logits(onnx_runner(target, self.threads)),
                                        gates)
        if why:
            raise ExportCheckError("int8 vs FP32 ONNX", why, "the family's int8 gate")
        return {"figures": stats, "thresholds": gates}, {k: f"{v:.4f}" for k, v in stats.items()}

    def _openvino(self, path: Path, precision: str) -> tuple[dict, dict]:
        checks, figures, _ = openvino_format.build(self, self._fp32_onnx, path, precision,
                                                   self.check_parity,
                                                   self.contract.output_names[0])
        return checks, figures

    def front_files(self) -> dict[str, bytes]:
        return {FAMILY.contract.front_artifact: ("\n".join(self.facts.columns) + "\n").encode()}

    def gate_batches(self) -> list[dict[str, np.ndarray]]:
        name = self.contract.input_names[0]
        return [{name: self.rows[i:i + BATCH]} for i in range(0, ROWS, BATCH)]

    def judge_quality(self, reference: np.ndarray, candidate: np.ndarray,
                      gates: dict[str, float]) -> Judgement:
        return top1_quality(reference, candidate, gates)


def recipe(folder: Path, threads: int = 2) -> TabularRecipe:
    return TabularRecipe(folder, threads)


def warmup_files(repository: Path, model: FamilyModel) -> dict[str, bytes]:
    """FEATURES (a client's first row) and the float32 row the front parses from it."""
    row = client_inputs(model)[0]
    values = np.array([float(v) for v in row.split(",")], dtype="<f4")
    return {FAMILY.contract.front_inputs[0].name: serialized([row.encode()]),
            FAMILY.contract.encoder_inputs[0].name: values.tobytes()}
