"""Where exports go and what they must meet: light constants, importable without torch."""

from __future__ import annotations

from pathlib import Path

DEFAULT_REPOSITORY = Path(__file__).resolve().parents[1] / "model_repository"
FORMATS: tuple[str, ...] = ("onnx", "torchscript", "int8")
MODEL_NAMES = {"onnx": "minilm_onnx", "torchscript": "minilm_torchscript", "int8": "minilm_int8"}
ARTIFACTS = {"onnx": "model.onnx", "torchscript": "model.pt", "int8": "model.onnx"}
PARITY_MAX_ABS_DIFF = 1e-5
INT8_MIN_MEAN_COSINE = 0.99
INT8_MIN_COSINE = 0.95
