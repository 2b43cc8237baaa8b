"""Typed settings of the front models and backends, each default written once (pure).

In the style of MLServer's `ModelSettings` and pytriton's `DynamicBatcher`: one frozen
dataclass per concern. A settings class renders itself into a config's `parameters {}`
(`to_parameters`: string values under the field names, which are the parameter keys) and
parses itself back (`from_parameters`, from the config's JSON form as a stub gets it;
a bad value raises `core.params.ConfigError` naming the key). A family holds one instance
of each with only its differences (`dataclasses.replace(DEFAULT, ...)`, core/families/);
core/families/configs.py writes them into the generated configs, and the stub side
(python_backends/) reads them with `from_parameters`, so no other default exists.

A field marked `written=False` is a knob with a default that generated configs leave out
(they keep their keys); a config may still set it.

    ModelSettings      every Python-based model (python_backends/base.py)
    BackendSettings    the Python-based onnxruntime/TorchScript backends
    LadderSettings     the degradation ladder of every front (python_backends/degradation.py)
    TextFrontSettings  a text front's input limits and length buckets
    ImageFrontSettings an image front's answer size (ImageSpec holds the model's own)
    QueuePolicy, DynamicBatching   a front's `dynamic_batching`, as Triton's JSON form
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, TypeVar

from tmr_client import contract
from tmr_client.contract import (  # noqa: F401  (re-exported for python_backends)
    CHUNK_OVERLAP,
    COUNT_ONLY,
    DIMENSIONS,
    OVERLENGTH_POLICIES,
    PROMPT_NAME,
    RAW_SCORES,
    ROLLOUT_KEY,
    TOP_K,
    TRUNCATE,
    TRUNCATE_VALUES,
    OverlengthPolicy,
    chunk_request_rows,
    chunks_by_default,
    request_rows,
)

from core import timeouts
from core.params import flag, non_negative_int, one_of, parameter, positive_int

S = TypeVar("S", bound="ParameterSettings")
TOP_LEVEL = 4  # the ladder's last level (503 for all); python_backends/degradation.py
GC_POLICIES = ("default", "freeze")  # python_backends/gc_pauses.py says what each does
# Intra-op threads of an encoder instance unless its config sets its format's threads
# parameter (core/families/spec.py Format.threads_parameter); 0, as for Triton's native
# backends, lets the runtime take every usable core (core/host_profile.py host_cores):
# one instance on all of them is what the reviewed configs ship (docs/serving.md).
ENCODER_THREADS = 0
# A front's LadderSettings.primary_in_process and in_process_threads, as the host profile
# and the interactive lanes write them.
IN_PROCESS_PARAMETER = "primary_in_process"
IN_PROCESS_THREADS_PARAMETER = "in_process_threads"
WORKERS_PARAMETER = contract.WORKERS  # ModelSettings.worker_threads
INTERACTIVE_WORKERS_PARAMETER = "interactive_workers"  # ModelSettings.interactive_workers
INTERACTIVE_INPUT_SUFFIX = "_INTERACTIVE"  # a front's input that its ensemble lane feeds
TRACED_ENV = "TMR_TRACED"  # the launcher's word to the stubs: this server traces requests


@dataclass(frozen=True)
class ThreadShare:
    """How many threads a runtime run in a front's process takes (`in_process_threads`):
    those of one of the encoder's instances, every usable core, an interactive lane's share
    (core/host_profile.py lane_threads), or a fixed count; written as "instance",
    "every_core", "lane" or the count."""

    kind: Literal["instance", "every_core", "lane", "fixed"] = "instance"
    count: int = 0  # with "fixed"

    @classmethod
    def parse(cls, raw: str) -> ThreadShare:
        if raw in ("instance", "every_core", "lane"):
            return cls(raw)  # type: ignore[arg-type]
        return cls("fixed", positive_int(raw))

    def __str__(self) -> str:
        return str(self.count) if self.kind == "fixed" else self.kind


INSTANCE_SHARE = ThreadShare()
EVERY_CORE = ThreadShare("every_core")
LANE_SHARE = ThreadShare("lane")
# ModelSettings.cpu_scheduling: its values. "bulk", the default, is the server's bulk CPU
# policy (core/cpu_policy.py: SCHED_IDLE or nice, decided where the server starts); an
# interactive lane is written "normal" (docs/serving.md#priority-lanes).
SCHEDULING_PARAMETER = "cpu_scheduling"
SCHEDULINGS = ("bulk", "normal", "idle", "nice")


def instance_count(config: Mapping[str, Any]) -> int:
    """The instances a model's config (Triton's JSON form) asks for, at least one."""
    return max(1, sum(int(g.get("count", 1)) for g in config.get("instance_group") or [{}]))


def setting(default: Any, cast: Callable[[str], Any] | None = None, *,
            written: bool = True) -> Any:
    """A settings field: its default, how its string value is read (by default the
    default's type), and whether generated configs write it."""
    return field(default=default, metadata={"cast": cast, "written": written})


def render(value: Any) -> str:
    """A value as a config parameter's string: "true", "5", "0.25", "reject", "0.5,0.5"."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, tuple):
        return ",".join(render(v) for v in value)
    return str(value)


def cast_of(f: dataclasses.Field) -> Callable[[str], Any]:
    if f.metadata.get("cast"):
        return f.metadata["cast"]
    return flag if isinstance(f.default, bool) else type(f.default)


class ParameterSettings:
    """What every settings dataclass below shares: render into and parse from `parameters`."""

    @classmethod
    def parameter_keys(cls) -> tuple[str, ...]:
        """The parameter keys it reads (its field names)."""
        return tuple(f.name for f in fields(cls))  # type: ignore[arg-type]

    @classmethod
    def from_parameters(cls: type[S], config: Mapping[str, Any]) -> S:
        """The settings of a config (JSON form); an absent or empty key keeps its default."""
        return cls(**{f.name: parameter(config, f.name, f.default, cast_of(f))  # type: ignore
                      for f in fields(cls)})  # type: ignore[arg-type]

    def to_parameters(self) -> dict[str, str]:
        """The written fields as config parameters (key -> string value)."""
        return {f.name: render(getattr(self, f.name))
                for f in fields(self) if f.metadata.get("written", True)}  # type: ignore


WORKERS_PER_CORE = contract.PER_CORE  # ModelSettings.worker_threads: one per usable core


def worker_setting(raw: str) -> str:
    """A `worker_threads` value: "cores", or a count (0: none)."""
    if raw != WORKERS_PER_CORE:
        non_negative_int(raw)
    return raw


def nice_value(raw: str) -> int:
    """A nice value that lowers a thread: 1 to 19."""
    value = int(raw)
    if not 1 <= value <= 19:
        raise ValueError(f"cpu_nice {value} is outside 1..19")
    return value


def level_or_off(raw: str) -> int:
    """A ladder level 0..TOP_LEVEL, or -1 (off)."""
    value = int(raw)
    if value > TOP_LEVEL:
        raise ValueError(f"forced_level {value} is above the top level {TOP_LEVEL}")
    return value


@dataclass(frozen=True)
class ModelSettings(ParameterSettings):
    """Every Python-based model (python_backends/base.py)."""

    gc_policy: str = setting("default", one_of(*GC_POLICIES))  # docs/reliability.md chose it
    # At most one structured batch line per this many seconds; 0 logs every batch.
    batch_log_interval_s: float = setting(10.0, written=False)
    # The stub's threads: "bulk" (the server's bulk CPU policy, core/cpu_policy.py), or
    # pinned: "idle" (SCHED_IDLE), "nice" (cpu_nice) or "normal"
    # (python_backends/cpu_priority.py). An interactive lane is written "normal"
    # (core/families/lanes.py).
    cpu_scheduling: str = setting("bulk", one_of(*SCHEDULINGS), written=False)
    cpu_nice: int = setting(10, nice_value, written=False)
    # Threads that serve batches after `execute` returns (python_backends/workers.py): one
    # process serves concurrently with one copy of its weights. "cores": one per usable
    # core where the stub starts (core/host_profile.py worker_count); 0: execute serves.
    worker_threads: str = setting("0", worker_setting)
    # Requests that may wait for a worker; past it a request is refused at once.
    worker_queue: int = setting(512, positive_int, written=False)
    # Workers at normal CPU priority for the interactive lane's requests, which reach this
    # front through its `_INTERACTIVE` inputs (an ensemble lane, core/families/lanes.py).
    interactive_workers: int = setting(0, non_negative_int)
    # Lane requests that may wait; past it one is refused as a full queue, and the SDK and
    # the front door send it to the front at priority 1 instead. As deep as the bulk queue:
    # the lane is priority 1's queue, so a burst waits there, ahead of bulk work, rather
    # than overflowing behind it (its one worker is the starvation bound).
    interactive_queue: int = setting(512, positive_int, written=False)


@dataclass(frozen=True)
class BackendSettings(ParameterSettings):
    """The Python-based onnxruntime and TorchScript backends (python_backends/tensor_model.py)."""

    # onnxruntime's intra-op threads spin while waiting (docs/benchmarks.md: off lost).
    allow_spinning: bool = setting(True, written=False)


@dataclass(frozen=True)
class OpenVinoSettings(ParameterSettings):
    """The `openvino` encoders (python_backends/tensor_model.py OpenVinoModel), under the
    names Triton's native OpenVINO backend reads, so one config serves on both paths."""

    NUM_STREAMS: str = "1"  # one infer stream per instance: Triton's instances parallelise
    PERFORMANCE_HINT: str = setting("LATENCY", one_of("LATENCY", "THROUGHPUT"))
    # The native backend compiles for max_batch_size and refuses any other batch unless it
    # pads to it; the Python-based one runs each batch at its own size and ignores this.
    ENABLE_BATCH_PADDING: str = setting("YES", one_of("YES", "NO"))
    inference_precision: str = setting("fp32", one_of("fp32", "bf16"))  # HINT_BF16: bf16


@dataclass(frozen=True)
class LadderSettings(ParameterSettings):
    """Thresholds of the degradation ladder (python_backends/degradation.py;
    docs/degradation.md): queue signal, hysteresis, failures, memory, level 1's call
    size, the cache of level 3, an operator's override; and what the router does with
    duplicate rows at every level and where its primary runs."""

    queue_ratio: float = 0.9  # queued rows / a full execution's rows above this: requests wait
    degrade_down_ratio: float = 0.5  # every signal under its threshold x this: go down
    # Weight of the newest batch in the queue signal (an EWMA over batches).
    queue_ewma_alpha: float = setting(0.3, written=False)
    min_dwell_s: float = 5.0  # a level is held at least this long before rising
    recover_dwell_s: float = 1.0  # ... and at least this long before falling
    failures_to_degrade: int = setting(3, positive_int)  # consecutive encoder failures
    memory_limit_mb: float = 4096.0  # GPU memory in use (NVML), else the stub's RSS
    small_batch_rows: int = setting(8, positive_int)  # rows per encoder call at level 1
    cache_entries: int = 4096  # answers the router keeps for level 3 (0: none)
    forced_level: int = setting(-1, level_or_off)  # an operator's override: 0-4 pins it
    # Identical rows of one dynamic batch (same token ids or image, same rollout side) are
    # encoded once and the answer copied (docs/serving.md measured it).
    dedupe_rows: bool = True
    # The front runs its primary encoder's served version in its own process; BLS serves
    # the rest (python_backends/in_process.py). A host profile's choice, never a default.
    primary_in_process: bool = False
    # Its threads (ThreadShare): one encoder instance's, every core, an interactive lane's
    # share (core/host_profile.py in_process_threads), or a count.
    in_process_threads: ThreadShare = setting(  # noqa: RUF009 (a field(); frozen value)
        INSTANCE_SHARE, ThreadShare.parse)
    # An interactive lane's requests per execution; the rest of a batch are refused at once
    # as a full queue, and the SDK and the front door send them to the front
    # (core/families/lanes.py). 0: every request (a front).
    lane_requests: int = setting(0, non_negative_int, written=False)

    @property
    def forced(self) -> int | None:
        """The level an operator pinned, or None when the signals decide."""
        return None if self.forced_level < 0 else self.forced_level


@dataclass(frozen=True)
class Prompts:
    """A text model's named prompts, written as a JSON object (name -> prompt text)."""

    items: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, raw: str) -> Prompts:
        given = json.loads(raw or "{}")
        if not isinstance(given, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in given.items()):
            raise ValueError(f"prompts must be a JSON object of name -> text, got {raw!r}")
        return cls(tuple(sorted(given.items())))

    def __str__(self) -> str:
        return json.dumps(dict(self.items), ensure_ascii=False, sort_keys=True)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.items]

    def get(self, name: str) -> str | None:
        return dict(self.items).get(name)


