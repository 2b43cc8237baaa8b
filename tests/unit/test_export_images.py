"""The image family's export: the model sources, data helpers, calibration, figures, gates.

The two image models' sources (model_repository/<name>/source/source.py) are read here as
the recipe reads them; the full exports run in `make setup` and their figures are checked
in provenance by tests/integration/test_image_serving.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from export import image_data
from export.errors import ExportCheckError
from export.image_classification import Evaluation, ImageClassificationRecipe, load_source
from export.image_eval import (
    disagreements,
    sanity_report,
    top1_accuracy,
    top1_agreement,
    top1_in_top5,
)
from export.sources import SourceError
from export.static_int8 import CANDIDATES, DEFAULT_CONFIG, BatchCalibrationReader
from tests.conftest import REPOSITORY

DIGITS = REPOSITORY / "digits" / "source"
EFFICIENTNET = REPOSITORY / "efficientnet_lite0" / "source"


@pytest.fixture(scope="module")
def digits() -> ImageClassificationRecipe:
    return ImageClassificationRecipe(DIGITS)


@pytest.fixture(scope="module")
def efficientnet() -> ImageClassificationRecipe:
    return ImageClassificationRecipe(EFFICIENTNET)


# --- the sources ---------------------------------------------------------------------------


def test_the_digits_source_reads_mnist_labels_and_28x28_pixels(digits) -> None:
    pixels, labels = digits.source.mnist("test", limit=5)
    assert pixels.shape == (5, 28, 28) and pixels.dtype == np.uint8
    assert labels.tolist() == [7, 2, 1, 0, 4]  # the first five MNIST test digits
    assert digits.labels == [str(d) for d in range(10)]
    assert (digits.facts.dimension, digits.facts.input_shape) == (10, (1, 28, 28))


def test_mnist_inputs_are_the_serving_preprocessing_of_the_csv_pixels(digits) -> None:
    pixels, _ = digits.source.mnist("train", limit=3)
    inputs = image_data.pixel_inputs(pixels, "L", digits.spec)
    assert inputs.shape == (3, 1, 28, 28) and inputs.dtype == np.float32
    np.testing.assert_allclose(inputs[:, 0], (pixels / 255.0 - 0.1307) / 0.3081, atol=1e-6)


def test_the_efficientnet_source_states_its_convention_labels_and_held_out_photos(
        efficientnet) -> None:
    table = efficientnet.spec.lookup_table()
    np.testing.assert_array_equal(table[0], ((np.arange(256) - 127) / 128).astype(np.float32))
    assert efficientnet.facts.input_shape == (3, 224, 224)
    assert len(efficientnet.labels) == 1000 and efficientnet.labels[967] == "espresso"
    source = efficientnet.source
    assert not set(source.CALIBRATION_PHOTOS) & set(source.SANITY)  # never calibrated on
    assert "cat" not in source.CALIBRATION_PHOTOS  # skimage's cat() is chelsea()


def test_efficientnet_lite0_loads_offline_and_sees_a_cat_in_chelsea(efficientnet) -> None:
    sanity = efficientnet.sanity
    logits = efficientnet.eager({"pixel_values": sanity.inputs[:1]})["logits"]
    assert logits.shape == (1, 1000)
    assert int(logits.argmax()) in sanity.expected["chelsea"]


def test_a_source_without_what_the_family_needs_is_refused_by_name(tmp_path) -> None:
    with pytest.raises(SourceError, match=r"no source\.py"):  # a bad request: exit 2
        load_source(tmp_path)
    (tmp_path / "source.py").write_text("IMAGE = {}\ndef labels():\n    return []\n")
    with pytest.raises(ExportCheckError, match="no network, calibration, evaluation"):
        load_source(tmp_path)


# --- data helpers --------------------------------------------------------------------------


def test_random_view_stays_inside_the_image_and_repeats_with_the_seed() -> None:
    image = image_data.photo("coffee")
    first = image_data.random_view(image, np.random.default_rng(3))
    again = image_data.random_view(image, np.random.default_rng(3))
    assert first.size == again.size
    assert first.size[0] <= 600 and first.size[1] <= 400
    assert first.width * first.height >= 0.29 * 600 * 400


def test_calibration_reader_yields_float32_batches_then_none_and_rewinds() -> None:
    reader = BatchCalibrationReader(np.zeros((37, 1, 28, 28), np.float32), batch_size=16)
    shapes = []
    while (batch := reader.get_next()) is not None:
        assert set(batch) == {"pixel_values"} and batch["pixel_values"].dtype == np.float32
        shapes.append(batch["pixel_values"].shape)
    assert shapes == [(16, 1, 28, 28), (16, 1, 28, 28), (5, 1, 28, 28)]
    assert len(reader) == 3
    reader.rewind()
    assert reader.get_next()["pixel_values"].shape == (16, 1, 28, 28)


@pytest.mark.parametrize("inputs", [np.zeros((4, 28, 28), np.float32),
                                    np.zeros((4, 1, 28, 28), np.float64),
                                    np.zeros((0, 1, 28, 28), np.float32)])
def test_calibration_reader_refuses_anything_but_a_float32_nchw_batch(inputs) -> None:
    with pytest.raises(ValueError, match=r"calibration inputs must be float32 \[N>0, C, H, W\]"):
        BatchCalibrationReader(inputs)


def test_the_default_int8_config_is_static_per_channel_with_7_bit_weights() -> None:
    assert DEFAULT_CONFIG in CANDIDATES
    assert (DEFAULT_CONFIG.quant_format, DEFAULT_CONFIG.activation_type) == ("QOperator", "QUInt8")
    assert DEFAULT_CONFIG.per_channel and DEFAULT_CONFIG.reduce_range


# --- figures and gates ---------------------------------------------------------------------

FP32 = np.array([[3.0, 1.0, 0.0], [0.0, 2.0, 1.0], [0.0, 1.0, 2.0], [1.0, 0.0, 0.0]])
INT8 = np.array([[2.9, 1.0, 0.0], [0.0, 0.9, 1.0], [0.0, 1.0, 2.1], [0.0, 0.0, 1.0]])


def test_top1_accuracy_agreement_and_top5_are_shares_of_rows() -> None:
    assert top1_accuracy(FP32, np.array([0, 1, 2, 2])) == 0.75
    assert top1_agreement(FP32, INT8) == 0.5
    assert top1_in_top5(FP32, INT8) == 1.0  # three classes: everything is in the top 5


def test_top1_accuracy_refuses_mismatched_rows() -> None:
    with pytest.raises(ValueError, match="4 rows of logits for 3 labels"):
        top1_accuracy(FP32, np.array([0, 1, 2]))


def test_disagreements_name_the_image_and_both_labels() -> None:
    found = disagreements(["a", "b", "c", "d"], FP32, INT8, ["x", "y", "z"])
    assert found == [{"image": "b", "fp32": "y", "int8": "z"},
                     {"image": "d", "fp32": "x", "int8": "z"}]


def test_sanity_report_marks_whether_top1_is_an_expected_class() -> None:
    labels = [f"class{i}" for i in range(6)]
    logits = {"fp32": np.array([[0, 5, 1, 0, 0, 0], [9, 0, 0, 0, 0, 0]], np.float64)}
    report = sanity_report(["cat", "other"], logits, labels, {"cat": (1, 2), "other": ()})
    assert report["cat"]["fp32_top1_expected"] is True
    assert report["cat"]["fp32_top5"][0][:2] == [1, "class1"]
    assert "fp32_top1_expected" not in report["other"]


def runner(logits: np.ndarray):
    """A fake runtime for the gate arithmetic: the given logits, whatever the input."""
    return lambda feeds: {"logits": logits[:len(feeds["pixel_values"])]}


def test_the_int8_gate_refuses_a_drop_over_one_point_and_low_agreement(digits) -> None:
    n = 200
    labels = digits.evaluation.labels[:n]
    right = np.eye(10)[labels] * 5.0
    wrong = right.copy()
    wrong[:3] = np.roll(wrong[:3], 1, axis=1)  # three of 200 wrong: a 1.5 point drop
    small = Evaluation(digits.evaluation.inputs[:n], labels, digits.evaluation.names[:n], "200")
    with pytest.raises(ExportCheckError, match=r"int8 top-1 drop vs FP32 ONNX: measured 0\.015"):
        digits.int8_quality(runner(right), runner(wrong), small)
    checks = digits.int8_quality(runner(right), runner(right), small)
    assert checks["figures"]["top1_drop"] == 0 and checks["figures"]["agreement"] == 1.0
    unlabelled = Evaluation(small.inputs, None, small.names, "no labels")
    with pytest.raises(ExportCheckError, match=r"int8 top-1 agreement with FP32 ONNX"):
        digits.int8_quality(runner(right), runner(np.roll(right, 1, axis=1)), unlabelled)
