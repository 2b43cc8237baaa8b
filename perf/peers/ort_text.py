"""The model code both FastAPI peers share: the text model's `tokenizer.json` and the
project's exported ONNX of its primary encoder (already pooled and normalised), run with
onnxruntime; perf/peers/servers.py finds both and passes their paths. Runs in the peers' venv
(`.peers/fastapi/venv`), so it imports no project module. Each batch is padded to its longest
text (the tokenizer.json's own setting pads every text to 128 tokens).
"""

from __future__ import annotations

import argparse

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

MAX_TOKENS = 256  # the project's `embed` rejects longer texts; the peers truncate them
# The exported encoder's tensors (core.families.text_embedding ENCODER_INPUTS and
# ENCODER_OUTPUT; tests/unit/test_perf_peers.py keeps the two in step).
INPUT_IDS, ATTENTION_MASK, OUTPUT = "input_ids", "attention_mask", "embedding"
PAD_ID, PAD_TOKEN = 0, "[PAD]"


def load_tokenizer(path: str) -> Tokenizer:
    """The fast tokenizer, padding to the longest text of a batch, truncating at MAX_TOKENS."""
    tokenizer = Tokenizer.from_file(path)
    tokenizer.no_padding()
    tokenizer.enable_padding(pad_id=PAD_ID, pad_token=PAD_TOKEN)
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    return tokenizer


class OnnxEmbedder:
    """texts -> float32 [n, 384] unit vectors: tokenize, pad to the longest, one ORT call."""

    def __init__(self, onnx_path: str, tokenizer_path: str, threads: int = 0) -> None:
        self.tokenizer = load_tokenizer(tokenizer_path)
        options = ort.SessionOptions()
        if threads:  # 0 keeps onnxruntime's default (one intra-op thread a core)
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(onnx_path, options,
                                            providers=["CPUExecutionProvider"])

    def embed(self, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        return self.session.run([OUTPUT], {INPUT_IDS: ids, ATTENTION_MASK: mask})[0]


def arguments(description: str, argv: list[str] | None = None) -> argparse.Namespace:
    """The command line both FastAPI peers take: model paths, address, threads."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--onnx", required=True, help="the primary encoder's exported ONNX")
    parser.add_argument("--tokenizer", required=True, help="the front model's tokenizer.json")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=0,
                        help="onnxruntime intra-op threads (0: its default)")
    return parser.parse_args(argv)
