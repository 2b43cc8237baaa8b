"""A call's rows as Triton wants them, refused before sending when they are wrong.

    text_tensor, image_tensor   the [n, 1] BYTES rows of an embed or a classify call
    pair_tensor                 the [n, 2] rows of a rerank call: the query, each document
    request_for                 one chunk's InferInput (one per column) and
                                InferRequestedOutput lists
    is_number, is_int_at_least  the checks every option shares (tmr_client.options)

Every refusal is an InvalidInputError naming the argument, the item's index and its type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
from tmr_client import contract
from tmr_client.endpoint import Protocol
from tmr_client.errors import InvalidInputError

# The families' tensors, named once in tmr_client.contract (core/families/ reads them).
TEXT_INPUT = contract.TEXT
EMBEDDING_OUTPUT = contract.EMBEDDING
SERVED_BY_OUTPUT = contract.SERVED_BY
TOKENS_OUTPUT = contract.TOKENS
TRUNCATED_OUTPUT = contract.TRUNCATED_TOKENS
WINDOWS_OUTPUT = contract.WINDOWS
IMAGE_INPUT = contract.IMAGE
EMBED_OUTPUTS = (EMBEDDING_OUTPUT, SERVED_BY_OUTPUT, TOKENS_OUTPUT, TRUNCATED_OUTPUT,
                 WINDOWS_OUTPUT)
CLASSIFY_OUTPUTS = (contract.CLASS_IDS, contract.LABELS, contract.PROBABILITIES,
                    contract.SERVED_BY)
RERANK_INPUTS = (contract.QUERY, contract.DOCUMENT)  # the columns of pair_tensor's rows
RERANK_OUTPUTS = (contract.SCORE, SERVED_BY_OUTPUT, TOKENS_OUTPUT, TRUNCATED_OUTPUT,
                  WINDOWS_OUTPUT)


def type_name(value: object) -> str:
    """`None`, `int`, `list`, `numpy.float64`: how an error message names a value's type."""
    if value is None:
        return "None"
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"


def is_number(value: object) -> bool:
    """A real number that is not a bool (numpy's included)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def is_int_at_least(value: object, lowest: int) -> bool:
    """An integer (not a bool) of at least `lowest`."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= lowest


@dataclass(frozen=True)
class RowKind:
    """How error messages name the rows of a call: texts (str or bytes), images (bytes)."""

    what: str  # "texts"
    plural: str  # "strings"
    singular: str  # "text"
    accepted: str  # "str or bytes"


TEXTS = RowKind("texts", "strings", "text", "str or bytes")
DOCUMENTS = RowKind("documents", "strings", "document", "str or bytes")
IMAGES = RowKind("images", "encoded images (bytes, or data URLs)", "image",
                 "bytes (an encoded JPEG, PNG or WEBP) or a data: URL str")


def check_sequence(items: object, kind: RowKind) -> None:
    """Refuse None, a single string, a mapping and any non-iterable as a call's rows."""
    if isinstance(items, (str, bytes)):
        raise InvalidInputError(f"{kind.what} must be a sequence of {kind.plural}, not a "
                                "single string")
    if items is None or isinstance(items, Mapping) or not isinstance(items, Iterable):
        raise InvalidInputError(f"{kind.what} must be a sequence of {kind.plural}, not "
                                f"{type_name(items)}")


def bytes_rows(items: Iterable[Any], kind: RowKind,
               encode: Callable[[Any], bytes | None]) -> np.ndarray:
    """A [n, 1] BYTES array of `items`, each turned into bytes by `encode` (None: refused).

    Refuses None, a single string, a mapping, an empty sequence, and any item `encode`
    cannot take, naming its index and type, before anything is sent.
    """
    check_sequence(items, kind)
    rows = []
    for i, item in enumerate(items):
        data = encode(item)
        if data is None:
            raise InvalidInputError(f"{kind.what}[{i}] is {type_name(item)}, not {kind.accepted}")
        rows.append(data)
    if not rows:
        raise InvalidInputError(f"{kind.what} is empty; send at least one {kind.singular}")
    return np.array(rows, dtype=np.object_).reshape(-1, 1)


