"""export.primary_choice's rule and core.hardware's precision rule, on given tables."""

from __future__ import annotations

import pytest

from core.families import IMAGE_CLASSIFICATION, TEXT_EMBEDDING
from core.hardware import cpu_flags, cpu_model, inference_precision
from export.primary_choice import allowed_batches, candidates, choose, sized

BUDGET_MS = 60.0
# The in-process table (Zen 4 with avx512_bf16), as rows/s at batches 1, 8, 32.
BF16_HOST = {"onnx": {1: 287, 8: 315, 32: 333},
             "torchscript": {1: 150, 8: 260, 32: 300},
             "openvino": {1: 419, 8: 567, 32: 609}}
# This session's host (AVX2 only): OpenVINO fp32 within noise of onnxruntime.
AVX2_HOST = {"onnx": {1: 120, 8: 188, 32: 239},
             "torchscript": {1: 62, 8: 156, 32: 167},
             "openvino": {1: 109, 8: 197, 32: 220}}


def test_bf16_where_the_cpu_computes_it_natively() -> None:
    assert inference_precision({"avx2", "avx512f", "avx512_bf16"}) == "bf16"
    assert inference_precision({"avx2", "amx_bf16", "amx_tile"}) == "bf16"
    assert inference_precision({"avx2", "avx512_vnni"}) == "fp32"
    assert inference_precision(set()) == "fp32"


def test_cpuinfo_is_read_for_the_first_processor() -> None:
    text = "processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2 avx512_bf16\n\n" \
           "processor\t: 1\nflags\t\t: fpu\n"
    assert cpu_flags(text) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_model(text) == "AMD EPYC 9R14"


def test_candidates_are_the_formats_gated_at_fp32() -> None:
    for fam in (TEXT_EMBEDDING, IMAGE_CLASSIFICATION):
        assert candidates(fam) == ["onnx", "torchscript", "openvino"]


def test_the_objective_allows_batch_1_and_the_batches_whose_call_fits() -> None:
    assert allowed_batches({1: 120, 8: 188, 32: 239}, BUDGET_MS) == [1, 8]  # 32/239 = 134 ms
    assert allowed_batches({1: 5, 8: 10}, BUDGET_MS) == [1]  # even a slow batch 1 is kept


def test_on_a_bf16_host_openvino_wins_by_its_measured_lead() -> None:
    primary, scores, batches, reason = choose(BF16_HOST, "onnx", BUDGET_MS)
    assert primary == "openvino" and batches == [1, 8]  # 32 rows take 96 ms on onnx
    assert scores["onnx"] == 1.0 and scores["openvino"] == pytest.approx(1.62, abs=0.02)
    assert "openvino is 1." in reason


def test_on_a_host_without_bf16_a_lead_within_the_margin_keeps_the_default() -> None:
    primary, _, batches, reason = choose(AVX2_HOST, "onnx", BUDGET_MS)
    assert primary == "onnx" and batches == [1, 8]
    assert "no format beats onnx" in reason and "openvino" in reason


def test_on_a_host_without_bf16_whatever_wins_clearly_is_chosen() -> None:
    torch_wins = {**AVX2_HOST, "torchscript": {1: 200, 8: 300, 32: 400}}
    assert choose(torch_wins, "onnx", BUDGET_MS)[0] == "torchscript"


def test_a_format_that_fails_a_batch_scores_zero() -> None:
    broken = {**BF16_HOST, "openvino": {1: 999, 8: 0.0, 32: 999}}
    primary, scores, _, _ = choose(broken, "onnx", BUDGET_MS)
    assert scores["openvino"] == 0.0 and primary == "onnx"


def test_the_default_must_be_measured() -> None:
    with pytest.raises(ValueError, match="default format 'onnx' was not measured"):
        choose({"openvino": {1: 1.0}}, "onnx", BUDGET_MS)


def test_a_typical_batch_is_cut_or_repeated_to_size() -> None:
    import numpy as np

    feeds = {"ids": np.arange(6).reshape(3, 2)}
    assert sized(feeds, 2)["ids"].tolist() == [[0, 1], [2, 3]]
    assert sized(feeds, 7)["ids"].shape == (7, 2)


def test_an_operators_primary_must_be_gated_at_fp32() -> None:
    from export.primary_choice import check_primary

    check_primary(TEXT_EMBEDDING, "openvino")
    with pytest.raises(ValueError, match="--primary int8: the primary must be a format gated"):
        check_primary(TEXT_EMBEDDING, "int8")
    with pytest.raises(ValueError, match="--primary fp16"):
        check_primary(IMAGE_CLASSIFICATION, "fp16")


def test_tmr_add_refuses_a_primary_that_is_not_fp32_gated_before_loading_anything(
        capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    from cli.main import main

    code = main(["add", "m", "--family", "text_embedding", "--from", str(tmp_path / "none"),
                 "--repository", str(tmp_path), "--primary", "int8"])
    assert code == 2
    assert "--primary int8: the primary must be a format gated" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
