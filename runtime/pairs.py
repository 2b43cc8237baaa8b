"""Query/document pairs as a cross-encoder reads them: one sequence, fitted to its length
(pure; python_backends/rerank.py calls these).

A pair is framed by the tokenizer's own template, learned from the tokenizer itself
(`PairFrame`: [CLS] query [SEP] document [SEP] with segment ids 0 and 1 for BERT,
<s> query </s></s> document </s> for RoBERTa). A pair longer than `max_tokens` (special
tokens included) meets the request's policy, else the model's:

    reject    INVALID_ARG naming the document and the pair's length
    truncate  cut longest first, exactly as Hugging Face tokenizers do for
              `truncation=True` (sentence-transformers' CrossEncoder): tokens come off
              the longer side until both fit, or each keeps half (`longest_first`)
    chunk     the whole query beside each window of the document (windows of the room
              left, overlapping by `chunk_overlap`); the front scores the pair as its
              best window
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.messages import row_ref
from runtime.errors import InvalidInputError
from runtime.tokenization import (
    FittedText,
    Specials,
    TextLimits,
    TextOptions,
    bare_tokenizer,
    window_spans,
)

QUERY_INPUT, DOCUMENT_INPUT = "QUERY", "DOCUMENT"  # the family's front inputs (core/families)


@dataclass(frozen=True)
class PairRow:
    """One encoder row: a pair's token ids and segment ids."""

    ids: tuple[int, ...]
    types: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.ids)

    def digest(self) -> str:
        """A key naming the row exactly (the router's cache and duplicates)."""
        data = np.asarray(self.ids + self.types, dtype=np.int64).tobytes()
        return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass(frozen=True)
class PairFrame:
    """The special tokens a tokenizer puts around a pair and the segment id of each part:
    lead + query + middle + document + trail."""

    lead: tuple[int, ...]
    middle: tuple[int, ...]
    trail: tuple[int, ...]
    types: tuple[tuple[int, ...], ...]  # of lead, query, middle, document, trail: (first,)

    @property
    def count(self) -> int:
        return len(self.lead) + len(self.middle) + len(self.trail)

    def row(self, query: Sequence[int], document: Sequence[int]) -> PairRow:
        parts = (self.lead, tuple(query), self.middle, tuple(document), self.trail)
        ids = tuple(i for part in parts for i in part)
        types = tuple(t for part, (kind, *_) in zip(parts, self.types) for t in [kind] * len(part))
        return PairRow(ids, types)


def frame_of(tokenizer: Any) -> PairFrame:
    """The pair template of a `tokenizers.Tokenizer`: a pair of two words encoded with its
    special tokens against the words alone."""
    pair = tokenizer.encode("a", "b")
    first = tokenizer.encode("a", add_special_tokens=False).ids
    second = tokenizer.encode("b", add_special_tokens=False).ids
    ids = pair.ids
    for i in range(len(ids)):
        if ids[i:i + len(first)] != first:
            continue
        after = i + len(first)
        for j in range(after, len(ids)):
            if ids[j:j + len(second)] == second:
                end = j + len(second)
                kinds = pair.type_ids
                types = tuple((kinds[a] if a < len(ids) else kinds[-1],)
                              for a in (0, i, after, j, end))
                return PairFrame(tuple(ids[:i]), tuple(ids[after:j]), tuple(ids[end:]), types)
    raise ValueError("the tokenizer's encoding of a pair does not contain both parts' tokens")


def longest_first(first: int, second: int, room: int) -> tuple[int, int]:
    """How many tokens each side keeps under Hugging Face tokenizers' `longest_first`
    truncation of a pair to `room` tokens (besides the special ones): the shorter side
    whole and the longer cut, unless the shorter alone passes half, then half each (the
    odd token to the second). Unchanged when both fit."""
    if first + second <= room:
        return first, second
    short, long_ = sorted((first, second))
    long_ = short if short > room else max(short, room - short)
    if short + long_ > room:
        short, long_ = room // 2, room // 2 + room % 2
    kept = (long_, short) if first > second else (short, long_)
    return min(kept[0], first), min(kept[1], second)


def fit_pair(query: Sequence[int], document: Sequence[int], frame: PairFrame,
             limits: TextLimits, options: TextOptions, index: int) -> FittedText:
    """Enforce `max_tokens` on one pair by the request's policy (runtime/tokenization.py's
    FittedText: its rows are PairRows); a side with no tokens is refused whatever the
    policy."""
    for name, ids in ((QUERY_INPUT, query), (DOCUMENT_INPUT, document)):
        if not ids:
            raise InvalidInputError(
                f"{row_ref(name, index)} has no tokens once tokenized (only characters the "
                "tokenizer drops, such as control or zero-width characters); send text")
    tokens = len(query) + len(document) + frame.count
    if tokens <= limits.max_tokens:
        return FittedText([frame.row(query, document)], tokens)
    room = limits.max_tokens - frame.count
    where = row_ref(DOCUMENT_INPUT, index)
    if options.policy == "reject" or room < 2:
        raise InvalidInputError(
            f"{where}: the pair is {tokens} tokens (query {len(query)}, document "
            f"{len(document)}, special {frame.count}), over the limit of {limits.max_tokens} "
            "tokens (overlength_policy=reject; send truncate=true to cut it as the model's "
            "tokenizer does, or truncate=chunk to score its best window)")
    if options.policy == "truncate":
        keep_query, keep_document = longest_first(len(query), len(document), room)
        return FittedText([frame.row(query[:keep_query], document[:keep_document])], tokens,
                          len(query) + len(document) - keep_query - keep_document)
    width = room - len(query)
    if width < 1:
        raise InvalidInputError(
            f"{row_ref(QUERY_INPUT, index)} is {len(query)} tokens, which leaves no room for a "
            f"window of the document in the model's {limits.max_tokens} tokens; send a "
            "shorter query, or truncate=true")
    overlap = min(options.overlap, width - 1)
    spans = window_spans(len(document), width, overlap)
    if len(spans) > limits.max_windows_per_text:
        raise InvalidInputError(
            f"{where} is {len(document)} tokens: {len(spans)} windows of {width} tokens "
            f"beside the query, over the limit of {limits.max_windows_per_text} windows per "
            "document")
    return FittedText([frame.row(query, document[a:b]) for a, b in spans], tokens)


class PairEncoder:
    """A `tokenizers.Tokenizer` (padding and truncation off) and its pair frame: each side
    tokenized alone, each distinct query once."""

    def __init__(self, path: Path) -> None:
        self.tokenizer, self.pad_id = bare_tokenizer(path)
        self.frame = frame_of(self.tokenizer)

    @property
    def specials(self) -> Specials:
        """The special tokens of a pair, as a text's: before the query, and the rest."""
        return Specials(len(self.frame.lead), len(self.frame.middle) + len(self.frame.trail))

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's own tokens, without special ones; each distinct text once."""
        distinct = list(dict.fromkeys(texts))
        encoded = self.tokenizer.encode_batch(distinct, add_special_tokens=False)
        by_text = {t: e.ids for t, e in zip(distinct, encoded)}
        return [by_text[t] for t in texts]


def pair_feeds(rows: Sequence[PairRow], pad_id: int) -> tuple[np.ndarray, ...]:
    """input_ids, attention_mask and token_type_ids (int64 [n, longest]), padded with
    `pad_id` (ids) and 0 (mask and segments)."""
    if not rows:
        raise ValueError("cannot pad an empty batch")
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    types = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row.ids
        mask[i, :len(row)] = 1
        types[i, :len(row)] = row.types
    return ids, mask, types
