"""export.image_*: data, calibration reader, evaluation figures, gates, a digits round-trip."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
import torch
from PIL import Image

from export import image_data
from export.errors import ExportCheckError
from export.image_eval import (
    disagreements,
    sanity_report,
    top1_accuracy,
    top1_agreement,
    top1_in_top5,
)
from export.image_models import (
    ARTIFACTS,
    DataSizes,
    check_gates,
    export_image_model,
    load_torchscript,
)
from export.image_nets import DIGITS, EFFICIENTNET_LITE0, NETS, Gates
from export.inference import ort_session
from export.static_int8 import CANDIDATES, DEFAULT_CONFIG, BatchCalibrationReader

# --- data ----------------------------------------------------------------------------------


def test_load_mnist_reads_labels_and_28x28_uint8_pixels_from_the_wheels_csv():
    pixels, labels = image_data.load_mnist("test", limit=5)
    assert pixels.shape == (5, 28, 28) and pixels.dtype == np.uint8
    assert labels.tolist() == [7, 2, 1, 0, 4]  # the first five MNIST test digits
    assert pixels.max() == 255


def test_mnist_csv_refuses_an_unknown_split():
    with pytest.raises(ValueError, match="split must be 'train' or 'test'"):
        image_data.mnist_csv("validation")


def test_mnist_inputs_are_the_serving_preprocessing_of_the_csv_pixels():
    pixels, _ = image_data.load_mnist("train", limit=3)
    inputs = image_data.mnist_inputs(pixels, DIGITS.spec)
    assert inputs.shape == (3, 1, 28, 28) and inputs.dtype == np.float32
    np.testing.assert_allclose(inputs[:, 0], (pixels / 255.0 - 0.1307) / 0.3081, atol=1e-6)


def test_imagenet_labels_are_the_1000_classic_strings_in_id_order():
    labels = image_data.imagenet_labels()
    assert len(labels) == 1000
    assert labels[281] == "tabby, tabby cat" and labels[967] == "espresso"


def test_efficientnet_parameters_state_the_x255_minus_127_over_128_convention():
    table = EFFICIENTNET_LITE0.spec.lookup_table()
    np.testing.assert_array_equal(table[0], ((np.arange(256) - 127) / 128).astype(np.float32))
    assert EFFICIENTNET_LITE0.spec.shape == (3, 224, 224) and DIGITS.spec.shape == (1, 28, 28)


def test_calibration_photos_never_include_a_sanity_photo():
    assert not set(image_data.CALIBRATION_PHOTOS) & set(image_data.SANITY_PHOTOS)
    assert "cat" not in image_data.CALIBRATION_PHOTOS  # skimage's cat() is chelsea()


def test_fixed_views_are_ten_deterministic_crops_and_mirrors():
    image = Image.fromarray(np.arange(40 * 60 * 3, dtype=np.uint8).reshape(40, 60, 3))
    views = image_data.fixed_views(image)
    assert len(views) == 10
    assert [v.size for v in views[:3]] == [(60, 40), (45, 30), (45, 30)]
    np.testing.assert_array_equal(np.asarray(views[6]), np.asarray(image)[:, ::-1])


def test_random_view_stays_inside_the_image_and_repeats_with_the_seed():
    image = image_data.photo("coffee")
    first = image_data.random_view(image, np.random.default_rng(3))
    again = image_data.random_view(image, np.random.default_rng(3))
    assert first.size == again.size
    assert first.size[0] <= 600 and first.size[1] <= 400
    assert first.width * first.height >= 0.29 * 600 * 400


def test_calibration_reader_yields_float32_batches_then_none_and_rewinds():
    inputs = np.zeros((37, 1, 28, 28), np.float32)
    reader = BatchCalibrationReader(inputs, batch_size=16)
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
def test_calibration_reader_refuses_anything_but_a_float32_nchw_batch(inputs):
    with pytest.raises(ValueError, match=r"calibration inputs must be float32 \[N>0, C, H, W\]"):
        BatchCalibrationReader(inputs)


def test_the_default_int8_config_is_static_per_channel_with_7_bit_weights():
    assert DEFAULT_CONFIG in CANDIDATES
    assert (DEFAULT_CONFIG.quant_format, DEFAULT_CONFIG.activation_type) == ("QOperator", "QUInt8")
    assert DEFAULT_CONFIG.per_channel and DEFAULT_CONFIG.reduce_range


# --- figures and gates ---------------------------------------------------------------------

FP32 = np.array([[3.0, 1.0, 0.0], [0.0, 2.0, 1.0], [0.0, 1.0, 2.0], [1.0, 0.0, 0.0]])
INT8 = np.array([[2.9, 1.0, 0.0], [0.0, 0.9, 1.0], [0.0, 1.0, 2.1], [0.0, 0.0, 1.0]])


def test_top1_accuracy_agreement_and_top5_are_shares_of_rows():
    assert top1_accuracy(FP32, np.array([0, 1, 2, 2])) == 0.75
    assert top1_agreement(FP32, INT8) == 0.5
    assert top1_in_top5(FP32, INT8) == 1.0  # three classes: everything is in the top 5


def test_top1_accuracy_refuses_mismatched_rows():
    with pytest.raises(ValueError, match="4 rows of logits for 3 labels"):
        top1_accuracy(FP32, np.array([0, 1, 2]))


def test_disagreements_name_the_image_and_both_labels():
    found = disagreements(["a", "b", "c", "d"], FP32, INT8, ["x", "y", "z"])
    assert found == [{"image": "b", "fp32": "y", "int8": "z"},
                     {"image": "d", "fp32": "x", "int8": "z"}]


def test_sanity_report_marks_whether_top1_is_an_expected_class():
    labels = [f"class{i}" for i in range(6)]
    logits = {"fp32": np.array([[0, 5, 1, 0, 0, 0], [9, 0, 0, 0, 0, 0]], np.float64)}
    report = sanity_report(["cat", "other"], logits, labels, {"cat": (1, 2), "other": ()})
    assert report["cat"]["fp32_top1_expected"] is True
    assert report["cat"]["fp32_top5"][0][:2] == [1, "class1"]
    assert "fp32_top1_expected" not in report["other"]


def test_check_gates_refuses_an_int8_drop_over_one_point():
    figures = {"accuracy": {"eager_top1": 0.99, "onnx_fp32_top1": 0.99, "int8_top1_drop": 0.011}}
    with pytest.raises(ExportCheckError, match=r"int8 top-1 drop vs FP32 ONNX: measured 0.011, "
                                               r"threshold <= 0.01"):
        check_gates(DIGITS.gates, figures)
    check_gates(DIGITS.gates, {"accuracy": {**figures["accuracy"], "int8_top1_drop": 0.01}})


def test_check_gates_refuses_a_sanity_photo_outside_its_expected_classes():
    entry = {"expected": ["espresso"], "int8_top5": [[504, "coffee mug", 0.6]],
             "int8_top1_expected": False}
    figures = {"agreement": {"int8_top1_agreement": 0.9, "n": 40}, "sanity": {"coffee": entry}}
    with pytest.raises(ExportCheckError, match=r"sanity coffee int8_top1_expected: measured "
                                               r"coffee mug"):
        check_gates(EFFICIENTNET_LITE0.gates, figures)


def test_efficientnet_lite0_loads_offline_and_sees_a_cat_in_chelsea():
    net = NETS["efficientnet_lite0"]
    model = net.load()
    inputs = image_data.sanity_inputs(net.spec)
    with torch.inference_mode():
        logits = model(torch.from_numpy(inputs.inputs[:1])).numpy()
    assert logits.shape == (1, 1000)
    assert int(logits.argmax()) in image_data.SANITY_PHOTOS["chelsea"]


# --- a digits round-trip -------------------------------------------------------------------

SMALL = DataSizes(mnist_test=200, mnist_calibration=48)


def test_digits_export_writes_checked_artifacts_and_a_report(tmp_path):
    out = tmp_path / "digits"
    report = export_image_model(DIGITS, out, threads=1, sizes=SMALL)
    assert sorted(p.name for p in out.iterdir()) == sorted(ARTIFACTS)
    assert [p.name for p in tmp_path.iterdir()] == ["digits"]  # no temporary folder left
    assert json.loads((out / "report.json").read_text()) == report
    assert report["accuracy"]["n"] == 200 and report["accuracy"]["int8_top1"] >= 0.95
    assert report["quantization"]["calibration_images"] == 48
    assert (out / "labels.txt").read_text().split() == [str(d) for d in range(10)]
    graph = onnx.load(str(out / "model_int8.onnx")).graph
    assert "QLinearConv" in {node.op_type for node in graph.node}
    logits = ort_session(out / "model.onnx", 1).run(
        None, {"pixel_values": np.zeros((3, 1, 28, 28), np.float32)})[0]
    assert logits.shape == (3, 10)  # the batch axis is dynamic
    scripted = load_torchscript(out / "model.pt")
    assert scripted(pixel_values=torch.zeros(5, 1, 28, 28)).shape == (5, 10)


def test_digits_export_that_fails_a_gate_writes_nothing(tmp_path):
    out = tmp_path / "digits"
    impossible = replace(DIGITS.gates, max_int8_top1_drop=-1.0)
    with pytest.raises(ExportCheckError, match="int8 top-1 drop"):
        export_image_model(DIGITS, out, threads=1, sizes=SMALL, gates=impossible)
    assert list(tmp_path.iterdir()) == []


def test_digits_export_that_fails_keeps_the_previous_artifacts(tmp_path):
    out = tmp_path / "digits"
    out.mkdir()
    (out / "report.json").write_text("previous")
    with pytest.raises(ExportCheckError, match="onnx batch1 max abs diff"):
        export_image_model(DIGITS, out, threads=1, sizes=SMALL,
                           gates=Gates(parity_max_abs_diff=-1.0))
    assert [p.name for p in tmp_path.iterdir()] == ["digits"]
    assert (out / "report.json").read_text() == "previous"
