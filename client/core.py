"""What the sync and asyncio clients share: validation, requests, chunking, results.

Both clients run every call the same way: `ClientBase.start()` validates the input and
the options and cuts the rows into chunks of the model's request rows (its preferred batch,
else `max_batch_size`: `request_rows`); each chunk is
one request (`request_for`), retried by `retry_delay` when the failure allows it; the
answers are put back together by the family's result builder (`embed_result`). Only how
the chunks are sent differs: one after another (sync), or at most `max_in_flight` at a
time (asyncio). Nothing here imports the server side: the SDK ships alone.

Two timeouts, not to be confused:

    timeout=     seconds, per client or per call: the client-side deadline of the whole
                 call, across its chunks and retries, on HTTP and gRPC, sync and asyncio.
                 When it passes the call raises DeadlineExceededError.
    timeout_ms=  milliseconds, per call: Triton's queue timeout, sent with each chunk's
                 request. The server drops a request still queued after it (if the model's
                 queue policy allows overriding), answering "Request timeout expired",
                 also a DeadlineExceededError. It bounds queueing, not the whole call.

A request sent under a deadline and no `timeout_ms=` carries the time left as its queue
timeout, so the server drops it, rather than runs it, once nobody waits for it. Over gRPC
the deadline ends the caller's wait but never cancels the RPC: Triton 2.51 can lose a model
reference when a gRPC call is cancelled as it is answered, and that model then never
unloads (docs/reliability.md §11). The abandoned RPC finishes on its own (its gRPC deadline
is the time left plus ABANDONED_GRACE_S, reached only by a server that stopped answering),
and `close()` waits for it, at most ABANDONED_GRACE_S, before closing the channel.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

import numpy as np
from google.protobuf import json_format
from tmr_client import contract
from tmr_client.auth import key_headers, resolve_admin_key, resolve_api_key
from tmr_client.contract import INTERACTIVE_PRIORITY, LANE_SUFFIX, ROLLOUT_KEY, lane_name
from tmr_client.endpoint import (  # noqa: F401  (DEFAULT_PORTS, default_url: re-exported)
    DEFAULT_PORTS,
    Protocol,
    default_url,
    endpoint,
)
from tmr_client.errors import (
    DeadlineExceededError,
    InvalidInputError,
    QueueFullError,
    TritonClientError,
    from_exception,
)
from tmr_client.limits import MAX_REQUEST_BYTES
from tmr_client.retry import RetryPolicy, next_delay
from tmr_client.served_by import ServedBy
from tmr_client.tracing import trace_headers
from tmr_client.transport import retry_after, triton_client

DEFAULT_MODEL = "embed"  # the repository's first text-embedding front model
# The families' tensors, named once in tmr_client.contract (core/families/ reads them).
TEXT_INPUT = contract.TEXT
EMBEDDING_OUTPUT = contract.EMBEDDING
SERVED_BY_OUTPUT = contract.SERVED_BY
TOKENS_OUTPUT = contract.TOKENS
TRUNCATED_OUTPUT = contract.TRUNCATED_TOKENS
WINDOWS_OUTPUT = contract.WINDOWS
IMAGE_INPUT = contract.IMAGE
CLASSIFY_OUTPUTS = (contract.CLASS_IDS, contract.LABELS, contract.PROBABILITIES,
                    contract.SERVED_BY)
RETRY_AFTER_STATUSES = ("429", "503")  # HTTP answers whose Retry-After the client honours
DEFAULT_IN_FLIGHT = 4  # chunks a bulk call keeps in flight when the config is unknown
ENVELOPE_BYTES = 64 * 1024  # the request's header (names, shapes, parameters), generously

Progress = Callable[[int, int], None]  # (rows done, rows in the call), after each chunk


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


def type_name(value: object) -> str:
    """`None`, `int`, `list`, `numpy.float64`: how an error message names a value's type."""
    if value is None:
        return "None"
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"


def is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def is_int_at_least(value: object, lowest: int) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= lowest


@dataclass(frozen=True)
class RowKind:
    """How error messages name the rows of a call: texts (str or bytes), images (bytes)."""

    what: str  # "texts"
    plural: str  # "strings"
    singular: str  # "text"
    accepted: str  # "str or bytes"


TEXTS = RowKind("texts", "strings", "text", "str or bytes")
IMAGES = RowKind("images", "encoded images (bytes, or data URLs)", "image",
                 "bytes (an encoded JPEG, PNG or WEBP) or a data: URL str")


