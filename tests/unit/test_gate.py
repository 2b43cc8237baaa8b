"""export.gate's pure judgements: top-1 quality, cosine quality, the blocked p99 ratio."""

from __future__ import annotations

import numpy as np
import pytest

from export.gate import GateSettings, block_p99_ratio
from export.quality import cosine_quality, top1_quality

GATES = {"gate_max_top1_drop": 0.01, "gate_min_agreement": 0.8}
# Logits for 4 rows of 3 classes: the reference's top-1 is 0, 1, 2, 2.
REFERENCE = np.array([[3, 1, 0], [0, 3, 1], [0, 1, 3], [1, 0, 3]], np.float32)


def test_top1_quality_passes_the_same_classes_with_their_accuracy():
    labels = np.array([0, 1, 2, 0])
    stats, why = top1_quality(REFERENCE, REFERENCE * 2, GATES, labels)
    assert why is None
    assert stats == {"agreement": 1.0, "top1": 0.75, "top1_drop": 0.0}


def test_top1_quality_refuses_accuracy_points_lost_naming_both_figures():
    candidate = REFERENCE.copy()
    candidate[0] = [0, 0, 5]  # row 0 now wrong
    stats, why = top1_quality(REFERENCE, candidate, GATES, np.array([0, 1, 2, 2]))
    assert stats["top1_drop"] == pytest.approx(0.25)
    assert "top-1 agreement 0.7500 under 0.8" in why
    assert "top-1 25.00 points under the reference, over 1" in why


def test_top1_quality_without_labels_judges_agreement_only():
    stats, why = top1_quality(REFERENCE, REFERENCE, GATES)
    assert (stats, why) == ({"agreement": 1.0}, None)


def test_cosine_quality_refuses_under_either_threshold():
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(8, 16)).astype(np.float32)
    gates = {"gate_mean_cosine": 0.99, "gate_min_cosine": 0.95}
    assert cosine_quality(reference, reference, gates)[1] is None
    _, why = cosine_quality(reference, -reference, gates)
    assert why.startswith("mean cosine -1.00000 / min -1.00000 under 0.99 / 0.95")


def test_block_p99_ratio_ignores_one_stalled_block():
    current = [[1.0] * 100 for _ in range(8)]
    candidate = [[1.0] * 100 for _ in range(8)]
    candidate[3] = [1.0] * 99 + [50.0]  # one stall in one block
    assert block_p99_ratio(candidate, current) == 1.0


def test_block_p99_ratio_sees_a_candidate_slow_in_every_block():
    current = [[1.0] * 100 for _ in range(8)]
    candidate = [[2.0] * 100 for _ in range(8)]
    assert block_p99_ratio(candidate, current) == 2.0


def test_gate_settings_split_quality_from_performance_thresholds():
    settings = GateSettings.from_params({"gate_min_agreement": "0.8", "gate_max_p99_ratio": "2",
                                         "top_k": "5"})
    assert settings.quality == {"gate_min_agreement": 0.8}
    assert (settings.min_throughput_ratio, settings.max_p99_ratio) == (0.8, 2.0)
