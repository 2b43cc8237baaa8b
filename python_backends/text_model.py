"""The shared front half of the text models: validate, tokenize and fit every request of a
batch to the model's length (runtime/tokenization.py), and count its tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.families.text_embedding import TEXT
from core.settings import TextFrontSettings
from python_backends.base import BaseModel, error_response, input_array
from python_backends.metrics import Counter, CounterFamily, Histogram
from runtime.errors import InvalidInputError
from runtime.tokenization import (
    FittedText,
    TextEncoder,
    TextLimits,
    TextModel,
    TextOptions,
    TokenCount,
    check_request_windows,
    count_text,
    decode_texts,
    fit_text,
    request_options,
)

TEXT_INPUT = TEXT.name  # the text families' one input (core/families)
TOKENIZER_FILE = "tokenizer.json"  # when the config names no default_model_filename
# Upper bounds of the input-length histogram, in tokens (special tokens included).
LENGTH_BUCKETS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


@dataclass
class TextRequest:
    """The valid texts of one request, each fitted to the model's length, and what the
    request asked (its prompt, the size to cut to)."""

    texts: list[str]
    fitted: list[FittedText]
    options: TextOptions

    @property
    def rows(self) -> list[list[int]]:
        """The encoder's rows: one per text, each window of a chunked one."""
        return [row for f in self.fitted for row in f.rows]


@dataclass
class Counted:
    """A request that only counts its tokens: each text's count."""

    texts: int
    counts: list[TokenCount]


class TokenMetrics:
    """A text front's token accounting on /metrics: tokens in, each text's length, what
    truncation and chunking did, and the padding of every encoder call."""

    def __init__(self, model: str) -> None:
        base = {"model": model}
        self.tokens = Counter("tmr_text_tokens_total", "Tokens the encoder ran over for the "
                              "model's valid texts (every window of a chunked one)", base)
        self.lengths = Histogram("tmr_text_input_tokens", "Tokens of each valid text before "
                                 "truncation or chunking", base, LENGTH_BUCKETS)
        self.overlength = CounterFamily("tmr_overlength_texts_total",
                                        "Texts over max_tokens served, by policy", base)
        self.truncated_tokens = Counter("tmr_truncated_tokens_total",
                                        "Tokens truncation dropped", base)
        self.windows = Counter("tmr_chunk_windows_total", "Windows of chunked texts", base)
        self.counts = Counter("tmr_token_counts_total", "Texts counted without being "
                              "encoded (count_only: tmr tokens, /v1/tokenize)", base)
        self.encoder_tokens = CounterFamily(
            "tmr_encoder_tokens_total",
            "Tokens of the encoder calls' inputs: real, or padding", base)
        self.encoder_calls = Counter("tmr_encoder_calls_total",
                                     "Encoder calls made with padded token rows", base)
        for policy in ("truncate", "chunk"):  # so rates exist before the first one
            self.overlength.inc(0, policy=policy)
        for kind in ("real", "padding"):
            self.encoder_tokens.inc(0, kind=kind)

    def text(self, fitted: FittedText) -> None:
        self.tokens.inc(fitted.encoded_tokens)
        self.lengths.observe(fitted.tokens)
        if fitted.truncated:
            self.overlength.inc(policy="truncate")
            self.truncated_tokens.inc(fitted.truncated)
        elif len(fitted.rows) > 1:
            self.overlength.inc(policy="chunk")
            self.windows.inc(len(fitted.rows))

    def call(self, real: int, padded: int) -> None:
        self.encoder_calls.inc()
        self.encoder_tokens.inc(real, kind="real")
        self.encoder_tokens.inc(padded - real, kind="padding")


class TextInputs:
    """The TEXT input of a model: its limits and tokenizer (the tokenizer.json of its
    version folder), and `tokenize_requests`, the per-request checks."""

    def __init__(self, model: BaseModel, dimension: int) -> None:
        """`dimension`: the model's own embedding size (its encoder's output)."""
        self.model = model  # whose batch facts each batch's texts are counted in
        self.settings = TextFrontSettings.from_parameters(model.config)
        self.limits = TextLimits.of(self.settings)
        self.tokenizer = TextEncoder(model.artifact_path(TOKENIZER_FILE))
        self.metrics = TokenMetrics(model.name)
        self.text_model = TextModel(model.name, self.settings.prompts,
                                    self.settings.default_prompt_name,
                                    (dimension, *self.settings.matryoshka_dims))

    def tokenize_requests(self, requests: list[Any]
                          ) -> tuple[list[Any], dict[int, TextRequest], dict[int, Counted]]:
        """Responses with each invalid request's error filled in, the valid requests, and
        those that only count their tokens (COUNT_ONLY), counted."""
        responses: list[Any] = [None] * len(requests)
        valid: dict[int, TextRequest] = {}
        counted: dict[int, Counted] = {}
        for i, request in enumerate(requests):
            try:
                options = request_options(request.parameters(), self.limits,
                                          self.tokenizer.specials, self.text_model)
                raw = input_array(request, TEXT_INPUT)
                texts = decode_texts(raw, self.limits, TEXT_INPUT)
                ids, prefix = self.tokenizer.prompted_ids(texts, options.prompt)
                if options.count_only:
                    counted[i] = Counted(len(texts), [count_text(
                        r, self.tokenizer.specials, self.limits, options, j, TEXT_INPUT,
                        prefix) for j, r in enumerate(ids)])
                    self.metrics.counts.inc(len(texts))
                    continue
                fitted = [fit_text(r, self.tokenizer.specials, self.limits, options, j,
                                   TEXT_INPUT, prefix) for j, r in enumerate(ids)]
                check_request_windows(fitted, self.limits)
            except InvalidInputError as err:
                responses[i] = error_response(err)
                continue
            valid[i] = TextRequest(texts, fitted, options)
            for f in fitted:
                self.metrics.text(f)
            self.model.batch.batch_size += len(texts)
            self.model.batch.input_bytes += sum(map(len, raw.flat))
        return responses, valid, counted