def bytes_rows(items: Iterable[Any], kind: RowKind,
               encode: Callable[[Any], bytes | None]) -> np.ndarray:
    """A [n, 1] BYTES array of `items`, each turned into bytes by `encode` (None: refused).

    Refuses None, a single string, a mapping, an empty sequence, and any item `encode`
    cannot take, naming its index and type, before anything is sent.
    """
    if isinstance(items, (str, bytes)):
        raise InvalidInputError(f"{kind.what} must be a sequence of {kind.plural}, not a "
                                "single string")
    if items is None or isinstance(items, Mapping) or not isinstance(items, Iterable):
        raise InvalidInputError(f"{kind.what} must be a sequence of {kind.plural}, not "
                                f"{type_name(items)}")
    rows = []
    for i, item in enumerate(items):
        data = encode(item)
        if data is None:
            raise InvalidInputError(f"{kind.what}[{i}] is {type_name(item)}, not {kind.accepted}")
        rows.append(data)
    if not rows:
        raise InvalidInputError(f"{kind.what} is empty; send at least one {kind.singular}")
    return np.array(rows, dtype=np.object_).reshape(-1, 1)


def text_tensor(texts: Iterable[str | bytes]) -> np.ndarray:
    """A [n, 1] BYTES array of UTF-8 texts, as the text-embedding family wants.

    Any iterable of `str` or `bytes` (a list, a tuple, a generator, a numpy array of
    strings); anything else is refused naming the first bad item: `5` would otherwise
    travel as five NUL bytes."""
    def encode(item: Any) -> bytes | None:
        if isinstance(item, str):
            return item.encode("utf-8")
        return bytes(item) if isinstance(item, bytes) else None

    return bytes_rows(texts, TEXTS, encode)


def image_tensor(images: Iterable[bytes | str]) -> np.ndarray:
    """A [n, 1] BYTES array of encoded images (JPEG, PNG, WebP), as the image family wants:
    bytes-like items (read a file with Path.read_bytes()), or a `str` that is a data URL
    (`data:image/webp;base64,...`, sent as its UTF-8 bytes; the server checks it). Any
    other item, another str included, is refused."""
    def encode(item: Any) -> bytes | None:
        if isinstance(item, str):
            return item.encode("utf-8") if item[:5].lower() == "data:" else None
        return bytes(item) if isinstance(item, (bytes, bytearray, memoryview)) else None

    return bytes_rows(images, IMAGES, encode)


ABANDONED_GRACE_S = 10.0  # how long a gRPC request outlives the deadline of its caller


def check_timeout(timeout: object) -> float | None:
    """A `timeout=` in seconds (> 0), or None; anything else is an InvalidInputError."""
    if timeout is not None and not (is_number(timeout) and timeout > 0):
        raise InvalidInputError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    return None if timeout is None else float(timeout)


@dataclass(frozen=True)
class CallOptions:
    """Per-call options: priority level (1 = highest), Triton's queue timeout per request
    (`timeout_ms`), pinned version, the key that keeps a caller on one version during a
    rollout (`rollout_key`), and the call's client-side deadline (`timeout`, seconds)."""

    priority: int | None = None
    timeout_ms: float | None = None
    model_version: int | None = None
    rollout_key: str | None = None
    timeout: float | None = None

    def __post_init__(self) -> None:
        """Refuse what Triton would misread, before anything is sent."""
        if self.priority is not None and not is_int_at_least(self.priority, 0):
            raise InvalidInputError("priority must be an integer >= 0 (1 is the highest, 0 "
                                    f"the model's default), got {self.priority!r}")
        if self.timeout_ms is not None and not (is_number(self.timeout_ms)
                                                and self.timeout_ms > 0):
            raise InvalidInputError(f"timeout_ms must be a number > 0, got {self.timeout_ms!r}")
        if self.model_version is not None and not is_int_at_least(self.model_version, 1):
            raise InvalidInputError("model_version must be an integer >= 1, got "
                                    f"{self.model_version!r}")
        check_timeout(self.timeout)

    def deadline(self) -> float | None:
        """Monotonic time by which the call must end (None: no deadline)."""
        return None if self.timeout is None else time.monotonic() + self.timeout

    def infer_kwargs(self, request_id: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"request_id": request_id}
        if self.priority is not None:
            kwargs["priority"] = self.priority
        if self.timeout_ms is not None:
            kwargs["timeout"] = int(self.timeout_ms * 1000)  # Triton wants microseconds
        if self.model_version is not None:
            kwargs["model_version"] = str(self.model_version)
        if self.rollout_key is not None:
            kwargs["parameters"] = {ROLLOUT_KEY: str(self.rollout_key)}
        return kwargs


