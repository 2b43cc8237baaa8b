"""The wire contract between the SDK and the front models, written once (standard library only).

The project's `core` re-exports these (core/families/, core/settings.py), so the server
side, the Python backends and the SDK read the same names; the SDK itself needs nothing
but this module from that contract.

    tensors       the families' front inputs and outputs (TEXT, EMBEDDING, IMAGE, ...)
    lanes         a front's interactive lane: its name suffix and the priority it takes
    parameters    request parameters (`truncate`, `chunk_overlap`, `rollout_key`, `top_k`,
                  `raw_scores`)
                  and the values `truncate` / `overlength_policy` take
    config        what a client reads from a model config to size its requests
    ports         Triton's default listening ports
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

# Front tensors: the text-embedding family ...
TEXT = "TEXT"  # BYTES [n, 1]: UTF-8 texts
EMBEDDING = "EMBEDDING"  # FP32 [n, dim]
TOKENS = "TOKENS"  # INT32 [n, 1]: the tokens the encoder ran over (every window's)
TRUNCATED_TOKENS = "TRUNCATED_TOKENS"  # INT32 [n, 1]: the tokens truncation dropped
WINDOWS = "WINDOWS"  # INT32 [n, 1]: windows of a chunked text
# ... the image-classification family ...
IMAGE = "IMAGE"  # BYTES [n, 1]: an encoded JPEG, PNG or WebP, or a data: URL
CLASS_IDS = "CLASS_IDS"  # INT64 [n, top_k], best first
LABELS = "LABELS"  # BYTES [n, top_k]
PROBABILITIES = "PROBABILITIES"  # FP32 [n, top_k]
# ... the text-ranking family (cross-encoders: one row is a query and a document) ...
QUERY = "QUERY"  # BYTES [n, 1]: each pair's query (a client repeats one query per document)
DOCUMENT = "DOCUMENT"  # BYTES [n, 1]: each pair's document
SCORE = "SCORE"  # FP32 [n, 1]: each pair's relevance (TOKENS, TRUNCATED_TOKENS, WINDOWS too)
# ... and every front: what served each row (tmr_client.served_by.ServedBy).
SERVED_BY = "SERVED_BY"

# Interactive lanes (docs/serving.md#priority-lanes).
LANE_SUFFIX = "_interactive"
INTERACTIVE_PRIORITY = 1  # the priority level the lane takes (Triton's highest)


def lane_name(front: str) -> str:
    """The interactive lane of a front model."""
    return front + LANE_SUFFIX


# Request parameters.
TRUNCATE = "truncate"
CHUNK_OVERLAP = "chunk_overlap"
ROLLOUT_KEY = "rollout_key"  # rows of one key go to one version during a rollout
TOP_K = "top_k"
PROMPT_NAME = "prompt_name"  # one of the text model's named prompts, put before each text
DIMENSIONS = "dimensions"  # the size to cut an embedding to (the model's Matryoshka sizes)
RAW_SCORES = "raw_scores"  # true: a reranker's logits, without its activation (sigmoid)
COUNT_ONLY = "count_only"  # true: tokenize and count, run no encoder (EMBEDDING is [n, 0])
# What a text over the model's length gets: a request's `truncate`, a model's
# `overlength_policy` (config parameter).
OverlengthPolicy = Literal["reject", "truncate", "chunk"]
OVERLENGTH_POLICIES: tuple[OverlengthPolicy, ...] = get_args(OverlengthPolicy)
# What each policy does with one text, from a count_only answer (TRUNCATED_TOKENS: what
# `truncate` drops, WINDOWS: what `chunk` makes, 0 past the windows limit): "fits" when it
# is within the model's length, else "refused", "truncated" or "chunked".
Outcome = Literal["fits", "refused", "truncated", "chunked"]


def policy_outcome(policy: OverlengthPolicy, truncated_tokens: int, windows: int) -> Outcome:
    """What `policy` does with a text the front counted (server/nginx/openai.js has the
    same rule for /v1/tokenize; a unit test keeps them in step)."""
    if truncated_tokens <= 0:
        return "fits"
    if policy == "truncate":
        return "truncated"
    return "chunked" if policy == "chunk" and windows > 0 else "refused"


# `truncate` also takes a bool, TEI's form (as JSON or as the string "true"/"false"):
# true cuts the text, false refuses it.
BOOL_POLICIES: dict[bool, OverlengthPolicy] = {True: "truncate", False: "reject"}
# Every value `truncate` may take (a string lower-cased) -> the policy it names.
TRUNCATE_VALUES: dict[bool | str, OverlengthPolicy] = {
    **BOOL_POLICIES, **{str(b).lower(): p for b, p in BOOL_POLICIES.items()},
    **{p: p for p in OVERLENGTH_POLICIES}}

# Config parameters a client reads, with the defaults the front models use when a config
# leaves them out (core.settings.TextFrontSettings takes its defaults from here).
OVERLENGTH_POLICY = "overlength_policy"
DEFAULT_OVERLENGTH_POLICY: OverlengthPolicy = "reject"
MAX_WINDOWS_PER_TEXT = "max_windows_per_text"
DEFAULT_MAX_WINDOWS_PER_TEXT = 128  # a chunked text's windows
MAX_WINDOWS_PER_REQUEST = "max_windows_per_request"
DEFAULT_MAX_WINDOWS_PER_REQUEST = 256  # all texts of a request


# Triton's default listening ports (server.settings.Ports; the SDK's URL defaults).
HTTP_PORT = 8000
GRPC_PORT = 8001
METRICS_PORT = 8002


def preferred_rows(preferred_batch_size: tuple[int, ...], max_batch_size: int) -> int:
    """Rows a client should put in one request: the largest preferred batch when there is
    one (a larger request is one execution that holds an instance longer, and every
    higher-priority request waits for it), else max_batch_size."""
    return min(max(preferred_batch_size, default=max_batch_size), max_batch_size)


def request_rows(config: Mapping[str, Any]) -> int:
    """The rows one execution of a model takes when more are queued, from its config in
    Triton's JSON form (its dynamic batcher's preferred batch and max_batch_size)."""
    batching = config.get("dynamic_batching") or {}
    preferred = tuple(int(n) for n in batching.get("preferred_batch_size") or ())
    return preferred_rows(preferred, max(int(config.get("max_batch_size", 0) or 0), 1))


def _parameter(config: Mapping[str, Any], key: str) -> str | None:
    raw = config.get("parameters", {}).get(key, {}).get("string_value")
    return raw or None


def chunk_request_rows(config: Mapping[str, Any]) -> int:
    """Rows of one request whose texts are chunked: as many texts at their most windows as
    one request may hold, at most `request_rows`, so a bulk client never meets the
    per-request windows limit."""
    per_text = int(_parameter(config, MAX_WINDOWS_PER_TEXT) or DEFAULT_MAX_WINDOWS_PER_TEXT)
    per_request = int(_parameter(config, MAX_WINDOWS_PER_REQUEST)
                      or DEFAULT_MAX_WINDOWS_PER_REQUEST)
    return max(1, min(request_rows(config), per_request // max(per_text, 1)))


def chunks_by_default(config: Mapping[str, Any]) -> bool:
    """The model chunks a long text unless a request says otherwise."""
    return (_parameter(config, OVERLENGTH_POLICY) or DEFAULT_OVERLENGTH_POLICY) == "chunk"


WORKERS = "worker_threads"  # a front's bulk workers: a count, or "cores" (one per core)
PER_CORE = "cores"
SMALLEST_HOST_CORES = 2  # "cores" as a client counts them: it cannot see the server's


def in_flight(config: Mapping[str, Any]) -> int:
    """Chunks of one bulk call to keep in flight at once: one per instance of the model,
    times its workers where a front serves with workers (python_backends/workers.py),
    which each take a chunk at once; "cores" counts as SMALLEST_HOST_CORES."""
    instances = sum(int(g.get("count", 1)) for g in config.get("instance_group") or []) or 1
    raw = _parameter(config, WORKERS) or "0"
    workers = SMALLEST_HOST_CORES if raw == PER_CORE else int(raw) if raw.isdigit() else 0
    return instances * max(1, workers)


# The SDK's own timeouts (core/timeouts.py holds the project's whole table and imports
# these): each defined here once, where the SDK, which installs alone, can read it.
NETWORK_TIMEOUT_S = 60.0  # an HTTP socket's timeout when the client has no `timeout=`
MAX_RETRY_AFTER_S = 30.0  # a longer Retry-After raises instead of being waited out
READY_WAIT_S = 60.0  # wait_ready()'s default
