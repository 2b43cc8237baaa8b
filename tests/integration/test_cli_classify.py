"""`tmr classify FILE...` against the session's server: each file's top-k labels and
probabilities; an unreadable or non-image file is named on stderr and the exit code is 1."""

from __future__ import annotations

import re
from pathlib import Path

from tests.image_samples import cat, coffee, encode
from tests.integration.helpers import tmr


def test_tmr_classify_prints_each_files_top_k_labels_and_probabilities(http_url, tmp_path):
    photos = {"cat.jpg": encode(cat(), "JPEG", quality=92),
              "coffee.png": encode(coffee(), "PNG")}
    for name, data in photos.items():
        (tmp_path / name).write_bytes(data)
    out = tmr("classify", str(tmp_path / "cat.jpg"), str(tmp_path / "coffee.png"),
              "--url", http_url, "--top-k", "3")
    assert out.returncode == 0, out.stderr
    blocks = out.stdout.split(str(tmp_path / "coffee.png"))
    assert blocks[0].startswith(str(tmp_path / "cat.jpg"))
    assert re.search(r"^\s+0\.\d{4}\s+.*cat.*\(class 28[125]\)$", blocks[0], re.M), out.stdout
    assert re.search(r"^\s+0\.\d{4}\s+espresso\s+\(class 967\)$", blocks[1], re.M), out.stdout
    assert len(re.findall(r"\(class \d+\)$", out.stdout, re.M)) == 6  # top 3 of each
    assert "efficientnet_lite0_onnx:" in blocks[0], "every file says what served it"


def test_tmr_classify_names_a_bad_file_and_exits_1(grpc_url, tmp_path: Path):
    good, pdf = tmp_path / "cat.jpg", tmp_path / "paper.jpg"
    good.write_bytes(encode(cat(), "JPEG"))
    pdf.write_bytes(b"%PDF-1.7 this is a pdf, not a photo")
    out = tmr("classify", str(pdf), str(tmp_path / "missing.png"), str(good), "--url",
              grpc_url, "--protocol", "grpc", "--top-k", "1")
    assert out.returncode == 1
    assert re.search(rf"error: {re.escape(str(pdf))}: InvalidInputError: .*IMAGE\[0\] is a PDF "
                     r"document; only JPEG, PNG or WEBP are accepted", out.stderr), out.stderr
    assert f"error: {tmp_path / 'missing.png'}: cannot read it" in out.stderr
    assert out.stdout.startswith(str(good)), "the good file is still classified"