def chunks(n: int, size: int) -> Iterator[slice]:
    """Slices of at most `size` rows covering range(n)."""
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def byte_chunks(sizes: Sequence[int], max_rows: int, max_bytes: int,
                protocol: str = "http", label: str = "row") -> list[slice]:
    """Consecutive slices of rows, each at most `max_rows` rows whose encoded sizes (plus
    4 bytes each, the BYTES length prefix) fit `max_bytes` less the envelope. A row that
    cannot fit alone raises RequestTooLargeError naming its index and the limit."""
    from tmr_client.errors import RequestTooLargeError

    budget = max_bytes - ENVELOPE_BYTES
    slices, start, used = [], 0, 0
    for i, size in enumerate(sizes):
        cost = size + 4
        if cost > budget:
            hint = " (gRPC takes larger requests)" if protocol == "http" else ""
            raise RequestTooLargeError(
                f"{label}[{i}] is {size} bytes; one {protocol} request holds at most "
                f"{budget} bytes of data{hint}")
        if i > start and (i - start >= max_rows or used + cost > budget):
            slices.append(slice(start, i))
            start, used = i, 0
        used += cost
    if start < len(sizes):
        slices.append(slice(start, len(sizes)))
    return slices


def new_request_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class ModelInfo:
    """What the client needs to know of a model: its max_batch_size, outputs, chunks in
    flight, the rows of one chunk (`request_rows`, at most max_batch), and of one chunk
    whose texts are cut into windows (`chunk_rows`; `chunks_by_default`: the model's
    policy is chunk)."""

    max_batch: int
    outputs: tuple[str, ...]
    in_flight: int
    request_rows: int
    chunk_rows: int = 1
    chunks_by_default: bool = False


def inner(config: Any) -> Any:
    """The config (or metadata) itself, whether wrapped ({"config": ...}) or not."""
    if isinstance(config, dict):
        return config.get("config", config)
    return getattr(config, "config", config)


def output_names(config: Any) -> list[str]:
    """The output names of a model config or metadata (dict over HTTP, protobuf over gRPC)."""
    body = inner(config)
    if isinstance(body, dict):
        return [o["name"] for o in body.get("output", body.get("outputs", []))]
    return [o.name for o in getattr(body, "output" if hasattr(body, "output") else "outputs")]


def max_batch_size(config: Any) -> int:
    body = inner(config)
    value = body.get("max_batch_size", 0) if isinstance(body, dict) else body.max_batch_size
    return int(value) or 1


def config_dict(config: Any) -> dict[str, Any]:
    """The config in Triton's JSON form, from HTTP (a dict) or gRPC (protobuf)."""
    body = inner(config)
    if not isinstance(body, dict):
        body = json_format.MessageToDict(body, preserving_proto_field_name=True)
    return body


def request_rows(config: Any) -> int:
    """Rows of one request of a bulk call (contract.request_rows: the model's
    preferred batch when it has one, else its max_batch_size), from the config over HTTP
    (a dict) or gRPC (protobuf): a bulk call is then many short executions that higher
    priorities can pass."""
    return contract.request_rows(config_dict(config))


def instance_count(config: Any) -> int | None:
    """The model's instances from its config's instance_group (None when it says none)."""
    body = inner(config)
    if isinstance(body, dict):
        counts = [int(g.get("count", 1)) for g in body.get("instance_group", [])]
    else:
        counts = [int(g.count) for g in body.instance_group]
    return sum(counts) or None


def in_flight_limit(instances: int | None) -> int:
    """How many chunks of a bulk call go to the server at once: one per instance of the
    model. A chunk is a whole dynamic batch, so a second one per instance would only wait
    in the queue, where the default (low) priority level expires requests after 2 s; the
    network gap between one chunk's answer and the next is tiny beside a chunk's compute."""
    return instances if instances else DEFAULT_IN_FLIGHT


