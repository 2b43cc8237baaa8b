"""Text validation, tokenization limits, long-text windows and per-batch padding (pure).

A text longer than `max_tokens` (special tokens included) meets its overlength policy, the
model's (`overlength_policy`) unless the request names its own (`truncate`, see
`request_options`):

    reject    INVALID_ARG naming the text and its length
    truncate  keep the leading special tokens, the first tokens of the text, and the
              trailing special tokens; the answer says how many were dropped
    chunk     split the text's tokens into windows of the model's length that overlap by
              `chunk_overlap_tokens`, each framed by the special tokens; the router
              encodes every window as a row of the same dynamic batch machinery, and the
              front pools them into one vector (`pool_windows`: the token-weighted mean
              of the window vectors, then the model's normalisation)

Batches are padded to their own longest row, not to a fixed 128, so short texts stay
cheap. No Triton imports: the front model (python_backends/text_model.py) calls these.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.messages import row_ref
from core.settings import (
    CHUNK_OVERLAP,
    COUNT_ONLY,
    DIMENSIONS,
    NO_PROMPTS,
    OVERLENGTH_POLICIES,
    PROMPT_NAME,
    TRUNCATE,
    TRUNCATE_VALUES,
    OverlengthPolicy,
    Prompts,
    TextFrontSettings,
)
from runtime.errors import InvalidInputError


@dataclass(frozen=True)
class TextLimits:
    """Input limits of a text model, read from its config parameters."""

    max_tokens: int = TextFrontSettings.max_tokens  # the defaults: core/settings.py
    max_text_bytes: int = TextFrontSettings.max_text_bytes
    overlength: OverlengthPolicy = TextFrontSettings.overlength_policy  # type: ignore
    chunk_overlap: int = TextFrontSettings.chunk_overlap_tokens
    max_windows_per_text: int = TextFrontSettings.max_windows_per_text
    max_windows_per_request: int = TextFrontSettings.max_windows_per_request

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> TextLimits:
        return cls.of(TextFrontSettings.from_parameters(config))

    @classmethod
    def of(cls, settings: TextFrontSettings) -> TextLimits:
        return cls(settings.max_tokens, settings.max_text_bytes,
                   settings.overlength_policy,  # type: ignore[arg-type]
                   settings.chunk_overlap_tokens, settings.max_windows_per_text,
                   settings.max_windows_per_request)


@dataclass(frozen=True)
class TextOptions:
    """What one request asks: its overlong texts' policy and the windows' overlap, the
    prompt put before each text, the size its embeddings are cut to, and whether it only
    counts tokens."""

    policy: OverlengthPolicy
    overlap: int
    prompt: str = ""  # the text of the prompt named (or the model's default); "": none
    dimensions: int | None = None  # None: the model's own size
    count_only: bool = False


@dataclass(frozen=True)
class TextModel:
    """What a text front knows of its model besides its limits: its prompts and the sizes
    its embeddings may be cut to (its own first)."""

    name: str = "model"
    prompts: Prompts = NO_PROMPTS
    default_prompt_name: str = ""
    sizes: tuple[int, ...] = ()


def request_options(parameters: str | None, limits: TextLimits, specials: Specials,
                    model: TextModel = TextModel()) -> TextOptions:
    """The request's parameters (KServe request parameters, as the stub's
    `request.parameters()` JSON): `truncate` and `chunk_overlap`, else the model's;
    `prompt_name`, else the model's default prompt; `dimensions`; `count_only`."""
    try:
        given = json.loads(parameters or "{}")
    except ValueError:
        given = {}
    if not isinstance(given, dict):
        given = {}
    return TextOptions(request_policy(given, limits), request_overlap(given, limits, specials),
                       request_prompt(given, model), request_dimensions(given, model),
                       request_count_only(given))


