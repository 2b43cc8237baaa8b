"""Running the embedder, an ONNX session or a TorchScript module over tokenized texts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from tokenizers import Tokenizer

from export.signature import INPUT_NAMES

EmbedFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def encode(tokenizer: Tokenizer, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """input_ids and attention_mask, int64 [B, L], padded to the longest text."""
    encodings = tokenizer.encode_batch(list(texts))
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    return ids, mask


def ort_session(path: Path, threads: int) -> ort.InferenceSession:
    """A CPU onnxruntime session with a fixed intra-op thread count."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def onnx_fn(session: ort.InferenceSession) -> EmbedFn:
    """Embed with an onnxruntime session of the MiniLM contract."""

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feeds = dict(zip(INPUT_NAMES, (ids, mask), strict=True))
        return session.run(None, feeds)[0]

    return run


def torch_fn(module: torch.nn.Module | torch.jit.ScriptModule) -> EmbedFn:
    """Embed with an eager or TorchScript module taking (input_ids, attention_mask)."""

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            out = module(torch.from_numpy(ids), torch.from_numpy(mask))
        return out.numpy()

    return run


def embed_texts(
    fn: EmbedFn, tokenizer: Tokenizer, texts: Sequence[str], batch_size: int = 32
) -> np.ndarray:
    """Embeddings [N, D] of texts, in order, batched as given (each batch padded to longest)."""
    chunks = [
        fn(*encode(tokenizer, texts[start : start + batch_size]))
        for start in range(0, len(texts), batch_size)
    ]
    return np.concatenate(chunks, axis=0)