@dataclass(frozen=True)
class Access:
    """Keys and what to do without the admin key (see tmr_client.auth).

    The model config (max_batch_size, outputs, instances) is a restricted API. With
    `max_batch_size` given, or when the config is refused, the client reads the open
    metadata for the outputs and sends chunks of `max_batch_size` rows (1 when not given).
    """

    api_key: str | None = None
    admin_key: str | None = None
    max_batch_size: int | None = None
    max_in_flight: int | None = None  # chunks of one call at once; None: from the config
    # Priority 1 goes to the model's interactive lane (docs/serving.md#priority-lanes);
    # False: to the model itself, ordered by Triton's priority queue.
    lanes: bool = True

    def info(self, config: Any) -> ModelInfo:
        body = config_dict(config)
        rows = self.max_batch_size or request_rows(config)
        return ModelInfo(self.max_batch_size or max_batch_size(config),
                         tuple(output_names(config)),
                         self.max_in_flight or in_flight_limit(instance_count(config)),
                         rows, min(rows, contract.chunk_request_rows(body)),
                         contract.chunks_by_default(body))

    def info_without_config(self, metadata: Any) -> ModelInfo:
        rows = self.max_batch_size or 1
        return ModelInfo(rows, tuple(output_names(metadata)),
                         self.max_in_flight or DEFAULT_IN_FLIGHT, rows, rows)


@dataclass(frozen=True)
class Call:
    """One SDK call: the model, the rows to send ([n, 1]) under one input, the options."""

    model: str
    rows: np.ndarray
    input_name: str
    wanted: tuple[str, ...]  # outputs to ask for, those of the model's that it has
    options: CallOptions
    deadline: float | None
    on_progress: Progress | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)  # request parameters
    protocol: str = "http"

    def chunks(self, info: ModelInfo) -> list[tuple[slice, str]]:
        """(rows, request id) of each request the call makes: at most the model's
        request rows (its preferred batch, else max_batch_size; fewer when its texts are
        chunked into windows), and never over the protocol's request size limit."""
        sizes = [len(row[0]) for row in self.rows]
        truncate = self.parameters.get(contract.TRUNCATE)
        chunked = truncate == "chunk" or (truncate is None and info.chunks_by_default)
        return [(rows, new_request_id()) for rows in byte_chunks(
            sizes, info.chunk_rows if chunked else info.request_rows,
            MAX_REQUEST_BYTES[self.protocol], self.protocol, self.input_name)]

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None: no deadline); raises
        DeadlineExceededError once it has passed."""
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self.deadline_error()
        return left

    def time_left(self) -> float | None:
        """Seconds left before the deadline, 0 once passed (None: no deadline)."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def grpc_deadline(self) -> float | None:
        """The gRPC deadline of one request: the time left plus ABANDONED_GRACE_S, so that
        the caller stops waiting first and the RPC is not cancelled (see the module doc)."""
        left = self.remaining()
        return None if left is None else left + ABANDONED_GRACE_S

    def deadline_error(self) -> DeadlineExceededError:
        return DeadlineExceededError(f"deadline exceeded: the call to {self.model!r} took "
                                     f"more than its timeout of {self.options.timeout:g} s")

    def progress(self, done: int) -> None:
        if self.on_progress is not None:
            self.on_progress(done, len(self.rows))

    def infer_kwargs(self, request_id: str) -> dict[str, Any]:
        """tritonclient's infer arguments; the time left is the queue timeout (in µs) when
        the caller gave a deadline and no `timeout_ms`."""
        kwargs = self.options.infer_kwargs(request_id)
        left = self.remaining()
        if left is not None and "timeout" not in kwargs:
            kwargs["timeout"] = max(1, int(left * 1_000_000))
        if self.parameters:
            kwargs["parameters"] = {**kwargs.get("parameters", {}), **self.parameters}
        return kwargs


def request_for(module: ModuleType, call: Call, rows: slice,
                info: ModelInfo) -> tuple[list[Any], list[Any]]:
    """InferInput and InferRequestedOutput lists for one chunk (binary tensors on HTTP)."""
    batch = call.rows[rows]
    tensor = module.InferInput(call.input_name, list(batch.shape), "BYTES")
    out_kwargs: dict[str, Any] = {}
    if module.__name__.startswith("tritonclient.http"):
        tensor.set_data_from_numpy(batch, binary_data=True)
        out_kwargs["binary_data"] = True
    else:
        tensor.set_data_from_numpy(batch)
    outputs = [n for n in call.wanted if n in info.outputs]
    return [tensor], [module.InferRequestedOutput(name, **out_kwargs) for name in outputs]


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
    identities = [response_identity(a) for a in answers]
    return EmbedResult(
        embeddings=np.concatenate([a.as_numpy(EMBEDDING_OUTPUT) for a in answers]),
        served_by=[row for a in answers for row in strings(a, SERVED_BY_OUTPUT)],
        tokens=integers(answers, TOKENS_OUTPUT),
        truncated_tokens=integers(answers, TRUNCATED_OUTPUT),
        windows=integers(answers, WINDOWS_OUTPUT),
        model_name=identities[0][0], model_versions=[v for _, v in identities],
        request_ids=request_ids)