def request_policy(given: Mapping[str, Any], limits: TextLimits) -> OverlengthPolicy:
    policy: Any = limits.overlength
    if TRUNCATE in given:
        raw = given[TRUNCATE]
        key = raw.lower() if isinstance(raw, str) else raw
        if isinstance(key, bool | str) and key in TRUNCATE_VALUES:
            policy = TRUNCATE_VALUES[key]
        else:
            raise InvalidInputError(
                f"parameter {TRUNCATE!r} must be true, false, or one of "
                f"{', '.join(OVERLENGTH_POLICIES)}; got {json.dumps(raw)}")
    return policy


def request_overlap(given: Mapping[str, Any], limits: TextLimits, specials: Specials) -> int:
    overlap = limits.chunk_overlap
    if CHUNK_OVERLAP in given:
        raw = given[CHUNK_OVERLAP]
        width = limits.max_tokens - specials.count
        if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw < width:
            raise InvalidInputError(
                f"parameter {CHUNK_OVERLAP!r} must be an integer from 0 to {width - 1} "
                f"(a window holds {width} tokens of text); got {json.dumps(raw)}")
        overlap = raw
    return overlap


def request_prompt(given: Mapping[str, Any], model: TextModel) -> str:
    """The prompt text the request names (`prompt_name`), else the model's default."""
    name = given.get(PROMPT_NAME, model.default_prompt_name or None)
    if name is None:
        return ""
    prompt = model.prompts.get(name) if isinstance(name, str) else None
    if prompt is None:
        known = ", ".join(model.prompts.names)
        raise InvalidInputError(
            f"parameter {PROMPT_NAME!r} names no prompt of model '{model.name}': got "
            f"{json.dumps(name)}; " + (f"its prompts: {known}" if known else
                                       "it has no prompts"))
    return prompt


def request_dimensions(given: Mapping[str, Any], model: TextModel) -> int | None:
    """The size the request asks its embeddings cut to: one of the model's sizes."""
    raw = given.get(DIMENSIONS)
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw not in model.sizes:
        sizes = ", ".join(map(str, model.sizes))
        trained = ("" if len(model.sizes) > 1 else
                   " (it declares no Matryoshka sizes: `tmr add --matryoshka-dims`)")
        raise InvalidInputError(
            f"parameter {DIMENSIONS!r} must be one of model '{model.name}''s sizes: "
            f"{sizes}{trained}; got {json.dumps(raw)}")
    return None if raw == model.sizes[0] else raw


def request_count_only(given: Mapping[str, Any]) -> bool:
    raw = given.get(COUNT_ONLY, False)
    if not isinstance(raw, bool):
        raise InvalidInputError(f"parameter {COUNT_ONLY!r} must be true or false; got "
                                f"{json.dumps(raw)}")
    return raw


@dataclass(frozen=True)
class Specials:
    """How many special tokens the tokenizer puts before and after a text ([CLS] ...
    [SEP] for BERT, <s> ... </s> for MPNet): every window and truncated text keeps them."""

    lead: int = 1
    trail: int = 1

    @property
    def count(self) -> int:
        return self.lead + self.trail

    def body(self, ids: Sequence[int]) -> Sequence[int]:
        """The text's own tokens, without the special ones around them."""
        return ids[self.lead:len(ids) - self.trail]

    def frame(self, ids: Sequence[int], body: Sequence[int]) -> list[int]:
        """`body` between the special tokens of `ids` (a whole encoding)."""
        return [*ids[:self.lead], *body, *ids[len(ids) - self.trail:]]


@dataclass(frozen=True)
class FittedText:
    """A text as the encoder gets it: one row, or the windows of a chunked text; its
    tokens before any cut, and the tokens truncation dropped."""

    rows: list[list[int]]
    tokens: int
    truncated: int = 0

    @property
    def encoded_tokens(self) -> int:
        """Tokens the encoder runs over (every window's, special tokens included)."""
        return sum(len(r) for r in self.rows)


