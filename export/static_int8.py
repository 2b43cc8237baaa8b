"""Static INT8 quantization (onnxruntime `quantize_static`) with a calibration reader.

Static quantization fixes every activation's scale from a calibration set, so at run time
nothing is measured per batch (dynamic quantization, used for MiniLM, only pays off for
MatMul-heavy graphs; a CNN is Conv-heavy and needs fixed activation ranges).
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quant_pre_process,
    quantize_static,
)

INPUT_NAME = "pixel_values"


class BatchCalibrationReader(CalibrationDataReader):
    """Feeds float32 [b, C, H, W] batches of preprocessed images as `pixel_values`; rewindable."""

    def __init__(self, inputs: np.ndarray, batch_size: int = 16, name: str = INPUT_NAME) -> None:
        if inputs.ndim != 4 or inputs.dtype != np.float32 or len(inputs) == 0:
            raise ValueError(f"calibration inputs must be float32 [N>0, C, H, W], "
                             f"got {inputs.dtype} {inputs.shape}")  # fmt: skip
        self.inputs, self.batch_size, self.name = inputs, batch_size, name
        self._next = 0

    def __len__(self) -> int:
        """The number of batches in one pass."""
        return -(-len(self.inputs) // self.batch_size)

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._next >= len(self.inputs):
            return None
        batch = self.inputs[self._next : self._next + self.batch_size]
        self._next += self.batch_size
        return {self.name: np.ascontiguousarray(batch)}

    def rewind(self) -> None:
        self._next = 0


@dataclass(frozen=True)
class QuantConfig:
    """One quantize_static configuration."""

    name: str
    quant_format: str = "QDQ"  # "QDQ" | "QOperator"
    activation_type: str = "QUInt8"
    weight_type: str = "QInt8"
    per_channel: bool = True
    reduce_range: bool = False
    calibrate_method: str = "MinMax"
    pre_process: bool = True  # onnxruntime's quant_pre_process (shape inference, fusions)

    def settings(self) -> dict[str, object]:
        return asdict(self)


# The default, chosen by measurement on this AVX2 CPU without VNNI (the figures of the image
# family's first export, 2026-11):
# - reduce_range (7-bit weights): U8S8 products saturate in VPMADDUBSW without VNNI; with full
#   8-bit weights EfficientNet-Lite0's INT8 top-1 agreed with FP32 on 70% of the held-out views,
#   with 7-bit weights on 85% (the logits' max abs diff fell from 4.2 to 1.7);
# - QOperator U8S8: tied with QDQ U8S8 within this machine's noise (onnxruntime's CPU provider
#   fuses QDQ pairs into the same QLinearConv kernels; 11-13 ms against 12-14 ms at batch 1),
#   4% smaller, and the graph states its int8 kernels directly. QDQ S8S8 ran about 2x slower
#   (22 ms at batch 1): without VNNI signed activations take a slower path. QDQ is the
#   portable form (TensorRT, GPU providers): use it for a GPU INT8 variant.
# Calibration is MinMax: Percentile and Entropy fail in onnxruntime 1.32 on a ragged last batch.
DEFAULT_CONFIG = QuantConfig("qoperator-u8s8-per-channel-rr7", reduce_range=True,
                             quant_format="QOperator")  # fmt: skip
CANDIDATES: tuple[QuantConfig, ...] = (
    DEFAULT_CONFIG,
    QuantConfig("qdq-u8s8-per-channel-rr7", quant_format="QDQ", reduce_range=True),
    QuantConfig("qdq-s8s8-per-channel-rr7", quant_format="QDQ", activation_type="QInt8",
                reduce_range=True),
    QuantConfig("qoperator-u8s8-per-channel", quant_format="QOperator"),
)


def quantize_int8(
    source: Path, target: Path, reader: BatchCalibrationReader, config: QuantConfig
) -> None:
    """Write the statically quantized model of `source` to `target`, calibrated by `reader`."""
    reader.rewind()
    with tempfile.TemporaryDirectory(prefix="int8-") as scratch:
        model = Path(source)
        if config.pre_process:
            model = Path(scratch) / "pre.onnx"
            quant_pre_process(str(source), str(model), skip_symbolic_shape=True)
        quantize_static(
            str(model),
            str(target),
            reader,
            quant_format=QuantFormat[config.quant_format],
            activation_type=QuantType[config.activation_type],
            weight_type=QuantType[config.weight_type],
            per_channel=config.per_channel,
            reduce_range=config.reduce_range,
            calibrate_method=CalibrationMethod[config.calibrate_method],
            calibration_cache_path=None,
        )
    reader.rewind()
