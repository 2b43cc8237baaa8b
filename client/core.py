"""What the sync and asyncio clients share: protocols, request building, chunking, results."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

import numpy as np

from client.auth import key_headers, resolve_admin_key, resolve_api_key
from client.errors import InvalidInputError, TritonClientError
from client.retry import RetryPolicy, next_delay
from python_backends import contracts

Protocol = Literal["http", "grpc"]
DEFAULT_PORTS = {"http": 8000, "grpc": 8001}


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


def default_url(protocol: Protocol, host: str = "localhost") -> str:
    return f"{host}:{DEFAULT_PORTS[protocol]}"


def text_tensor(texts: Iterable[str | bytes]) -> np.ndarray:
    """A [n, 1] BYTES array of UTF-8 texts, as the `embed` contract wants.

    Takes any iterable of `str` or `bytes` (a list, a tuple, a generator, a numpy array of
    strings). Everything else is refused before anything is sent, naming the first bad
    item's index and type: `5` would otherwise travel as five NUL bytes.
    """
    if isinstance(texts, (str, bytes)):
        raise InvalidInputError("texts must be a sequence of strings, not a single string")
    if texts is None or isinstance(texts, Mapping) or not isinstance(texts, Iterable):
        raise InvalidInputError(f"texts must be a sequence of strings, not {type_name(texts)}")
    items = list(texts)
    if not items:
        raise InvalidInputError("texts is empty; send at least one text")
    rows = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            rows.append(item.encode("utf-8"))
        elif isinstance(item, bytes):
            rows.append(item)
        else:
            raise InvalidInputError(f"texts[{i}] is {type_name(item)}, not str or bytes")
    return np.array(rows, dtype=np.object_).reshape(-1, 1)


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


def chunks(n: int, size: int) -> Iterator[slice]:
    """Slices of at most `size` rows covering range(n)."""
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


@dataclass(frozen=True)
class CallOptions:
    """Per-call options: priority level (1 = highest), queue timeout, pinned version."""

    priority: int | None = None
    timeout_ms: int | None = None
    model_version: int | None = None

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

    def deadline(self) -> float | None:
        """Monotonic time by which retries must stop (None: no deadline)."""
        return None if self.timeout_ms is None else time.monotonic() + self.timeout_ms / 1000

    def infer_kwargs(self, request_id: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"request_id": request_id}
        if self.priority is not None:
            kwargs["priority"] = self.priority
        if self.timeout_ms is not None:
            kwargs["timeout"] = int(self.timeout_ms * 1000)  # Triton wants microseconds
        if self.model_version is not None:
            kwargs["model_version"] = str(self.model_version)
        return kwargs


def build_request(module: ModuleType, batch: np.ndarray,
                  outputs: Sequence[str]) -> tuple[list[Any], list[Any]]:
    """InferInput and InferRequestedOutput lists for one chunk."""
    text = module.InferInput(contracts.TEXT_INPUT, list(batch.shape), "BYTES")
    out_kwargs: dict[str, Any] = {}
    if module.__name__.startswith("tritonclient.http"):
        text.set_data_from_numpy(batch, binary_data=True)
        out_kwargs["binary_data"] = True
    else:
        text.set_data_from_numpy(batch)
    return [text], [module.InferRequestedOutput(name, **out_kwargs) for name in outputs]


def new_request_id() -> str:
    return uuid.uuid4().hex


@dataclass
class EmbedResult:
    """Embeddings plus what served them: one entry per chunk sent."""

    embeddings: np.ndarray
    served_by: list[str] = field(default_factory=list)  # one per row, when the model says
    model_name: str = ""
    model_versions: list[str] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)


def result_parts(result: Any) -> tuple[np.ndarray, str, str, list[str]]:
    """Embeddings, model name, version and per-row SERVED_BY from an InferResult."""
    response = result.get_response()
    if isinstance(response, dict):
        name, version = response.get("model_name", ""), response.get("model_version", "")
    else:
        name, version = response.model_name, response.model_version
    served = result.as_numpy(contracts.SERVED_BY_OUTPUT)
    served_by = [] if served is None else [v.decode() for v in served.reshape(-1)]
    return result.as_numpy(contracts.EMBEDDING_OUTPUT), name, version, served_by


def max_batch_size(config: Any) -> int:
    """max_batch_size from a model config (dict over HTTP, protobuf over gRPC)."""
    if isinstance(config, dict):
        config = config.get("config", config)
        return int(config.get("max_batch_size", 0)) or 1
    inner = getattr(config, "config", config)
    return int(inner.max_batch_size) or 1


DEFAULT_IN_FLIGHT = 4  # chunks a bulk call keeps in flight when the config is unknown


def instance_count(config: Any) -> int | None:
    """The model's instances from its config's instance_group (None when it says none)."""
    if isinstance(config, dict):
        groups = config.get("config", config).get("instance_group", [])
        counts = [int(g.get("count", 1)) for g in groups]
    else:
        counts = [int(g.count) for g in getattr(config, "config", config).instance_group]
    return sum(counts) or None


def in_flight_limit(instances: int | None) -> int:
    """How many chunks of a bulk call go to the server at once: one per instance of the
    model. A chunk is a whole dynamic batch, so a second one per instance would only wait
    in the queue, where the default (low) priority level expires requests after 2 s; the
    network gap between one chunk's answer and the next is tiny beside a chunk's compute."""
    return instances if instances else DEFAULT_IN_FLIGHT


def wanted_outputs(config: Any) -> list[str]:
    """EMBEDDING, plus SERVED_BY when the model has it (from its config or its metadata)."""
    if isinstance(config, dict):
        inner = config.get("config", config)
        outputs = [o["name"] for o in inner.get("output", inner.get("outputs", []))]
    else:
        inner = getattr(config, "config", config)
        field = "output" if hasattr(inner, "output") else "outputs"  # config or metadata
        outputs = [o.name for o in getattr(inner, field)]
    return [n for n in (contracts.EMBEDDING_OUTPUT, contracts.SERVED_BY_OUTPUT) if n in outputs]


def assemble(answers: Sequence[Any], request_ids: list[str]) -> EmbedResult:
    """One EmbedResult from the InferResults of the chunks, in order."""
    parts = [result_parts(a) for a in answers]
    return EmbedResult(
        embeddings=np.concatenate([p[0] for p in parts]),
        served_by=[row for p in parts for row in p[3]],
        model_name=parts[0][1],
        model_versions=[p[2] for p in parts],
        request_ids=request_ids,
    )


@dataclass(frozen=True)
class Access:
    """Keys and what to do without the admin key (see client.auth).

    The model config (max_batch_size, outputs) is a restricted API. With `max_batch_size`
    given, or when the config is refused, the client reads the open metadata for the
    outputs and sends chunks of `max_batch_size` rows (1 when not given).
    """

    api_key: str | None = None
    admin_key: str | None = None
    max_batch_size: int | None = None
    max_in_flight: int | None = None  # chunks of one call at once; None: from the config


Progress = Callable[[int, int], None]  # (texts done, texts in the call), after each chunk


class ClientBase:
    """State and decisions shared by the sync and asyncio clients (no I/O here)."""

    def __init__(self, url: str | None, protocol: Protocol, model: str,
                 retry: RetryPolicy | None, seed: int | None, aio: bool,
                 access: Access | None = None) -> None:
        access = access or Access()
        for name in ("max_batch_size", "max_in_flight"):
            value = getattr(access, name)
            if value is not None and not is_int_at_least(value, 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        self.protocol = protocol
        self.url = url or default_url(protocol)
        self.model = model
        self.retry = retry or RetryPolicy()
        self._module = protocol_module(protocol, aio=aio)
        self._rng = random.Random(seed)
        self._api_key = resolve_api_key(access.api_key)
        self._admin_key = resolve_admin_key(access.admin_key)
        self._fixed_max_batch = access.max_batch_size
        self._max_batch: int | None = None
        self._outputs: list[str] = [contracts.EMBEDDING_OUTPUT]
        self._fixed_in_flight = access.max_in_flight
        self._in_flight = access.max_in_flight or DEFAULT_IN_FLIGHT

    @property
    def max_in_flight(self) -> int:
        """Chunks one bulk call sends at once (known once the config was read)."""
        return self._in_flight

    def _headers(self, admin: bool = False) -> dict[str, str]:
        """A fresh header dict for one call (tritonclient's HTTP client adds to it)."""
        return key_headers(self.protocol, api_key=self._api_key, admin=admin,
                           admin_key=self._admin_key)

    def _remember(self, config: Any) -> None:
        """Keep what the model config says about batching and outputs."""
        self._max_batch = max_batch_size(config)
        self._outputs = wanted_outputs(config)
        self._in_flight = self._fixed_in_flight or in_flight_limit(instance_count(config))

    def _remember_metadata(self, metadata: Any) -> None:
        """Without the config: outputs from the metadata, chunks of the given size (or 1)."""
        self._max_batch = self._fixed_max_batch or 1
        self._outputs = wanted_outputs(metadata)

    def _retry_delay(self, attempt: int, err: TritonClientError,
                     deadline: float | None) -> float | None:
        """Seconds to wait before the next try, or None to raise `err`."""
        remaining = None if deadline is None else deadline - time.monotonic()
        return next_delay(self.retry, attempt, err, remaining, self._rng)