def window_spans(length: int, width: int, overlap: int) -> list[tuple[int, int]]:
    """[start, end) of each window of at most `width` tokens over `length` tokens, each
    starting `width - overlap` after the one before; the last one ends at `length`."""
    if width < 1 or not 0 <= overlap < width:
        raise ValueError(f"windows of {width} tokens cannot overlap by {overlap}")
    stride = width - overlap
    spans = [(0, min(width, length))]
    while spans[-1][1] < length:
        start = spans[-1][0] + stride
        spans.append((start, min(start + width, length)))
    return spans


def windows_needed(length: int, width: int, overlap: int) -> int:
    """len(window_spans(length, width, overlap)), without building them."""
    if length <= width:
        return 1
    stride = width - overlap
    return 1 + -(-(length - width) // stride)


def fit_text(ids: list[int], specials: Specials, limits: TextLimits, options: TextOptions,
             index: int, name: str = "TEXT", prefix: int = 0) -> FittedText:
    """Enforce `max_tokens` on one tokenized text (special tokens included) by the
    request's policy; a text with no tokens of its own is refused whatever the policy.
    The first `prefix` tokens of its body are a prompt: they count toward the limit,
    truncation keeps them, and every window of a chunked text starts with them."""
    body = specials.body(ids)
    if len(body) <= prefix:
        raise InvalidInputError(
            f"{row_ref(name, index)} has no tokens once tokenized (only characters the "
            "tokenizer drops, such as control or zero-width characters); send text")
    if len(ids) <= limits.max_tokens:
        return FittedText([ids], len(ids))
    width = limits.max_tokens - specials.count
    if prefix and width - prefix < 1:
        raise InvalidInputError(
            f"{row_ref(name, index)}: the prompt is {prefix} tokens, which leaves no room "
            f"for text in the model's {limits.max_tokens} tokens")
    if options.policy == "reject" or width < 1:
        raise InvalidInputError(
            f"{row_ref(name, index)} is {len(ids)} tokens, over the limit of "
            f"{limits.max_tokens} tokens (overlength_policy=reject; send truncate=true to "
            "cut it or truncate=chunk to embed it in windows)")
    if options.policy == "truncate":
        return FittedText([specials.frame(ids, body[:width])], len(ids), len(body) - width)
    text = body[prefix:]
    width, overlap, needed = chunking(len(text), limits, specials, prefix, options.overlap)
    if needed > limits.max_windows_per_text:
        raise InvalidInputError(
            f"{row_ref(name, index)} is {len(ids)} tokens: {needed} windows of {width} "
            f"text tokens overlapping by {overlap}, over the limit of "
            f"{limits.max_windows_per_text} windows per text")
    return FittedText([specials.frame(ids, [*body[:prefix], *text[a:b]])
                       for a, b in window_spans(len(text), width, overlap)], len(ids))


def chunking(length: int, limits: TextLimits, specials: Specials, prefix: int,
             overlap: int) -> tuple[int, int, int]:
    """(text tokens a window holds beside the specials and the prompt, the overlap, which
    never reaches a window's width, the windows `length` text tokens need); fit_text and
    count_text agree by both asking here. No room (width < 1): no windows."""
    width = limits.max_tokens - specials.count - prefix
    if width < 1:
        return width, 0, 0
    overlap = min(overlap, width - 1)
    return width, overlap, windows_needed(length, width, overlap)


@dataclass(frozen=True)
class TokenCount:
    """One text's tokens as the model counts them (special tokens and prompt included)
    and what each overlength policy would do with it, without encoding it."""

    tokens: int
    truncated: int  # tokens `truncate` would drop (0: it fits)
    windows: int  # windows `chunk` would make (1: it fits; 0: over max_windows_per_text)


def count_text(ids: list[int], specials: Specials, limits: TextLimits, options: TextOptions,
               index: int, name: str = "TEXT", prefix: int = 0) -> TokenCount:
    """What fit_text would do under each policy; the same refusals for a text with no
    tokens of its own."""
    body = specials.body(ids)
    if len(body) <= prefix:
        fit_text(ids, specials, limits, options, index, name, prefix)  # raises its error
    if len(ids) <= limits.max_tokens:
        return TokenCount(len(ids), 0, 1)
    width, _, needed = chunking(len(body) - prefix, limits, specials, prefix, options.overlap)
    if width < 1:
        return TokenCount(len(ids), len(body) - prefix, 0)
    return TokenCount(len(ids), len(body) - prefix - width,
                      needed if needed <= limits.max_windows_per_text else 0)


def check_request_windows(fitted: Sequence[FittedText], limits: TextLimits) -> None:
    """Refuse a request whose texts need more windows than one request may hold."""
    windows = sum(len(f.rows) for f in fitted)
    if windows > limits.max_windows_per_request:
        raise InvalidInputError(
            f"the request's {len(fitted)} texts need {windows} windows, over the limit of "
            f"{limits.max_windows_per_request} windows per request; send fewer or shorter "
            "texts per request")


def pool_windows(vectors: np.ndarray, weights: Sequence[int], normalize: bool) -> np.ndarray:
    """One vector from a chunked text's window vectors [w, dim]: their mean weighted by
    each window's tokens, L2-normalised when the model normalises (float32)."""
    w = np.asarray(weights, dtype=np.float64)
    pooled = (np.asarray(vectors, dtype=np.float64) * w[:, None]).sum(axis=0) / w.sum()
    if normalize:
        norm = np.linalg.norm(pooled)
        pooled = pooled / norm if norm > 0 else pooled
    return pooled.astype(np.float32)


def row_digest(row: Sequence[int]) -> str:
    """A key naming a row of token ids exactly (the router's cache and duplicates)."""
    return hashlib.blake2b(np.asarray(row, dtype=np.int64).tobytes(),
                           digest_size=16).hexdigest()


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


def bare_tokenizer(path: Path) -> tuple[Any, int]:
    """The `tokenizers.Tokenizer` of a tokenizer.json with its padding and truncation off
    (the limits are ours), and its pad id."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer, padding_id(json.loads(path.read_text(encoding="utf-8")))


class TextEncoder:
    """A `tokenizers.Tokenizer` with padding and truncation off; limits are ours."""

    def __init__(self, path: Path) -> None:
        self.tokenizer, self.pad_id = bare_tokenizer(path)
        self.specials = specials_of(self.tokenizer)
        self.prompts: dict[str, list[int]] = {}  # a model's few prompts, tokenized once

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [enc.ids for enc in self.tokenizer.encode_batch(list(texts))]

    def prompted_ids(self, texts: Sequence[str], prompt: str
                     ) -> tuple[list[list[int]], int]:
        """Each text with `prompt` before it, tokenized as sentence-transformers does
        (prompt + text, one string), and how many tokens of each body are the prompt's."""
        if not prompt:
            return self.token_ids(texts), 0
        if prompt not in self.prompts:
            self.prompts[prompt] = self.tokenizer.encode(prompt, add_special_tokens=False).ids
        own = self.prompts[prompt]
        ids = self.token_ids([prompt + t for t in texts])
        lead = self.specials.lead
        if all(row[lead:lead + len(own)] == own for row in ids):
            return ids, len(own)
        # a prompt whose last token merges with the text's first: frame them apart
        bare = self.token_ids(texts)
        return [self.specials.frame(row, [*own, *self.specials.body(row)]) for row in bare], \
            len(own)


def specials_of(tokenizer: Any) -> Specials:
    """Where a tokenizer puts its special tokens around one text: a word's encoding with
    them against its encoding without them."""
    framed = tokenizer.encode("a").ids
    bare = tokenizer.encode("a", add_special_tokens=False).ids
    for lead in range(len(framed) - len(bare) + 1):
        if framed[lead:lead + len(bare)] == bare:
            return Specials(lead, len(framed) - lead - len(bare))
    raise ValueError("the tokenizer's encoding of a word does not contain the word's tokens")