NO_PROMPTS = Prompts()


def dims_list(raw: str) -> tuple[int, ...]:
    """Embedding sizes, "256,128": positive, largest first."""
    sizes = tuple(sorted({positive_int(p.strip()) for p in raw.split(",") if p.strip()},
                         reverse=True))
    return sizes


@dataclass(frozen=True)
class TextFrontSettings(ParameterSettings):
    """A text front's input limits (runtime/tokenization.py) and call grouping."""

    max_tokens: int = setting(256, positive_int)  # `tmr add` writes the model's own
    normalize: bool = True  # its encoder L2-normalises (`tmr add` writes the model's own)
    # A longer text is INVALID_ARG before it is tokenized: about 28k tokens of English
    # prose, as many as max_windows_per_text windows hold (denser text meets that first).
    max_text_bytes: int = setting(131072, positive_int)
    # Over max_tokens: "reject" (INVALID_ARG naming the text), "truncate" (keep the special
    # tokens) or "chunk" (windows pooled into one vector); a request may say its own.
    overlength_policy: str = setting(contract.DEFAULT_OVERLENGTH_POLICY,
                                     one_of(*OVERLENGTH_POLICIES))
    chunk_overlap_tokens: int = setting(32, non_negative_int)  # tokens two windows share
    max_windows_per_text: int = setting(contract.DEFAULT_MAX_WINDOWS_PER_TEXT, positive_int)
    max_windows_per_request: int = setting(contract.DEFAULT_MAX_WINDOWS_PER_REQUEST,
                                           positive_int)
    # Rows of a batch go to the encoder in groups whose padding is at most this share of
    # their real tokens (perf/profile.py measured it); -1 pads a batch as one call.
    length_bucket_waste: float = 0.25
    # An encoder call holds at most this many padded tokens (rows x longest row; one row
    # always fits); 0: no bound but the rows. docs/serving.md has the measurement.
    max_batch_tokens: int = setting(0, non_negative_int)
    # The model's named prompts (sentence-transformers' `prompts`, a JSON object of name ->
    # text put before each text) and the one a request without `prompt_name` gets ("":
    # none); `tmr add` writes them from the model's folder.
    prompts: Prompts = setting(NO_PROMPTS, Prompts.parse,  # noqa: RUF009 (a field())
                               written=False)
    default_prompt_name: str = setting("", written=False)
    # The smaller sizes its embeddings were trained to be cut to (Matryoshka), besides its
    # own; `tmr add --matryoshka-dims 256,128` writes them. Empty: its own size only.
    matryoshka_dims: tuple[int, ...] = setting((), dims_list, written=False)


