"""runtime.input_limits: what an encoder graph accepts, read from ONNX graphs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from runtime.input_limits import InputLimitError, InputLimits, limits_of


def embedding_graph() -> onnx.GraphProto:
    """ids -> Gather(word table of 100 rows) + Gather(position table of 8 rows, Slice)."""
    words = helper.make_tensor("words", TensorProto.FLOAT, [100, 4], [0.0] * 400)
    positions = helper.make_tensor("positions", TensorProto.FLOAT, [8, 4], [0.0] * 32)
    buffer = helper.make_tensor("buffer", TensorProto.INT64, [8], list(range(8)))
    nodes = [
        helper.make_node("Gather", ["words", "input_ids"], ["w"]),
        helper.make_node("Slice", ["buffer", "start", "end"], ["pos_ids"]),
        helper.make_node("Gather", ["positions", "pos_ids"], ["p"]),
    ]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["B", "L"])
              for n in ("input_ids", "attention_mask")]
    out = helper.make_tensor_value_info("w", TensorProto.FLOAT, None)
    return helper.make_graph(nodes, "g", inputs, [out], [words, positions, buffer])


def test_index_tables_and_the_position_table_are_found() -> None:
    limits = limits_of(embedding_graph(), (("input_ids", "attention_mask"),))
    assert limits.index_rows == {"input_ids": 100}
    assert limits.max_length == 8


@pytest.mark.parametrize(("ids", "mask", "message"), [
    ([[1, 100, 2]], [[1, 1, 1]], "input_ids holds 100, outside the model's table of 100 rows"),
    ([[1, -101, 2]], [[1, 1, 1]], "input_ids holds -101"),
    ([[1] * 9], [[1] * 9], "input_ids has 9 positions, over the model's 8"),
    ([[1, 2, 3]], [[1, 1]], r"inputs of one shape differ: input_ids \[1, 3\], attention_mask"),
])
def test_inputs_onnxruntime_would_refuse_are_refused(ids, mask, message) -> None:
    limits = limits_of(embedding_graph(), (("input_ids", "attention_mask"),))
    with pytest.raises(InputLimitError, match=message):
        limits.check({"input_ids": np.array(ids), "attention_mask": np.array(mask)})


def test_inputs_within_the_limits_pass() -> None:
    limits = limits_of(embedding_graph(), (("input_ids", "attention_mask"),))
    limits.check({"input_ids": np.array([[1, 99, -100]]), "attention_mask": np.ones((1, 3))})
    InputLimits().check({"pixels": np.zeros((1, 3, 2, 2))})  # an image model: no limits
