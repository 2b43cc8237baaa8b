"""What every family's recipe does the same way per format: which of its builders writes a
format's artifact, and which export settings the format records in its provenance."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from core.families import Family
from core.hardware import FP32
from export import onnx_fp32, openvino_format, torchscript
from export.signature import Signature

Built = tuple[dict[str, Any], dict[str, Any]]  # a format's (checks, figures)


class FormatBuilders(ABC):
    """The format-level half of an export recipe (export/recipe.py `ExportRecipe`); the
    family's recipe supplies one builder per format and its own settings."""

    family: Family
    contract: Signature

    def build(self, fmt: str, work: Path, precision: str = FP32) -> Built:
        """Write the format's artifact into `work`; (checks for provenance, figures)."""
        artifact = self.family.format(fmt).artifact
        if fmt == openvino_format.FORMAT:
            return self._openvino(work / artifact, precision)
        builders = {"onnx": self._onnx, "torchscript": self._torchscript, "int8": self._int8}
        return builders[fmt](work, artifact)

    def opset(self, fmt: str) -> int | None:
        return None if fmt == "torchscript" else onnx_fp32.OPSET

    def settings(self, fmt: str, precision: str = FP32) -> dict[str, Any]:
        """What, with the weights and the tools, determines a format's artifact."""
        settings = self._recipe_settings()
        if fmt == "torchscript":
            return {**settings, "torchscript": torchscript.export_settings()}
        onnx = onnx_fp32.export_settings(self.contract)
        if fmt == openvino_format.FORMAT:
            return settings | openvino_format.settings(onnx, precision)
        settings["onnx"] = onnx
        return settings | self._int8_settings() if fmt == "int8" else settings

    @abstractmethod
    def _recipe_settings(self) -> dict[str, Any]:
        """The recipe's own settings, recorded for every format."""

    @abstractmethod
    def _int8_settings(self) -> dict[str, Any]:
        """What the int8 format records besides: its quantization and gate."""

    @abstractmethod
    def _onnx(self, work: Path, artifact: str) -> Built: ...

    @abstractmethod
    def _torchscript(self, work: Path, artifact: str) -> Built: ...

    @abstractmethod
    def _int8(self, work: Path, artifact: str) -> Built: ...

    @abstractmethod
    def _openvino(self, path: Path, precision: str) -> Built:
        """The OpenVINO artifact at `path`, checked at `precision`."""