def encode_text(item: Any) -> bytes | None:
    """A text's UTF-8 bytes, bytes as they are; None for anything else."""
    if isinstance(item, str):
        return item.encode("utf-8")
    return bytes(item) if isinstance(item, bytes) else None


def encode_image(item: Any) -> bytes | None:
    """An encoded image's bytes, or a data URL's UTF-8; None for anything else."""
    if isinstance(item, str):
        return item.encode("utf-8") if item[:5].lower() == "data:" else None
    return bytes(item) if isinstance(item, (bytes, bytearray, memoryview)) else None


def text_tensor(texts: Iterable[str | bytes]) -> np.ndarray:
    """A [n, 1] BYTES array of UTF-8 texts, as the text-embedding family wants.

    Any iterable of `str` or `bytes` (a list, a tuple, a generator, a numpy array of
    strings); anything else is refused naming the first bad item: `5` would otherwise
    travel as five NUL bytes."""
    return bytes_rows(texts, TEXTS, encode_text)


def image_tensor(images: Iterable[bytes | str]) -> np.ndarray:
    """A [n, 1] BYTES array of encoded images (JPEG, PNG, WebP), as the image family wants:
    bytes-like items (read a file with Path.read_bytes()), or a `str` that is a data URL
    (`data:image/webp;base64,...`, sent as its UTF-8 bytes; the server checks it). Any
    other item, another str included, is refused."""
    return bytes_rows(images, IMAGES, encode_image)


def listed(items: Iterable[Any], kind: RowKind) -> list[Any]:
    """`items` as a list (a generator read once), refused as check_sequence refuses them."""
    check_sequence(items, kind)
    return list(items)


def query_bytes(query: Any) -> bytes:
    """A rerank call's query as UTF-8; refused when it is not a text or is blank."""
    data = encode_text(query)
    if data is None:
        raise InvalidInputError(f"query is {type_name(query)}, not str or bytes")
    if not data.strip():
        raise InvalidInputError("query is empty; send the text to rank the documents by")
    return data


def pair_tensor(query: str | bytes, documents: Iterable[str | bytes]) -> np.ndarray:
    """A [n, 2] BYTES array, one row per document: the query (repeated), then the document,
    as the text-ranking family's QUERY and DOCUMENT want. Refuses a blank or non-text
    query and what text_tensor refuses among the documents (naming `documents[i]`)."""
    first = query_bytes(query)
    column = bytes_rows(documents, DOCUMENTS, encode_text)
    return np.concatenate([np.full_like(column, first), column], axis=1)


def protocol_module(protocol: Protocol, aio: bool = False) -> ModuleType:
    """`tritonclient.http`, `tritonclient.grpc` or their `.aio` variants."""
    if protocol == "http":
        if aio:
            import tritonclient.http.aio as module
        else:
            import tritonclient.http as module
    elif protocol == "grpc":
        if aio:
            import tritonclient.grpc.aio as module
        else:
            import tritonclient.grpc as module
    else:
        raise ValueError(f"unknown protocol {protocol!r}; expected 'http' or 'grpc'")
    return module


def request_for(module: ModuleType, rows: np.ndarray, input_names: Sequence[str],
                outputs: Sequence[str]) -> tuple[list[Any], list[Any]]:
    """InferInput and InferRequestedOutput lists for one chunk (binary tensors on HTTP): the
    rows under one input, or column j as the [n, 1] input `input_names[j]`."""
    binary = {"binary_data": True} if module.__name__.startswith("tritonclient.http") else {}
    parts = [rows] if len(input_names) == 1 else \
        [np.ascontiguousarray(rows[:, j:j + 1]) for j in range(len(input_names))]
    tensors = []
    for name, part in zip(input_names, parts):
        tensor = module.InferInput(name, list(part.shape), "BYTES")
        tensor.set_data_from_numpy(part, **binary)
        tensors.append(tensor)
    return tensors, [module.InferRequestedOutput(name, **binary) for name in outputs]
