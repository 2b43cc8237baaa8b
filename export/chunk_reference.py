"""An eager PyTorch reference for long texts, independent of the served path.

The served `chunk` policy (runtime/tokenization.py) cuts a text's tokens into
overlapping windows, the encoder embeds each one, and the front pools them. This module
computes the same thing another way: Hugging Face's own sliding window
(`return_overflowing_tokens` with `stride` = the overlap, `max_length` = the model's
length), the sentence-transformers model in eager PyTorch with mean pooling over each
window's mask, L2 normalisation, then the token-weighted mean of the window vectors,
normalised again. `truncated` is the first window alone (what `truncate` serves).

    reference = ChunkReference(folder, max_tokens=256)
    vector = reference.chunked(text, overlap=32)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class ChunkedVector:
    """A long text's reference: its pooled vector, its window vectors and their tokens."""

    vector: np.ndarray  # float32 [dim]
    windows: np.ndarray  # float32 [w, dim]
    tokens: list[int]  # each window's tokens, special tokens included


class ChunkReference:
    """A sentence-transformers folder (weights, tokenizer, pooling) in eager PyTorch."""

    def __init__(self, folder: Path, max_tokens: int, normalize: bool = True) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model = AutoModel.from_pretrained(str(folder)).eval()
        self.max_tokens, self.normalize = max_tokens, normalize

    def window_vectors(self, ids: list[list[int]]) -> np.ndarray:
        """Each window embedded alone (no padding): mean over its tokens, normalised."""
        out = []
        with self.torch.no_grad():
            for window in ids:
                input_ids = self.torch.tensor([window])
                mask = self.torch.ones_like(input_ids)
                hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
                pooled = hidden.mean(dim=1)[0]
                if self.normalize:
                    pooled = self.torch.nn.functional.normalize(pooled, dim=0)
                out.append(pooled.numpy())
        return np.stack(out).astype(np.float32)

    def windows(self, text: str, overlap: int) -> list[list[int]]:
        """Hugging Face's sliding window over the text's tokens."""
        encoded = self.tokenizer(text, truncation=True, max_length=self.max_tokens,
                                 stride=overlap, return_overflowing_tokens=True)
        return [list(ids) for ids in encoded["input_ids"]]

    def chunked(self, text: str, overlap: int) -> ChunkedVector:
        ids = self.windows(text, overlap)
        vectors = self.window_vectors(ids)
        weights = np.array([len(w) for w in ids], dtype=np.float64)
        pooled = (vectors.astype(np.float64) * weights[:, None]).sum(0) / weights.sum()
        if self.normalize:
            pooled /= np.linalg.norm(pooled)
        return ChunkedVector(pooled.astype(np.float32), vectors, [len(w) for w in ids])

    def truncated(self, text: str) -> np.ndarray:
        """The text cut to the model's length: its first window."""
        return self.window_vectors(self.windows(text, 0)[:1])[0]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
