"""Which MatMuls to keep in FP32 when dynamic INT8 quantization of a model fails its gate.

Dynamic quantization scales each MatMul's input per tensor, per batch. Where a layer's input
has a few outlier channels (the FFN output projections of a transformer's later layers, for
all-mpnet-base-v2), one step of that scale is larger than most of the other values, and the
whole embedding drifts. The remedy is to leave those few MatMuls in FP32 and quantize the
rest. Which ones is measured, not guessed:

1. `linear_sensitivity` simulates, in eager PyTorch, the quantization of one nn.Linear at a
   time (its weights per output channel, its input per tensor to uint8, as onnxruntime's
   dynamic MatMulInteger does) and scores the drift of the model's output rows (1 - mean
   cosine against the unquantized output);
2. `exclusion_counts` turns the ranking into the numbers of most sensitive MatMuls to keep in
   FP32, smallest first, for the caller to try against the real gate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from export.parity import cosine_rows

UINT8_LEVELS = 255


@dataclass(frozen=True)
class Sensitivity:
    """The output drift caused by quantizing one Linear layer alone."""

    module: str  # the nn.Linear's name in the torch model
    node: str  # its MatMul (or Gemm) node in the exported ONNX graph
    loss: float  # 1 - mean row cosine against the FP32 output


def fake_quantize_activation(x: torch.Tensor) -> torch.Tensor:
    """x through uint8 per-tensor quantization with a zero point, as DynamicQuantizeLinear."""
    low, high = torch.clamp(x.min(), max=0.0), torch.clamp(x.max(), min=0.0)
    scale = (high - low) / UINT8_LEVELS
    if float(scale) == 0.0:
        return x
    zero = torch.round(-low / scale)
    return (torch.clamp(torch.round(x / scale) + zero, 0, UINT8_LEVELS) - zero) * scale


def fake_quantize_weight(weight: torch.Tensor, reduce_range: bool = True) -> torch.Tensor:
    """A Linear's weight [out, in] through symmetric int8 per output channel (7-bit with
    reduce_range, as onnxruntime's quantizer does)."""
    qmax = 2 ** (6 if reduce_range else 7) - 1
    scale = weight.abs().amax(dim=1, keepdim=True) / qmax
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    return torch.clamp(torch.round(weight / scale), -qmax - 1, qmax) * scale


def onnx_node_for(module: str, nodes: Iterable[str]) -> str | None:
    """The MatMul/Gemm node exported for the Linear named `module`, or None.

    The exporter names a node after the scopes it was called in, joined by "/", with a
    ModuleList child as "layer.0"; it may leave out the outer modules
    (`transformer.encoder.layer.0.output.dense` becomes `/encoder/layer.0/output/dense/MatMul`
    when the encoder is called directly). Module attributes hold no "." or "/", so names
    compare with both as one separator, and the longest suffix of the module path wins."""
    by_path = {name.replace("/", "."): name for name in nodes}
    parts = module.split(".")
    for start in range(len(parts)):
        for op in ("MatMul", "Gemm"):
            found = by_path.get("." + ".".join([*parts[start:], op]))
            if found is not None:
                return found
    return None


def mean_cosine_loss(reference: np.ndarray, candidate: np.ndarray) -> float:
    """1 - the mean cosine of matching rows (rows flattened past the first axis)."""
    rows = len(reference)
    return float(1.0 - np.mean(cosine_rows(reference.reshape(rows, -1),
                                           candidate.reshape(len(candidate), -1))))


def linear_sensitivity(
    model: nn.Module,
    batches: Sequence[tuple[torch.Tensor, ...]],
    nodes: Iterable[str],
    reduce_range: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> list[Sensitivity]:
    """Each Linear of `model` that has an ONNX node in `nodes`, most sensitive first."""
    node_names = list(nodes)

    def run() -> np.ndarray:
        with torch.inference_mode():
            return np.concatenate([model(*batch).numpy() for batch in batches])

    reference = run()
    linears = [(name, mod) for name, mod in model.named_modules() if isinstance(mod, nn.Linear)]
    found = [(name, mod, node) for name, mod in linears
             if (node := onnx_node_for(name, node_names)) is not None]  # fmt: skip
    results = []
    for index, (name, linear, node) in enumerate(found):
        original = linear.weight.data
        linear.weight.data = fake_quantize_weight(original, reduce_range)
        hook = linear.register_forward_pre_hook(
            lambda _mod, args: (fake_quantize_activation(args[0]), *args[1:]))
        try:
            loss = mean_cosine_loss(reference, run())
        finally:
            hook.remove()
            linear.weight.data = original
        results.append(Sensitivity(name, node, loss))
        if progress:
            progress(index + 1, len(found))
    return sorted(results, key=lambda s: (-s.loss, s.node))


def exclusion_counts(losses: Sequence[float], budget: float, max_fraction: float = 0.5,
                     growth: float = 1.5) -> list[int]:
    """How many of the most sensitive MatMuls to keep in FP32, in the order to try them.

    `losses` are sorted most sensitive first. The first count is the smallest k whose
    remaining losses (losses[k:], treated as adding up) fit `budget`; each next count is
    `growth` times larger, ending at `max_fraction` of all MatMuls: past that, the INT8 model
    would not be much faster than FP32, so no count beyond it is offered."""
    if not losses:
        return []
    limit = math.floor(len(losses) * max_fraction)
    tail = np.cumsum(np.asarray(losses, dtype=np.float64)[::-1])[::-1]  # tail[k] = sum(losses[k:])
    first = next((k for k in range(len(losses)) if tail[k] <= budget), len(losses))
    counts, k = [], max(first, 1)
    while k <= limit:
        counts.append(k)
        k = max(k + 1, math.ceil(k * growth))
    if counts and counts[-1] < limit:
        counts.append(limit)  # the last try keeps as many as allowed
    return counts