def integers(answers: Sequence[Any], name: str) -> list[int]:
    """An integer output of every chunk, one per row ([] when the model has no such one)."""
    arrays = [a.as_numpy(name) for a in answers]
    return [int(v) for array in arrays if array is not None for v in array.reshape(-1)]


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
    """One InferResult from the InferResults of the chunks, in order."""
    identities = [response_identity(a) for a in answers]
    outputs = {}
    for name in wanted:
        parts = [a.as_numpy(name) for a in answers]
        if all(part is not None for part in parts):
            outputs[name] = np.concatenate(parts)
    return InferResult(outputs, identities[0][0], [v for _, v in identities], request_ids)


class ClientBase:
    """State and decisions shared by the sync and asyncio clients (no I/O here)."""

    def __init__(self, url: str | None, protocol: Protocol | None, model: str,
                 retry: RetryPolicy | None, seed: int | None, aio: bool,
                 access: Access | None = None, timeout: float | None = None) -> None:
        access = access or Access()
        for name in ("max_batch_size", "max_in_flight"):
            value = getattr(access, name)
            if value is not None and not is_int_at_least(value, 1):
                raise InvalidInputError(f"{name} must be an integer >= 1, got {value!r}")
        self.endpoint = endpoint(url, protocol)
        self.protocol: Protocol = self.endpoint.protocol
        self.url = self.endpoint.address
        self.timeout = check_timeout(timeout)
        self.model = model
        self.retry = retry or RetryPolicy()
        self.access = access
        self._module = protocol_module(self.protocol, aio=aio)
        self._rng = random.Random(seed)
        self._api_key = resolve_api_key(access.api_key)
        self._admin_key = resolve_admin_key(access.admin_key)
        self._infos: dict[str, ModelInfo] = {}
        self._lanes: dict[str, bool] = {}  # lane -> loaded on the server (asked once)
        try:
            self._client = triton_client(self.endpoint, aio, self.timeout)
        except Exception as exc:  # tritonclient refuses an address with many types
            raise from_exception(exc) from exc

    def _typed(self, exc: Exception) -> TritonClientError:
        """A tritonclient or transport failure as a typed error, with the answer's
        Retry-After (HTTP) when it is one to retry."""
        err = from_exception(exc)
        if err.status in RETRY_AFTER_STATUSES and err.retry_after_s is None:
            err.retry_after_s = retry_after(self._client)
        return err

    def _control_kwargs(self) -> dict[str, Any]:
        """The client's `timeout=` on a gRPC control call (HTTP's is the socket's)."""
        if self.protocol == "grpc" and self.timeout is not None:
            return {"client_timeout": self.timeout}
        return {}

    @property
    def max_in_flight(self) -> int:
        """Chunks one bulk call to the default model sends at once (once its config is read)."""
        info = self._infos.get(self.model)
        return info.in_flight if info else (self.access.max_in_flight or DEFAULT_IN_FLIGHT)

    def _headers(self, admin: bool = False) -> dict[str, str]:
        """A fresh header dict for one call (tritonclient's HTTP client adds to it): the
        keys, and the caller's trace context when OpenTelemetry is installed."""
        return {**trace_headers(),
                **key_headers(self.protocol, api_key=self._api_key, admin=admin,
                              admin_key=self._admin_key)}

    def _start(self, model: str | None, rows: np.ndarray, input_name: str,
               wanted: Sequence[str], options: CallOptions,
               on_progress: Progress | None = None,
               parameters: Mapping[str, Any] | None = None) -> Call:
        if options.timeout is None and self.timeout is not None:
            options = replace(options, timeout=self.timeout)
        return Call(model or self.model, rows, input_name, tuple(wanted), options,
                    options.deadline(), on_progress, dict(parameters or {}), self.protocol)

    def _start_embed(self, texts: Iterable[str | bytes], model: str | None,
                     truncate: Truncate, chunk_overlap: int | None, options: CallOptions,
                     on_progress: Progress | None) -> Call:
        return self._start(model, text_tensor(texts), TEXT_INPUT, EMBED_OUTPUTS, options,
                           on_progress, text_parameters(truncate, chunk_overlap))

    def _start_classify(self, images: Iterable[bytes | str], model: str | None, top_k: int | None,
                        options: CallOptions, on_progress: Progress | None) -> Call:
        if top_k is not None and not is_int_at_least(top_k, 1):
            raise InvalidInputError(f"top_k must be an integer >= 1, got {top_k!r}")
        return self._start(model, image_tensor(images), IMAGE_INPUT, CLASSIFY_OUTPUTS, options,
                           on_progress, {} if top_k is None else {contract.TOP_K: int(top_k)})

    def _lane_of(self, call: Call) -> str | None:
        """The interactive lane a priority-1 call goes to, if its model has one: None for
        any other call (the shared front orders it by priority). Whether the lane is
        loaded is asked once per model (`_lanes`)."""
        if (not self.access.lanes or call.options.priority != INTERACTIVE_PRIORITY
                or call.model.endswith(LANE_SUFFIX)):
            return None
        return lane_name(call.model)

    @staticmethod
    def _overflow(call: Call, err: TritonClientError) -> Call | None:
        """A lane whose queue is full: the call again on its front, where priority 1 waits
        ahead of bulk in Triton's queue (never refused for the lane's short queue)."""
        if isinstance(err, QueueFullError) and call.model.endswith(LANE_SUFFIX):
            return replace(call, model=call.model.removesuffix(LANE_SUFFIX))
        return None

    def _routed(self, call: Call, lane_ready: bool) -> Call:
        lane = self._lane_of(call)
        return replace(call, model=lane) if lane and lane_ready else call

    def _request(self, call: Call, rows: slice, info: ModelInfo) -> tuple[list[Any], list[Any]]:
        return request_for(self._module, call, rows, info)

    def _retry_delay(self, attempt: int, err: TritonClientError,
                     deadline: float | None) -> float | None:
        """Seconds to wait before the next try, or None to raise `err`."""
        remaining = None if deadline is None else deadline - time.monotonic()
        return next_delay(self.retry, attempt, err, remaining, self._rng)


