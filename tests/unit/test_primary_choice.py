"""export.primary_choice's candidates and core.hardware's precision rule."""

from __future__ import annotations

import pytest

from core.families import IMAGE_CLASSIFICATION, TEXT_EMBEDDING
from core.hardware import cpu_flags, cpu_model, inference_precision
from export.primary_choice import candidates


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
