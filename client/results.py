"""What a call returns: its chunks' answers put back together, in input order.

    EmbedResult      embed_with_info(): embeddings, and per row what served it, its tokens,
                     the tokens truncation dropped and its windows
    ClassifyResult   classify(): each image's best classes (Prediction), what served it
    InferResult      infer(): each asked output the model has, by name
    TokenCounts      count_tokens(): each text's tokens and what each policy does with it
    SimilarityResult similarity(): the cosine of each text with the source

Each also keeps the model's name and each chunk's model version and request id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tmr_client import contract
from tmr_client.served_by import ServedBy
from tmr_client.shaping import (
    EMBEDDING_OUTPUT,
    SERVED_BY_OUTPUT,
    TOKENS_OUTPUT,
    TRUNCATED_OUTPUT,
    WINDOWS_OUTPUT,
)


def response_identity(result: Any) -> tuple[str, str]:
    """(model name, version) of an InferResult, over HTTP (dict) or gRPC (protobuf)."""
    response = result.get_response()
    if isinstance(response, dict):
        return response.get("model_name", ""), response.get("model_version", "")
    return response.model_name, response.model_version


def strings(result: Any, name: str) -> list[str]:
    """A BYTES output as strings, one per row ([] when the model has no such output)."""
    array = result.as_numpy(name)
    return [] if array is None else [v.decode() for v in array.reshape(-1)]


def integers(answers: Sequence[Any], name: str) -> list[int]:
    """An integer output of every chunk, one per row ([] when the model has no such one)."""
    arrays = [a.as_numpy(name) for a in answers]
    return [int(v) for array in arrays if array is not None for v in array.reshape(-1)]


def served_texts(answers: Sequence[Any]) -> list[str]:
    """The SERVED_BY text of every row of every chunk."""
    return [row for a in answers for row in strings(a, SERVED_BY_OUTPUT)]


def identity(answers: Sequence[Any], request_ids: list[str]) -> dict[str, Any]:
    """The answering model's name, and each chunk's model version and request id, as a
    result's keywords."""
    identities = [response_identity(a) for a in answers]
    return {"model_name": identities[0][0], "model_versions": [v for _, v in identities],
            "request_ids": request_ids}


class ServedRows:
    """What served each row: `served_by` holds the SERVED_BY texts, `served` their values."""

    served_by: list[str]

    @property
    def served(self) -> list[ServedBy]:
        """Each row's encoder, version, precision, ladder level and cache flag."""
        return [ServedBy.parse(text) for text in self.served_by]


@dataclass
class EmbedResult(ServedRows):
    """Embeddings plus what served them: one entry per chunk sent."""

    embeddings: np.ndarray
    served_by: list[str] = field(default_factory=list)  # one per row, when the model says
    tokens: list[int] = field(default_factory=list)  # each text's tokens, when it says
    truncated_tokens: list[int] = field(default_factory=list)  # tokens truncation dropped
    windows: list[int] = field(default_factory=list)  # windows of each (chunked) text
    model_name: str = ""
    model_versions: list[str] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)


def embed_result(answers: Sequence[Any], request_ids: list[str]) -> EmbedResult:
    """One EmbedResult from the InferResults of the chunks, in order."""
    return EmbedResult(
        embeddings=np.concatenate([a.as_numpy(EMBEDDING_OUTPUT) for a in answers]),
        served_by=served_texts(answers), tokens=integers(answers, TOKENS_OUTPUT),
        truncated_tokens=integers(answers, TRUNCATED_OUTPUT),
        windows=integers(answers, WINDOWS_OUTPUT), **identity(answers, request_ids))


@dataclass(frozen=True)
class TokenCount:
    """One text's tokens as the model counts them (special tokens and the prompt
    included), the tokens `truncate` would drop, and the windows `chunk` would make (1:
    it fits; 0: over the model's windows per text)."""

    tokens: int
    truncated_tokens: int
    windows: int

    @property
    def fits(self) -> bool:
        """Within the model's length: every policy embeds it whole."""
        return self.truncated_tokens == 0

    def outcome(self, policy: contract.OverlengthPolicy) -> contract.Outcome:
        """"fits", or what `policy` does with it: "refused", "truncated" or "chunked"."""
        return contract.policy_outcome(policy, self.truncated_tokens, self.windows)


