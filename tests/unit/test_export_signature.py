"""export.signature: the family's I/O contract, checked on ONNX graphs and TorchScript forwards."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from core.families import TEXT_EMBEDDING
from export.errors import ExportCheckError
from export.signature import check_forward_arguments, check_onnx_signature, signature

INT64, FLOAT = TensorProto.INT64, TensorProto.FLOAT
CONTRACT = signature(TEXT_EMBEDDING, 384)  # a text-embedding model of 384 dimensions


def _model(
    inputs: list[tuple[str, int, list[str | int]]],
    outputs: list[tuple[str, int, list[str | int]]],
) -> onnx.ModelProto:
    """A graph with the given I/O (its single node is irrelevant to the signature check)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", [inputs[0][0]], [outputs[0][0]])],
        "g",
        [helper.make_tensor_value_info(n, t, d) for n, t, d in inputs],
        [helper.make_tensor_value_info(n, t, d) for n, t, d in outputs],
    )
    return helper.make_model(graph)


GOOD_INPUTS = [("input_ids", INT64, ["b", "s"]), ("attention_mask", INT64, ["b", "s"])]


def test_contract_graph_passes() -> None:
    check_onnx_signature(_model(GOOD_INPUTS, [("embedding", FLOAT, ["b", 384])]), CONTRACT)


def test_dynamic_embedding_width_is_accepted() -> None:
    check_onnx_signature(_model(GOOD_INPUTS, [("embedding", FLOAT, ["b", "w"])]), CONTRACT)


def test_renamed_input_fails() -> None:
    inputs = [("ids", INT64, ["b", "s"]), GOOD_INPUTS[1]]
    with pytest.raises(ExportCheckError, match="ONNX inputs"):
        check_onnx_signature(_model(inputs, [("embedding", FLOAT, ["b", 384])]), CONTRACT)


def test_int32_inputs_fail() -> None:
    inputs = [("input_ids", TensorProto.INT32, ["b", "s"]), GOOD_INPUTS[1]]
    with pytest.raises(ExportCheckError, match="ONNX inputs"):
        check_onnx_signature(_model(inputs, [("embedding", FLOAT, ["b", 384])]), CONTRACT)


def test_fixed_batch_dimension_fails() -> None:
    inputs = [("input_ids", INT64, [1, "s"]), GOOD_INPUTS[1]]
    with pytest.raises(ExportCheckError, match="ONNX inputs"):
        check_onnx_signature(_model(inputs, [("embedding", FLOAT, ["b", 384])]), CONTRACT)


def test_wrong_output_rank_fails() -> None:
    with pytest.raises(ExportCheckError, match="ONNX outputs"):
        check_onnx_signature(_model(GOOD_INPUTS, [("embedding", FLOAT, ["b", "s", 384])]), CONTRACT)


def test_wrong_embedding_width_fails() -> None:
    with pytest.raises(ExportCheckError, match="ONNX outputs"):
        check_onnx_signature(_model(GOOD_INPUTS, [("embedding", FLOAT, ["b", 768])]), CONTRACT)


def test_float16_output_fails() -> None:
    with pytest.raises(ExportCheckError, match="ONNX outputs"):
        check_onnx_signature(
            _model(GOOD_INPUTS, [("embedding", TensorProto.FLOAT16, ["b", 384])]), CONTRACT)


def test_dynamic_axes_cover_batch_and_sequence_of_inputs_and_batch_of_output() -> None:
    assert CONTRACT.dynamic_axes() == {
        "input_ids": {0: "batch", 1: "sequence"},
        "attention_mask": {0: "batch", 1: "sequence"},
        "embedding": {0: "batch"},
    }


def test_forward_arguments_must_be_input_ids_then_attention_mask() -> None:
    check_forward_arguments(["self", "input_ids", "attention_mask"], CONTRACT)
    with pytest.raises(ExportCheckError, match="TorchScript forward arguments"):
        check_forward_arguments(["self", "x", "mask"], CONTRACT)
    with pytest.raises(ExportCheckError, match="TorchScript forward arguments"):
        check_forward_arguments(["self", "attention_mask", "input_ids"], CONTRACT)