@dataclass(frozen=True)
class ImageFrontSettings(ParameterSettings):
    """An image front's answer (python_backends/classify.py); the preprocessing is the
    model's own (runtime/images.py ImageSpec, from its source)."""

    top_k: int = setting(5, positive_int)  # classes a request gets unless it asks


@dataclass(frozen=True)
class RankFrontSettings(ParameterSettings):
    """A reranker front's answer (python_backends/rerank.py): the activation of its logit,
    the model's own (`tmr add` reads it from the folder); a request's `raw_scores` skips it."""

    activation: str = setting("sigmoid", one_of("sigmoid", "identity"))


@dataclass(frozen=True)
class QueuePolicy:
    """One priority level's queue (Triton's ModelQueuePolicy); defaults are Triton's."""

    timeout_action: str = "REJECT"  # or "DELAY"
    default_timeout_microseconds: int = 0  # 0: no timeout
    allow_timeout_override: bool = False  # a request may set its own timeout
    max_queue_size: int = 0  # 0: unbounded

    def to_config(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_config(cls, policy: Mapping[str, Any]) -> QueuePolicy:
        """From Triton's JSON form, where an absent field is Triton's default."""
        return cls(str(policy.get("timeout_action", cls.timeout_action)),
                   int(policy.get("default_timeout_microseconds", 0) or 0),
                   bool(policy.get("allow_timeout_override", False)),
                   int(policy.get("max_queue_size", 0) or 0))


@dataclass(frozen=True)
class DynamicBatching:
    """A model's `dynamic_batching` (Triton's message); defaults are Triton's."""

    max_queue_delay_microseconds: int = 0  # 0: a free instance takes what is queued
    # Rows an execution takes when more are queued (the largest counts): without a queue
    # delay, Triton stops a batch before it would pass it. Empty: up to max_batch_size.
    preferred_batch_size: tuple[int, ...] = ()
    priority_levels: int = 0  # 0: one queue
    default_priority_level: int = 0  # the level of a request that names none
    priority_queue_policy: Mapping[int, QueuePolicy] = field(default_factory=dict)

    def with_queue_sizes(self, *sizes: int) -> DynamicBatching:
        """The same levels with these max_queue_size values, level 1 first."""
        return replace(self, priority_queue_policy={
            level: replace(self.priority_queue_policy[level], max_queue_size=size)
            for level, size in enumerate(sizes, start=1)})

    def request_rows(self, max_batch_size: int) -> int:
        """Rows a client should put in one request: the largest preferred batch when there
        is one (a larger request is one execution that holds an instance longer, and every
        higher-priority request waits for it), else max_batch_size."""
        return contract.preferred_rows(self.preferred_batch_size, max_batch_size)

    def to_config(self) -> dict[str, Any]:
        """Triton's JSON form of the message (json_format.ParseDict reads it)."""
        return {"max_queue_delay_microseconds": self.max_queue_delay_microseconds,
                "preferred_batch_size": list(self.preferred_batch_size),
                "priority_levels": self.priority_levels,
                "default_priority_level": self.default_priority_level,
                "priority_queue_policy": {str(level): policy.to_config() for level, policy
                                          in sorted(self.priority_queue_policy.items())}}

    @classmethod
    def from_config(cls, batching: Mapping[str, Any]) -> DynamicBatching:
        """From Triton's JSON form (a stub's config, or json_format.MessageToDict)."""
        policies = batching.get("priority_queue_policy") or {}
        return cls(int(batching.get("max_queue_delay_microseconds", 0) or 0),
                   tuple(int(n) for n in batching.get("preferred_batch_size") or ()),
                   int(batching.get("priority_levels", 0) or 0),
                   int(batching.get("default_priority_level", 0) or 0),
                   {int(level): QueuePolicy.from_config(policy)
                    for level, policy in policies.items()})


# A front's queues: two priority levels; level 2 (low, the default) is shed first by
# Triton's queues: a 2 s timeout against 10 s, and a smaller queue (each family sizes it).
FRONT_BATCHING = DynamicBatching(
    priority_levels=2,
    default_priority_level=2,
    priority_queue_policy={
        1: QueuePolicy(default_timeout_microseconds=timeouts.QUEUE_PRIORITY_1.microseconds,
                       allow_timeout_override=True),
        2: QueuePolicy(default_timeout_microseconds=timeouts.QUEUE_PRIORITY_2.microseconds,
                       allow_timeout_override=True),
    },
)
# A front as one process (docs/serving.md, "One model, one process"): a bulk worker per usable
# core and one for its ensemble lane (python_backends/workers.py), over its primary run
# in its process on one thread a call, so each computes at its worker's CPU policy.
ONE_PROCESS = ModelSettings(worker_threads=WORKERS_PER_CORE, interactive_workers=1)
ONE_THREAD = ThreadShare("fixed", 1)


def in_process(ladder: LadderSettings) -> LadderSettings:
    """`ladder` with the primary in the front's process, one thread a call."""
    return replace(ladder, primary_in_process=True, in_process_threads=ONE_THREAD)


# Every class whose fields are config parameters, for the tests that keep them read.
PARAMETER_SETTINGS: tuple[type[ParameterSettings], ...] = (
    ModelSettings, BackendSettings, LadderSettings, TextFrontSettings, ImageFrontSettings,
    RankFrontSettings)
