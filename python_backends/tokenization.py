"""Text validation, tokenization limits and per-batch padding (pure; no Triton imports).

The policy for a text longer than `max_tokens` is `reject` (INVALID_ARG naming the text
and its length) or `truncate` (keep the first tokens and the final [SEP]). Batches are
padded to their own longest text, not to a fixed 128, so short texts stay cheap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from core.messages import row_ref
from core.settings import TextFrontSettings
from python_backends.errors import InvalidInputError

OverlengthPolicy = Literal["reject", "truncate"]


@dataclass(frozen=True)
class TextLimits:
    """Input limits of a text model, read from its config parameters."""

    max_tokens: int = TextFrontSettings.max_tokens  # the defaults: core/settings.py
    max_text_bytes: int = TextFrontSettings.max_text_bytes
    overlength: OverlengthPolicy = TextFrontSettings.overlength_policy  # type: ignore

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> TextLimits:
        return cls.of(TextFrontSettings.from_parameters(config))

    @classmethod
    def of(cls, settings: TextFrontSettings) -> TextLimits:
        return cls(settings.max_tokens, settings.max_text_bytes,
                   settings.overlength_policy)  # type: ignore[arg-type]


def decode_texts(raw: np.ndarray, limits: TextLimits, name: str = "TEXT") -> list[str]:
    """Decode a [n, 1] BYTES tensor into strings, refusing what the model cannot serve."""
    texts = []
    for i, item in enumerate(raw.reshape(-1)):
        data = item if isinstance(item, bytes) else str(item).encode()
        row = row_ref(name, i)
        if len(data) > limits.max_text_bytes:
            raise InvalidInputError(
                f"{row} is {len(data)} bytes, over the limit of {limits.max_text_bytes} bytes"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InvalidInputError(
                f"{row} is not valid UTF-8: {err.reason} at byte {err.start}"
            ) from None
        if not text.strip():
            raise InvalidInputError(f"{row} is empty; send at least one non-space character")
        texts.append(text)
    return texts


def apply_token_limit(ids: list[int], limits: TextLimits, index: int,
                      name: str = "TEXT") -> list[int]:
    """Enforce `max_tokens` on one tokenized text (special tokens included)."""
    if len(ids) <= limits.max_tokens:
        return ids
    if limits.overlength == "reject":
        raise InvalidInputError(
            f"{row_ref(name, index)} is {len(ids)} tokens, over the limit of {limits.max_tokens} "
            "tokens (overlength_policy=reject)"
        )
    return [*ids[: limits.max_tokens - 1], ids[-1]]


def pad_batch(rows: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`input_ids` and `attention_mask` (int64, [n, longest]) padded to the longest row."""
    if not rows:
        raise ValueError("cannot pad an empty batch")
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


def padding_id(tokenizer_json: Mapping[str, Any]) -> int:
    """The pad token id a tokenizer.json declares (its padding config, else a [PAD] or
    <pad> token of its vocabulary, else 0)."""
    padding = tokenizer_json.get("padding") or {}
    if "pad_id" in padding:
        return int(padding["pad_id"])
    for token in tokenizer_json.get("added_tokens", []):
        if token.get("content") in ("[PAD]", "<pad>"):
            return int(token["id"])
    return 0


class TextEncoder:
    """A `tokenizers.Tokenizer` with padding and truncation off; limits are ours."""

    def __init__(self, path: Path) -> None:
        import json

        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(path))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.pad_id = padding_id(json.loads(path.read_text(encoding="utf-8")))

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [enc.ids for enc in self.tokenizer.encode_batch(list(texts))]
