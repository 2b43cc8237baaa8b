"""runtime.batching: group requests by shape, run them as one call, split the outputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.batching import (
    concat_feeds,
    group_by_shape,
    length_buckets,
    shape_key,
    split_outputs,
)


def feeds(rows: int, width: int, dtype: type = np.int64) -> dict[str, np.ndarray]:
    ids = np.arange(rows * width, dtype=dtype).reshape(rows, width) + 100 * rows
    return {"input_ids": ids, "attention_mask": np.ones((rows, width), dtype=dtype)}


def test_shape_key_ignores_the_batch_dimension_and_the_order_of_names():
    a = feeds(1, 5)
    b = dict(reversed(list(feeds(3, 5).items())))
    assert shape_key(a) == shape_key(b)


def test_group_by_shape_puts_equal_non_batch_shapes_together_in_first_seen_order():
    requests = [feeds(1, 5), feeds(2, 5), feeds(1, 7), feeds(4, 5), feeds(1, 7)]
    assert group_by_shape(requests) == [[0, 1, 3], [2, 4]]


def test_group_by_shape_separates_requests_whose_dtypes_differ():
    assert group_by_shape([feeds(1, 5), feeds(1, 5, np.int32)]) == [[0], [1]]


def test_group_by_shape_of_no_requests_is_empty():
    assert group_by_shape([]) == []


def test_concat_feeds_stacks_rows_of_every_request_and_reports_each_row_count():
    requests = [feeds(1, 4), feeds(3, 4), feeds(2, 4)]
    merged, sizes = concat_feeds(requests)
    assert sizes == [1, 3, 2]
    assert set(merged) == {"input_ids", "attention_mask"}
    assert merged["input_ids"].shape == (6, 4)
    np.testing.assert_array_equal(merged["input_ids"][1:4], requests[1]["input_ids"])


def test_concat_feeds_of_one_request_returns_its_arrays():
    request = feeds(2, 3)
    merged, sizes = concat_feeds([request])
    assert sizes == [2]
    assert merged["input_ids"] is request["input_ids"]


def test_split_outputs_undoes_concat_feeds_row_for_row():
    requests = [feeds(2, 4), feeds(1, 4), feeds(3, 4)]
    merged, sizes = concat_feeds(requests)
    outputs = {"embedding": merged["input_ids"].astype(np.float32) * 0.5}
    parts = split_outputs(outputs, sizes)
    assert len(parts) == len(requests)
    for request, part in zip(requests, parts):
        assert list(part) == ["embedding"]
        np.testing.assert_array_equal(part["embedding"], request["input_ids"] * 0.5)


def test_split_outputs_keeps_every_output_of_each_request():
    outputs = {"a": np.zeros((3, 2)), "b": np.arange(3)}
    parts = split_outputs(outputs, [1, 2])
    assert [p["b"].tolist() for p in parts] == [[0], [1, 2]]
    assert [p["a"].shape for p in parts] == [(1, 2), (2, 2)]


def test_split_outputs_rejects_an_output_whose_row_count_differs_from_the_sizes():
    outputs = {"embedding": np.zeros((3, 384), dtype=np.float32)}
    with pytest.raises(ValueError, match=r"^output 'embedding' has 3 rows, expected 4$"):
        split_outputs(outputs, [1, 3])


def test_length_buckets_keeps_similar_lengths_together_and_splits_outliers():
    groups = length_buckets([10, 50, 11, 12, 48], max_waste=0.25)
    assert groups == [[0, 2, 3], [4, 1]]


def test_length_buckets_with_negative_waste_is_one_group_in_arrival_order():
    assert length_buckets([30, 5, 9], max_waste=-1) == [[0, 1, 2]]


def test_length_buckets_never_exceeds_max_rows():
    groups = length_buckets([8] * 10, max_waste=0.5, max_rows=4)
    assert [len(g) for g in groups] == [4, 4, 2]


def test_length_buckets_of_no_rows_is_empty():
    assert length_buckets([], max_waste=0.5) == []


@given(st.lists(st.integers(1, 256), max_size=64), st.floats(0, 2), st.integers(1, 16))
def test_length_buckets_is_a_partition_within_the_waste_bound(lengths, waste, max_rows):
    groups = length_buckets(lengths, waste, max_rows)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) <= max_rows
        longest, tokens = max(lengths[i] for i in g), sum(lengths[i] for i in g)
        assert longest * len(g) <= (1 + waste) * tokens + 1e-9


def test_length_buckets_bound_a_groups_padded_tokens_and_a_long_row_stands_alone():
    groups = length_buckets([10, 10, 10, 100, 10], max_waste=-1, max_tokens=30)
    assert groups == [[0, 1, 2], [3], [4]]
    assert length_buckets([50, 60], max_waste=1.0, max_tokens=40) == [[0], [1]]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), max_size=80), st.floats(0.0, 1.0),
       st.integers(1, 4096))
def test_length_buckets_never_exceed_the_token_bound_but_for_a_lone_row(lengths, waste, bound):
    groups = length_buckets(lengths, waste, max_tokens=bound)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        assert len(group) == 1 or max(lengths[i] for i in group) * len(group) <= bound
