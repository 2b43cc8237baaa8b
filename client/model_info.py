"""What the client reads of a model: from its config or metadata, in either wire form.

Over HTTP Triton answers JSON (a dict, sometimes wrapped as {"config": ...}); over gRPC a
protobuf message (a ModelConfigResponse wraps the config). Every reader here takes both.
The config is a restricted API (the admin key); without it the open metadata gives the
outputs, and `Access` says how many rows to send at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from tmr_client import contract
from tmr_client.errors import InvalidInputError
from tmr_client.shaping import is_int_at_least

DEFAULT_IN_FLIGHT = 4  # chunks a bulk call keeps in flight when the config is unknown


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
    max_batch_known: bool = True  # False: no config and no max_batch_size (1 assumed)


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
    """The model's max_batch_size; 1 for a model that does not batch."""
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
    model, or per worker of a front with workers (contract.in_flight). A chunk is a whole
    dynamic batch, so a second one per instance would only wait in the queue, where the
    default (low) priority level expires requests after 2 s; the network gap between one
    chunk's answer and the next is tiny beside a chunk's compute."""
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

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_in_flight"):
            value = getattr(self, name)
            if value is not None and not is_int_at_least(value, 1):
                raise InvalidInputError(f"{name} must be an integer >= 1, got {value!r}")

    @property
    def needs_config(self) -> bool:
        """Whether the rows per request come from the model config (no max_batch_size)."""
        return self.max_batch_size is None

    def info(self, config: Any) -> ModelInfo:
        """The model's info from its config (the caller's own limits first)."""
        body = config_dict(config)
        rows = self.max_batch_size or request_rows(config)
        return ModelInfo(self.max_batch_size or max_batch_size(config),
                         tuple(output_names(config)),
                         self.max_in_flight or in_flight_limit(instance_count(config)
                                                               and contract.in_flight(body)),
                         rows, min(rows, contract.chunk_request_rows(body)),
                         contract.chunks_by_default(body))

    def info_without_config(self, metadata: Any) -> ModelInfo:
        """The model's info from its open metadata: `max_batch_size` rows (else 1)."""
        rows = self.max_batch_size or 1
        return ModelInfo(rows, tuple(output_names(metadata)),
                         self.max_in_flight or DEFAULT_IN_FLIGHT, rows, rows,
                         max_batch_known=self.max_batch_size is not None)
