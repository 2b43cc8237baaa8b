"""Per-call options, validated once: what every verb of both clients takes besides its rows.

Each verb takes either `options=CallOptions(...)` or its keywords
(`embed(texts, model=..., priority=..., timeout=..., truncate=...)`), never both. Which
keywords a verb takes is written once, as the TypedDict its `**keywords` unpack
(`EmbedKeywords`, ...): type checkers hold callers to it, and `verb_options` refuses any
other keyword at run time as Python refuses an unknown one. Nothing below the verbs takes
the keywords one by one. An option a verb does not take stays None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from functools import cache
from typing import Any, TypedDict, get_args, get_type_hints

from tmr_client import contract
from tmr_client.deadlines import check_timeout
from tmr_client.errors import InvalidInputError
from tmr_client.shaping import is_int_at_least, is_number

Progress = Callable[[int, int], None]  # (rows done, rows in the call), after each chunk
# What a text over the model's length gets (the front's `truncate` request parameter):
# True cuts it, False refuses it (400), "chunk" embeds it in windows pooled into one
# vector; None leaves it to the model's overlength_policy.
Truncate = bool | contract.OverlengthPolicy | None
TRUNCATE_CHOICES = contract.OVERLENGTH_POLICIES

# (option, whether a value other than None is valid, the message refusing it)
CHECKS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("priority", lambda v: is_int_at_least(v, 0),
     "priority must be an integer >= 0 (1 is the highest, 0 the model's default), got {!r}"),
    ("timeout_ms", lambda v: is_number(v) and v > 0, "timeout_ms must be a number > 0, got {!r}"),
    ("model_version", lambda v: is_int_at_least(v, 1),
     "model_version must be an integer >= 1, got {!r}"),
    ("truncate", lambda v: isinstance(v, bool) or v in TRUNCATE_CHOICES,
     "truncate must be True, False, None or one of " + ", ".join(TRUNCATE_CHOICES)
     + "; got {!r}"),
    ("chunk_overlap", lambda v: is_int_at_least(v, 0),
     "chunk_overlap must be an integer >= 0, got {!r}"),
    ("top_k", lambda v: is_int_at_least(v, 1), "top_k must be an integer >= 1, got {!r}"),
    ("prompt_name", lambda v: isinstance(v, str) and bool(v),
     "prompt_name must be a non-empty string (one of the model's prompts), got {!r}"),
    ("dimensions", lambda v: is_int_at_least(v, 1),
     "dimensions must be an integer >= 1 (one of the model's sizes), got {!r}"),
    ("raw_scores", lambda v: isinstance(v, bool), "raw_scores must be True or False, got {!r}"),
)


@dataclass(frozen=True)
class CallOptions:
    """Per-call options: priority level (1 = highest), Triton's queue timeout per request
    (`timeout_ms`), pinned version, the key that keeps a caller on one version during a
    rollout (`rollout_key`), the call's client-side deadline (`timeout`, seconds), the
    front model (None: the client's), what a text over the model's length gets
    (`truncate`, with `chunk_overlap` tokens between windows), the model's prompt to put
    before each text (`prompt_name`), the size to cut embeddings to (`dimensions`, one of
    the model's Matryoshka sizes), whether the texts are only counted (`count_only`), a
    classify call's `top_k`, whether a rerank call's scores are the model's logits rather
    than its relevance (`raw_scores`), further request `parameters`, and
    `on_progress(done, total)` after each chunk."""

    priority: int | None = None
    timeout_ms: float | None = None
    model_version: int | None = None
    rollout_key: str | None = None
    timeout: float | None = None
    model: str | None = None
    truncate: Truncate = None
    chunk_overlap: int | None = None
    top_k: int | None = None
    prompt_name: str | None = None
    dimensions: int | None = None
    count_only: bool | None = None
    raw_scores: bool | None = None
    parameters: Mapping[str, Any] | None = None
    on_progress: Progress | None = None

    def __post_init__(self) -> None:
        """Refuse what Triton (or the front) would misread, before anything is sent."""
        for name, valid, message in CHECKS:
            value = getattr(self, name)
            if value is not None and not valid(value):
                raise InvalidInputError(message.format(value))
        check_timeout(self.timeout)

    def or_timeout(self, timeout: float | None) -> CallOptions:
        """These options, with `timeout` (the client's) when they name none."""
        return self if self.timeout is not None else replace(self, timeout=timeout)

    def request_parameters(self) -> dict[str, Any]:
        """The request parameters the options send (the caller's own `parameters` last)."""
        named = {contract.ROLLOUT_KEY: None if self.rollout_key is None else str(self.rollout_key),
                 contract.TRUNCATE: self.truncate,
                 contract.CHUNK_OVERLAP: _int(self.chunk_overlap),
                 contract.TOP_K: _int(self.top_k),
                 contract.PROMPT_NAME: self.prompt_name,
                 contract.DIMENSIONS: _int(self.dimensions),
                 contract.COUNT_ONLY: self.count_only or None,
                 contract.RAW_SCORES: self.raw_scores or None}
        return {**{k: v for k, v in named.items() if v is not None}, **(self.parameters or {})}

    def chunks_texts(self, by_default: bool) -> bool:
        """Whether the texts are cut into windows: `truncate="chunk"`, or the model's
        policy (`by_default`) when the call says nothing."""
        truncate = self.request_parameters().get(contract.TRUNCATE)
        return truncate == "chunk" or (truncate is None and by_default)

    def infer_kwargs(self, request_id: str) -> dict[str, Any]:
        """tritonclient's infer arguments for these options (Triton's queue timeout in µs)."""
        kwargs: dict[str, Any] = {"request_id": request_id}
        if self.priority is not None:
            kwargs["priority"] = self.priority
        if self.timeout_ms is not None:
            kwargs["timeout"] = int(self.timeout_ms * 1000)  # Triton wants microseconds
        if self.model_version is not None:
            kwargs["model_version"] = str(self.model_version)
        if parameters := self.request_parameters():
            kwargs["parameters"] = parameters
        return kwargs


# The keywords of each verb (CallOptions says what each means). Both clients' verbs annotate
# their `**keywords` with these, and nothing else lists them.
class CommonKeywords(TypedDict, total=False):
    """What every verb takes: the front model, the priority, both timeouts."""

    model: str | None
    priority: int | None
    timeout_ms: float | None
    timeout: float | None


class CountKeywords(CommonKeywords, total=False):
    """count_tokens()'s keywords."""

    prompt_name: str | None
    chunk_overlap: int | None


class SimilarityKeywords(CommonKeywords, total=False):
    """similarity()'s keywords."""

    prompt_name: str | None
    dimensions: int | None
    truncate: Truncate


class BulkKeywords(CommonKeywords, total=False):
    """What every chunked call takes besides: a pinned version, progress after each chunk."""

    model_version: int | None
    on_progress: Progress | None


class EmbedKeywords(BulkKeywords, total=False):
    """embed()'s and embed_with_info()'s keywords."""

    rollout_key: str | None
    truncate: Truncate
    chunk_overlap: int | None
    prompt_name: str | None
    dimensions: int | None


class ClassifyKeywords(BulkKeywords, total=False):
    """classify()'s keywords."""

    rollout_key: str | None
    top_k: int | None


class RerankKeywords(BulkKeywords, total=False):
    """rerank()'s and rerank_with_info()'s keywords."""

    rollout_key: str | None
    truncate: Truncate
    chunk_overlap: int | None
    raw_scores: bool | None


class InferKeywords(BulkKeywords, total=False):
    """infer()'s keywords."""

    parameters: Mapping[str, Any] | None


@cache
def verb_keywords(verb: Callable[..., Any]) -> frozenset[str]:
    """The keywords `verb` takes: the keys of the TypedDict its `**keywords` unpack."""
    (keywords,) = get_args(get_type_hints(verb)["keywords"])  # Unpack[EmbedKeywords]
    return frozenset(keywords.__annotations__)


def verb_options(verb: Callable[..., Any], options: CallOptions | None,
                 keywords: Mapping[str, Any]) -> CallOptions:
    """The options of one call of `verb` (a client's function, `Client.embed`: not a bound
    method, which a subclass may override): `options`, or a CallOptions from its
    `keywords`, not both. A keyword the verb does not take (or such an option set in
    `options`) is a TypeError worded as Python's own; a bad value, InvalidInputError."""
    name, taken = verb.__qualname__, verb_keywords(verb)
    if unexpected := [key for key in keywords if key not in taken]:
        raise TypeError(f"{name}() got an unexpected keyword argument {unexpected[0]!r}")
    if options is None:
        return CallOptions(**keywords)
    if keywords:
        raise TypeError(f"{name}() takes options= or keywords, not both; got options= and "
                        + ", ".join(f"{key}=" for key in keywords))
    if not isinstance(options, CallOptions):
        raise TypeError(f"{name}() options= must be a CallOptions, not "
                        f"{type(options).__name__}")
    if unexpected := [f.name for f in fields(options)
                      if f.name not in taken and getattr(options, f.name) is not None]:
        raise TypeError(f"{name}() does not take {unexpected[0]!r} (set in options=)")
    return options


def _int(value: int | None) -> int | None:
    return None if value is None else int(value)
