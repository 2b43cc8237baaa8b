"""Dynamic INT8 quantization of the FP32 ONNX model, with named variants and a latency probe."""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic

from export.inference import onnx_fn


@dataclass(frozen=True)
class QuantVariant:
    """One quantize_dynamic configuration (weights QInt8, activations dynamic uint8)."""

    name: str
    per_channel: bool = False
    op_types: tuple[str, ...] | None = None  # None: every op type ORT supports

    def settings(self) -> dict[str, object]:
        return {**asdict(self), "op_types": list(self.op_types) if self.op_types else None,
                "weight_type": "QInt8", "reduce_range": False}  # fmt: skip


# Tried in order; the first that passes the fidelity thresholds is kept.
VARIANTS: tuple[QuantVariant, ...] = (
    QuantVariant("dynamic-all-ops"),
    QuantVariant("dynamic-all-ops-per-channel", per_channel=True),
    QuantVariant("dynamic-matmul-only", op_types=("MatMul",)),
    QuantVariant("dynamic-matmul-only-per-channel", per_channel=True, op_types=("MatMul",)),
)


class _DropPreprocessHint(logging.Filter):
    """quantize_dynamic logs a "consider pre-processing" hint on the root logger; ORT's
    pre-processing fails on this graph (incomplete symbolic shape inference), so drop it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


def quantize_int8(source: Path, target: Path, variant: QuantVariant) -> None:
    """Write the dynamically quantized model of `source` to `target`."""
    root, hint_filter = logging.getLogger(), _DropPreprocessHint()
    root.addFilter(hint_filter)
    try:
        quantize_dynamic(
            source,
            target,
            op_types_to_quantize=list(variant.op_types) if variant.op_types else None,
            per_channel=variant.per_channel,
            reduce_range=False,
            weight_type=QuantType.QInt8,
        )
    finally:
        root.removeFilter(hint_filter)


def latency_ms(
    session: ort.InferenceSession,
    batch: int = 16,
    tokens: int = 32,
    runs: int = 30,
    seed: int = 0,
) -> float:
    """Median wall time (ms) of one inference on a random [batch, tokens] full-length batch."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 29000, size=(batch, tokens), dtype=np.int64)
    mask = np.ones_like(ids)
    run = onnx_fn(session)
    for _ in range(3):
        run(ids, mask)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run(ids, mask)
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)