EMBED_OUTPUTS = (EMBEDDING_OUTPUT, SERVED_BY_OUTPUT, TOKENS_OUTPUT, TRUNCATED_OUTPUT,
                 WINDOWS_OUTPUT)
# What a text over the model's length gets (the front's `truncate` request parameter):
# True cuts it, False refuses it (400), "chunk" embeds it in windows pooled into one
# vector; None leaves it to the model's overlength_policy.
Truncate = bool | contract.OverlengthPolicy | None
TRUNCATE_CHOICES = contract.OVERLENGTH_POLICIES


def text_parameters(truncate: Truncate, chunk_overlap: int | None) -> dict[str, Any]:
    """The request parameters of an embed call, refusing what the front would refuse."""
    parameters: dict[str, Any] = {}
    if truncate is not None:
        if not isinstance(truncate, bool) and truncate not in TRUNCATE_CHOICES:
            raise InvalidInputError("truncate must be True, False, None or one of "
                                    f"{', '.join(TRUNCATE_CHOICES)}; got {truncate!r}")
        parameters[contract.TRUNCATE] = truncate
    if chunk_overlap is not None:
        if not is_int_at_least(chunk_overlap, 0):
            raise InvalidInputError(f"chunk_overlap must be an integer >= 0, got "
                                    f"{chunk_overlap!r}")
        parameters[contract.CHUNK_OVERLAP] = int(chunk_overlap)
    return parameters


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


def classify_result(answers: Sequence[Any], request_ids: list[str]) -> ClassifyResult:
    """One ClassifyResult from the InferResults of the chunks, in order."""
    predictions = []
    for answer in answers:
        ids, labels = answer.as_numpy(contract.CLASS_IDS), answer.as_numpy(contract.LABELS)
        probabilities = answer.as_numpy(contract.PROBABILITIES)
        for row in range(len(ids)):
            predictions.append([Prediction(int(i), label.decode(), float(p)) for i, label, p
                                in zip(ids[row], labels[row], probabilities[row])])
    identities = [response_identity(a) for a in answers]
    return ClassifyResult(predictions,
                          served_by=[row for a in answers for row in strings(a, SERVED_BY_OUTPUT)],
                          model_name=identities[0][0], model_versions=[v for _, v in identities],
                          request_ids=request_ids)
