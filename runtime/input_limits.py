"""What an encoder graph accepts, checked before a runtime that does not check it itself.

onnxruntime refuses a token id outside the embedding table, a sequence longer than the
position table and an attention mask whose length differs from the ids'; OpenVINO's CPU
plugin runs all three and returns numbers (measured: a vector of norm 1 for each). The
`openvino` backend therefore reads these limits from the ONNX graph at load and refuses
such inputs with the same kind of error as the onnxruntime backend:

- an input that a Gather uses as indices into a table (an initializer) must lie within
  [-rows, rows) of that table (ONNX's Gather semantics);
- a Gather into a table whose indices come out of a Slice (the position ids that
  transformers exports slice from a constant buffer) bounds the sequence length;
- inputs declared with the same dims (input_ids and attention_mask) must agree in shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


class InputLimitError(ValueError):
    """An input outside what the graph accepts."""


@dataclass(frozen=True)
class InputLimits:
    index_rows: Mapping[str, int] = field(default_factory=dict)  # input -> table rows
    max_length: int | None = None  # of the last axis of the index inputs
    same_shape: tuple[tuple[str, ...], ...] = ()  # groups of inputs that must agree

    def check(self, feeds: Mapping[str, np.ndarray]) -> None:
        """InputLimitError naming the input and the limit, or None."""
        for group in self.same_shape:
            shapes = {name: feeds[name].shape for name in group if name in feeds}
            if len(set(shapes.values())) > 1:
                raise InputLimitError("inputs of one shape differ: " + ", ".join(
                    f"{n} {list(s)}" for n, s in shapes.items()))
        for name, rows in self.index_rows.items():
            values = feeds.get(name)
            if values is None or values.size == 0:
                continue
            if self.max_length is not None and values.shape[-1] > self.max_length:
                raise InputLimitError(f"{name} has {values.shape[-1]} positions, over the "
                                      f"model's {self.max_length}")
            low, high = int(values.min()), int(values.max())
            if low < -rows or high >= rows:
                bad = high if high >= rows else low
                raise InputLimitError(f"{name} holds {bad}, outside the model's table of "
                                      f"{rows} rows")


def limits_of(graph: Any, same_shape: tuple[tuple[str, ...], ...] = ()) -> InputLimits:
    """The limits of an onnx GraphProto (see the module docstring)."""
    tables = {init.name: int(init.dims[0]) for init in graph.initializer if len(init.dims) == 2}
    inputs = {i.name for i in graph.input}
    producer = {out: node.op_type for node in graph.node for out in node.output}
    index_rows, positions = {}, []
    for node in graph.node:
        if node.op_type != "Gather" or len(node.input) < 2 or node.input[0] not in tables:
            continue
        rows, indices = tables[node.input[0]], node.input[1]
        if indices in inputs:
            index_rows[indices] = min(rows, index_rows.get(indices, rows))
        elif producer.get(indices) == "Slice":
            positions.append(rows)
    return InputLimits(index_rows, min(positions) if positions else None, same_shape)


def read_limits(path: Path, same_shape: tuple[tuple[str, ...], ...] = ()) -> InputLimits:
    """The limits of an ONNX file (its graph; the weights are read and dropped)."""
    import onnx

    return limits_of(onnx.load(str(path)).graph, same_shape)
