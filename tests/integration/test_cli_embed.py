"""`tmr embed` against the session's server: texts from arguments, files and stdin, the
vectors written as .npy or JSON lines, and one JSON document with --json."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from core.paths import PROJECT_ROOT
from tests.integration.helpers import tmr


def test_tmr_embed_reads_a_file_and_writes_npy_in_order(http_url, tmp_path) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text("a cat on a mat\n\nthe stock market fell\n", encoding="utf-8")
    out = tmr("embed", "first, from the arguments", "--file", str(texts), "--out",
              str(tmp_path / "v.npy"), "--url", f"http://{http_url}")
    assert out.returncode == 0, out.stderr
    vectors = np.load(tmp_path / "v.npy")
    assert vectors.shape[0] == 3 and vectors.dtype == np.float32
    assert f"wrote 3 vectors to {tmp_path / 'v.npy'}" in out.stdout


def test_tmr_embed_reads_stdin_and_prints_one_json_document(http_url, tmp_path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "cli.main", "embed", "--file", "-", "--json", "--out",
         str(tmp_path / "v.jsonl"), "--url", http_url], input="one\ntwo\n", cwd=PROJECT_ROOT,
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert [t["text"] for t in document["texts"]] == ["one", "two"]
    lines = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert [line["text"] for line in lines] == ["one", "two"]
    assert lines[0]["embedding"] == document["texts"][0]["embedding"]
