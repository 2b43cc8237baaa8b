"""export.parity: max abs diff, row cosines, fidelity stats and threshold checks."""

from __future__ import annotations

import numpy as np
import pytest

from export.errors import ExportCheckError
from export.parity import (
    FidelityStats,
    check_fidelity,
    check_max_abs_diff,
    cosine_rows,
    fidelity,
    max_abs_diff,
)


def test_max_abs_diff_is_the_largest_elementwise_gap() -> None:
    a = np.array([[0.0, 1.0], [2.0, 3.0]], dtype=np.float32)
    b = np.array([[0.0, 1.5], [1.0, 3.0]], dtype=np.float32)
    assert max_abs_diff(a, b) == pytest.approx(1.0)


def test_max_abs_diff_of_identical_arrays_is_zero() -> None:
    a = np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)
    assert max_abs_diff(a, a.copy()) == 0.0


def test_max_abs_diff_rejects_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="shape mismatch"):
        max_abs_diff(np.zeros((2, 3)), np.zeros((3, 2)))


def test_cosine_rows_compares_row_by_row() -> None:
    a = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    b = np.array([[2.0, 0.0], [0.0, 3.0], [-1.0, -1.0]])
    np.testing.assert_allclose(cosine_rows(a, b), [1.0, 0.0, -1.0], atol=1e-12)


def test_cosine_rows_ignores_row_scale() -> None:
    a = np.random.default_rng(1).normal(size=(5, 16))
    np.testing.assert_allclose(cosine_rows(a, 7.5 * a), np.ones(5), atol=1e-12)


def test_cosine_rows_rejects_zero_rows() -> None:
    with pytest.raises(ValueError, match="zero row"):
        cosine_rows(np.array([[0.0, 0.0]]), np.array([[1.0, 0.0]]))


def test_cosine_rows_requires_two_dimensional_input() -> None:
    with pytest.raises(ValueError, match="2-D"):
        cosine_rows(np.ones(3), np.ones(3))


def test_fidelity_reports_mean_min_p01_and_count() -> None:
    reference = np.tile([1.0, 0.0], (100, 1))
    candidate = reference.copy()
    candidate[0] = [0.0, 1.0]  # one orthogonal row: cosine 0, the rest 1
    stats = fidelity(reference, candidate)
    assert stats.n == 100
    assert stats.min == pytest.approx(0.0)
    assert stats.mean == pytest.approx(0.99)
    assert 0.0 <= stats.p01 <= 1.0
    assert stats.as_dict() == {"mean": stats.mean, "min": stats.min, "p01": stats.p01, "n": 100}


def test_fidelity_needs_at_least_one_row() -> None:
    with pytest.raises(ValueError, match="at least one row"):
        fidelity(np.zeros((0, 4)), np.zeros((0, 4)))


def test_check_max_abs_diff_passes_at_the_threshold() -> None:
    check_max_abs_diff("onnx", 1e-5, 1e-5)


def test_check_max_abs_diff_names_check_value_and_threshold() -> None:
    with pytest.raises(ExportCheckError, match=r"onnx batch3 max abs diff: measured 2\.000e-05"):
        check_max_abs_diff("onnx batch3", 2e-5, 1e-5)


def test_check_max_abs_diff_fails_on_nan() -> None:
    with pytest.raises(ExportCheckError, match="nan"):
        check_max_abs_diff("torchscript", float("nan"), 1e-5)


def test_check_fidelity_fails_on_low_mean() -> None:
    stats = FidelityStats(mean=0.98, min=0.97, p01=0.975, n=1000)
    with pytest.raises(ExportCheckError, match=r"int8 mean cosine: measured 0\.98000.*>= 0\.99"):
        check_fidelity("int8", stats, min_mean=0.99, min_min=0.95)


def test_check_fidelity_fails_on_low_minimum_even_with_good_mean() -> None:
    stats = FidelityStats(mean=0.995, min=0.90, p01=0.97, n=1000)
    with pytest.raises(ExportCheckError, match=r"int8 min cosine: measured 0\.90000") as info:
        check_fidelity("int8", stats, min_mean=0.99, min_min=0.95)
    assert info.value.check == "int8 min cosine"


def test_check_fidelity_passes_when_both_thresholds_hold() -> None:
    check_fidelity("int8", FidelityStats(0.993, 0.97, 0.985, 1000), min_mean=0.99, min_min=0.95)
