"""Dynamic INT8 quantization of an FP32 ONNX model, in named variants tried in order."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from onnxruntime.quantization import QuantType, quantize_dynamic


@dataclass(frozen=True)
class QuantVariant:
    """One quantize_dynamic configuration (weights QInt8, activations dynamic uint8)."""

    name: str
    per_channel: bool = False
    op_types: tuple[str, ...] | None = None  # None: every op type ORT supports
    reduce_range: bool = False  # 7-bit weights
    keep_fp32: tuple[str, ...] = ()  # MatMul nodes left unquantized (export/sensitivity.py)

    def settings(self) -> dict[str, object]:
        return {**asdict(self), "op_types": list(self.op_types) if self.op_types else None,
                "keep_fp32": list(self.keep_fp32), "weight_type": "QInt8"}

    def keeping(self, nodes: tuple[str, ...]) -> QuantVariant:
        """This variant with `nodes` left in FP32, named after how many."""
        return replace(self, name=f"{self.name}-fp32-{len(nodes)}", keep_fp32=nodes)


# Tried in order; the first that passes the fidelity thresholds is kept. reduce_range
# (7-bit weights): on x86 CPUs without VNNI the U8S8 products saturate in VPMADDUBSW (the
# same finding as export/static_int8.py). all-MiniLM-L6-v2 passes per channel with full 8-bit
# weights (all ops: mean cosine 0.963). all-mpnet-base-v2 passes none of them: 0.71 all ops
# and 0.02 per channel with 8-bit weights, 0.48 and 0.876 with 7-bit (the best), and
# MatMulConstBOnly does not change it. When every variant fails, the recipe keeps the
# MatMuls that a sensitivity scan ranks worst in FP32 over GUIDED_BASE (export/sensitivity.py).
VARIANTS: tuple[QuantVariant, ...] = (
    QuantVariant("dynamic-all-ops"),
    QuantVariant("dynamic-all-ops-per-channel", per_channel=True),
    QuantVariant("dynamic-all-ops-rr7", reduce_range=True),
    QuantVariant("dynamic-all-ops-per-channel-rr7", per_channel=True, reduce_range=True),
    QuantVariant("dynamic-matmul-only-rr7", op_types=("MatMul",), reduce_range=True),
    QuantVariant("dynamic-matmul-only", op_types=("MatMul",)),
    QuantVariant("dynamic-matmul-only-per-channel", per_channel=True, op_types=("MatMul",)),
)
GUIDED_BASE = VARIANTS[3]  # per channel, 7-bit weights: the best of them on both models


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
            nodes_to_exclude=list(variant.keep_fp32),
            per_channel=variant.per_channel,
            reduce_range=variant.reduce_range,
            weight_type=QuantType.QInt8,
        )
    finally:
        root.removeFilter(hint_filter)