@dataclass
class TokenCounts:
    """count_tokens(): each text's count, in input order; no encoder ran."""

    counts: list[TokenCount]
    model_name: str = ""
    model_versions: list[str] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(c.tokens for c in self.counts)


def token_counts(answers: Sequence[Any], request_ids: list[str]) -> TokenCounts:
    """One TokenCounts from the count_only answers of the chunks, in order."""
    return TokenCounts([TokenCount(*row) for row in zip(
        integers(answers, TOKENS_OUTPUT), integers(answers, TRUNCATED_OUTPUT),
        integers(answers, WINDOWS_OUTPUT))], **identity(answers, request_ids))


@dataclass
class SimilarityResult(ServedRows):
    """similarity(): the cosine of each text's embedding with the source's, in input
    order, from one request (the source is its first row); `served_by` and `tokens`
    have the source first."""

    scores: np.ndarray
    served_by: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    model_name: str = ""
    model_versions: list[str] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)


def cosines(source: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """The cosine of each row of `vectors` with `source` (0 for a zero vector)."""
    norms = np.linalg.norm(vectors, axis=1) * np.linalg.norm(source)
    return (vectors @ source / np.maximum(norms, 1e-12)).astype(np.float32)


def similarity_result(answers: Sequence[Any], request_ids: list[str]) -> SimilarityResult:
    """One SimilarityResult from the one answer of a similarity call."""
    embedded = embed_result(answers, request_ids)
    vectors = embedded.embeddings
    return SimilarityResult(cosines(vectors[0], vectors[1:]), served_by=embedded.served_by,
                            tokens=embedded.tokens, model_name=embedded.model_name,
                            model_versions=embedded.model_versions, request_ids=request_ids)


@dataclass
class InferResult:
    """A generic call's answer: each asked output, its chunks' rows concatenated in input
    order (BYTES outputs stay numpy object arrays), and each chunk's version and id."""

    outputs: dict[str, np.ndarray]
    model_name: str = ""
    model_versions: list[str] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)


def infer_result(answers: Sequence[Any], request_ids: list[str],
                 wanted: Sequence[str]) -> InferResult:
    """One InferResult from the InferResults of the chunks, in order: each wanted output
    that every chunk has."""
    outputs = {}
    for name in wanted:
        parts = [a.as_numpy(name) for a in answers]
        if all(part is not None for part in parts):
            outputs[name] = np.concatenate(parts)
    return InferResult(outputs, **identity(answers, request_ids))


@dataclass(frozen=True)
class Prediction:
    """One class of an image: its id, its label and its probability."""

    class_id: int
    label: str
    probability: float


@dataclass
class ClassifyResult(ServedRows):
    """The `top_k` best classes of every image, best first, and what served each image."""

    predictions: list[list[Prediction]]
    served_by: list[str] = field(default_factory=list)
    model_name: str = ""
    model_versions: list[str] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)


def predictions(answer: Any) -> list[list[Prediction]]:
    """Each row's classes in one chunk's answer, best first."""
    ids, labels = answer.as_numpy(contract.CLASS_IDS), answer.as_numpy(contract.LABELS)
    probabilities = answer.as_numpy(contract.PROBABILITIES)
    return [[Prediction(int(i), label.decode(), float(p))
             for i, label, p in zip(ids[row], labels[row], probabilities[row])]
            for row in range(len(ids))]


def classify_result(answers: Sequence[Any], request_ids: list[str]) -> ClassifyResult:
    """One ClassifyResult from the InferResults of the chunks, in order."""
    return ClassifyResult([row for answer in answers for row in predictions(answer)],
                          served_by=served_texts(answers), **identity(answers, request_ids))
