"""The front model of any family: the degradation router, written once.

A family's front logic (`FrontLogic`, an object the router holds) says how a request
becomes rows for the encoder (`prepare_requests`), how rows become the encoder's inputs
(`feeds`) and how the encoder's outputs become the answer (`respond`). A family's Triton
model is this class with its front logic named (`front_logic = ...`, embed.py, classify.py).
Everything else lives here: the ladder (python_backends/degradation.py) gives the level,
python_backends/routing.py a plan, and this class executes it: the batch to the primary
encoder when all is well, smaller calls, the fallback (INT8) encoder and cached answers as
pressure rises, UNAVAILABLE only when an operator says so. Priority is Triton's business:
its queues serve level 1 first. A primary that is gone (unloaded, dead stub) fails over to the
fallback within the batch, and every row says what served it:
"<model>:<version>:<precision>:L<level>".

Everything about the encoders comes from the repository at initialize: their names from
this model's `primary_model`/`fallback_model` parameters, their output tensor and
precision from their own configs; the versions they serve are re-read by a background
thread, never on the request path.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np

from core import rollout, versions
from core.families import family, served_precision
from core.families.lanes import lane_full
from core.host_profile import host_cores, in_process_threads, lane_threads
from core.messages import degraded_refusal
from core.params import ConfigError, required
from core.rollout import RolloutState
from core.served_by import ServedBy
from core.settings import ROLLOUT_KEY, LadderSettings, instance_count, request_rows
from core.startup import LANE_PARAMETER
from core.variant import Variant
from python_backends.base import BaseModel, error_response
from python_backends.channels import BlsChannel, Channel, LocalChannel
from python_backends.degradation import (
    FALLBACK_LEVEL,
    DegradationPolicy,
    Level,
    ResponseCache,
    Transition,
    ladder,
    throttled,
)
from python_backends.front_metrics import FrontMetrics
from python_backends.in_process import LocalEncoder, OnDemand
from python_backends.rollout_traffic import RolloutTraffic
from python_backends.routing import Plan, RoutedRequest, plan_batch, plan_calls
from runtime.errors import ChildModelError, ModelError, UnavailableError

MEMORY_SAMPLE_S = 0.5  # how stale the memory signal may be
VERSION_REFRESH_S = 1.0  # how stale the version in SERVED_BY may be after a release
ONE_CALL = -1.0  # a bucket waste that sends a batch's rows in one call (batching.py)
PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20


def rss_mb() -> float:
    """Resident memory of this stub process (CPU memory pressure signal)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE_MB


def gpu_memory_reader() -> Any:
    """A function returning used GPU memory in MB through NVML, or None without a GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:  # no pynvml, no driver, no device: fall back to process RSS
        return None
    return lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20


@dataclass(frozen=True)
class Encoder:
    """An encoder model as the router calls it: its name, output tensor and precision."""

    name: str
    output: str
    precision: str
    max_rows: int | None = None  # its max_batch_size: the rows one call may hold

    @classmethod
    def from_repository(cls, repository: Path, name: str, variant: Variant) -> Encoder:
        """Read from the encoder's served config (once, at initialize)."""
        try:
            config = versions.served_config(repository / name, variant)
        except (OSError, ValueError) as err:
            raise ConfigError(f"encoder {name!r} has no readable config in {repository}: "
                              f"{err}") from err
        params = {k: v.string_value for k, v in config.parameters.items()}
        return cls(name, config.output[0].name, served_precision(params),
                   config.max_batch_size or None)


class ServedVersions(threading.Thread):
    """The version each encoder serves and its rollout (core/rollout.py), re-read from the
    repository every VERSION_REFRESH_S in the background (a release edits it on disk);
    `on_read(name, version, state, last)` hears each encoder's served version and
    rollout after every read."""

    def __init__(self, repository: Path, names: list[str],
                 on_read: Callable[[str, str, RolloutState | None, dict | None], None]
                 ) -> None:
        super().__init__(name="tmr-served-versions", daemon=True)
        self.repository, self.names, self.on_read = repository, names, on_read
        self.current: dict[str, str] = {}
        self.stopped = threading.Event()
        self.refresh()

    def refresh(self) -> None:
        for name in self.names:
            try:
                config = versions.read_config(self.repository / name)
                state, last = rollout.state_of(config), rollout.last_of(config)
                version = versions.served_version(self.repository / name)
            except (OSError, ValueError):
                continue  # a config being rewritten: keep the last answer
            self.current[name] = "?" if version is None else str(version)
            self.on_read(name, self.current[name], state, last)

    def run(self) -> None:
        while not self.stopped.wait(VERSION_REFRESH_S):
            self.refresh()


Detail = TypeVar("Detail")


@dataclass
class Prepared(RoutedRequest, Generic[Detail]):
    """A valid request: a cache key and encoder material per row, and what its answer
    needs besides the encoder's outputs, typed by its family (`detail`: a text request
    with its windows and token counts, an image request's top_k)."""

    detail: Detail


class FrontLogic(Protocol):
    """What a family's front model says; the router (FamilyRouter) does everything else.

    Built once per instance from the Triton model it serves (its config, version folder
    and the batch facts it fills), e.g. python_backends/embed.py TextEmbeddingFront."""

    # Rows of one batch go to the encoder in groups of similar length, so padding wastes
    # at most this share of their size; ONE_CALL (-1): the batch as one call.
    bucket_waste: float
    # At most this many padded tokens (rows x longest) in one encoder call; 0: no bound.
    max_batch_tokens: int

    def prepare_requests(self, requests: list[Any]) -> tuple[list[Any], dict[int, Prepared]]:
        """Responses with each invalid request's error filled in, and the valid requests."""
        ...

    def row_length(self, row: Any) -> int:
        """The size of a row, for grouping rows of similar size into one call."""
        ...

    def feeds(self, rows: Sequence[Any]) -> dict[str, np.ndarray]:
        """The encoder's inputs for one call over `rows`."""
        ...

    def respond(self, request: Prepared, outputs: np.ndarray, served_by: list[str]) -> Any:
        """The answer of one request from its rows' encoder outputs."""
        ...


class FamilyRouter(BaseModel):
    """The degradation router over a family's primary and fallback encoders, executing
    what its family's front logic (`front_logic`, built at setup) says."""

    front_logic: ClassVar[Callable[[BaseModel], FrontLogic]]

    def setup(self, args: dict[str, str]) -> None:
        self.front = self.front_logic(self)
        repository = self.model_dir.parent
        self.encoders = {role: Encoder.from_repository(repository, required(
            self.config, f"{role}_model"), self.variant) for role in ("primary", "fallback")}
        self.settings = LadderSettings.from_parameters(self.config)
        self.levels = ladder(self.settings.small_batch_rows)
        self.policy = DegradationPolicy(self.settings, since=time.monotonic())
        self.cache = ResponseCache(self.settings.cache_entries)
        # The queue signal's full batch: what one execution takes when more is queued (a
        # lane's: its `lane_requests`, core/families/lanes.py).
        self.full_batch = self.settings.lane_requests or request_rows(self.config)
        # GPU memory in use where NVML sees a GPU (the encoders live there), else this RSS.
        self.memory_mb = throttled(gpu_memory_reader() or rss_mb, MEMORY_SAMPLE_S, time.monotonic)
        self.metrics = FrontMetrics(self.name, args.get("model_instance_name", "0"), self.config)
        self.metrics.level.set(self.policy.level)
        self.rollout = self._rollout_traffic(repository)
        self.local = self._local_encoders(repository)
        self.channels = self._channels()
        self.on_demand = OnDemand()
        self.served = ServedVersions(repository, [e.name for e in self.encoders.values()],
                                     self._observe)
        self.served.start()
        self.log.info(f"encoders {self.encoders}, policy {self.settings}")

    def _local_encoders(self, repository: Path) -> dict[str, LocalEncoder]:
        """The encoders this process runs itself, by name: the fallback always (on
        demand), the primary when `primary_in_process` says so (loaded at once)."""
        cores = host_cores()
        primary, fallback = self.encoders["primary"], self.encoders["fallback"]
        lane = LANE_PARAMETER in self.config.get("parameters", {})
        share = lane_threads(cores) if lane else max(1, cores // instance_count(self.config))
        local = {fallback.name: LocalEncoder(repository, fallback.name, fallback.output,
                                             share, self.log.info, self.variant)}
        if self.settings.primary_in_process:
            # the front's workers (workers.py) share this one copy (runtime/runners.py)
            threads = in_process_threads(self.settings.in_process_threads, cores)
            local[primary.name] = LocalEncoder(repository, primary.name, primary.output,
                                               threads or 0, self.log.info, self.variant)
        return local

    def finalize(self) -> None:
        """Stop the version reader before the stub goes: its gauges talk to Triton over
        the stub's IPC, which must not race the model's teardown."""
        self.served.stopped.set()
        self.served.join(timeout=2 * VERSION_REFRESH_S)
        super().finalize()

    # -- the ladder -----------------------------------------------------------------
    def degradation_level(self) -> int | None:
        return self.policy.level

    def current_level(self) -> Level:
        self.policy.observe_memory(self.memory_mb())
        self._record(self.policy.decide(time.monotonic()))
        return self.levels[self.policy.level]

    def _record(self, transition: Transition | None) -> None:
        if transition is None:
            return
        self.metrics.transition(transition)
        self.log.warning(f"degradation level {transition.old} -> {transition.new}: "
                         f"{transition.reason}")

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        """The batch's requests, an interactive lane's first `lane_requests` only: the rest
        are refused at once as a full queue (core/families/lanes.py)."""
        taken = self.settings.lane_requests or len(requests)
        refused = [error_response(UnavailableError(lane_full(self.name, taken)))
                   for _ in requests[taken:]]
        return self._serve(requests[:taken]) + refused

    def _serve(self, requests: list[Any]) -> list[Any]:
        level = self.current_level()
        with self.unlocked():  # tokenizing or decoding touches no shared state
            responses, valid = self.front.prepare_requests(requests)
        if self.pool is None:
            self.policy.observe_batch([len(r.rows) for r in valid.values()], self.full_batch)
        else:  # the stub's own queue (workers.py)
            self.policy.observe_share(self.pool.bulk.backlog_share())
        if self.rollout.state is not None:
            for i, request in valid.items():
                self._apply_rollout_key(request, requests[i])
        plan = plan_batch(level, valid, self.cache, self.front.bucket_waste,
                          self.front.row_length, max_rows=self.encoders[level.encoder].max_rows
                          if level.encoder else None,
                          max_tokens=self.front.max_batch_tokens,
                          # a warmup sample repeats one input: every row must warm the call
                          dedupe=self.settings.dedupe_rows and not self.warmup.active)
        for i, reason in plan.refused.items():
            self.metrics.rejections.inc(reason=reason)
            responses[i] = error_response(UnavailableError(
                degraded_refusal(self.name, level.number, level.name, reason)))
        for i, hits in plan.cached.items():
            self.metrics.cache_hits.inc(len(hits))
            responses[i] = self.front.respond(valid[i], np.stack([h[0] for h in hits]),
                                              [str(h[1].from_cache()) for h in hits])
        if plan.encoded:
            self._encode(level, plan, valid, responses, requests)
        return responses

    def _rollout_traffic(self, repository: Path) -> RolloutTraffic:
        """The primary encoder's rollout side: its family's agreement, its minimum."""
        fam = family(required(self.config, "family"))
        primary = self.encoders["primary"].name
        gates = {k: v.string_value for k, v in
                 versions.served_config(repository / primary, self.variant).parameters.items()}
        min_key = fam.rollout.agreement_gates.per_row
        minimum = float(gates[min_key]) if min_key and min_key in gates else None
        return RolloutTraffic(self.name, primary, fam.rollout.agreement, minimum)

    def _observe(self, name: str, version: str, state: RolloutState | None,
                 last: dict | None) -> None:
        """The primary's rollout to its traffic split; each served version to the
        in-process copy (loaded here, in the version reader's thread: off the request
        path, which goes over BLS until it is loaded); the fallback held while the ladder
        is above level 0 (or an operator pins a level that uses it), and let go after."""
        if name == self.encoders["primary"].name:
            self.rollout.observe(state, last)
        local = self.local.get(name)
        if local is None or not version.isdigit():
            return
        on_demand = name == self.encoders["fallback"].name
        if not on_demand or self.on_demand.wanted(self.policy.level, time.monotonic()):
            local.load(int(version))
        elif local.loaded:
            local.release(f"level 0 held {self.on_demand.release_after_s:.0f} s")

    def _encode(self, level: Level, plan: Plan, valid: dict[int, Prepared],
                responses: list[Any], requests: list[Any]) -> None:
        rows = plan.rows(valid)
        keys = [key for i in plan.encoded for key in valid[i].split_keys or valid[i].keys]
        try:
            outputs, served = self._run_plan(level, plan, rows, keys)
        except ModelError as err:
            for i in plan.encoded:
                responses[i] = error_response(err)
            return
        for duplicate, original in plan.copies.items():
            outputs[duplicate] = outputs[original]
            served[duplicate] = served[original]
        if plan.copies:
            self.metrics.duplicates.inc(len(plan.copies))
        start = 0
        for i in plan.encoded:
            request = valid[i]
            n = len(request.rows)
            part, by = outputs[start:start + n], served[start:start + n]
            start += n
            for key, row, row_by in zip(request.keys, part, by):
                self.cache.put(key, row, row_by)
            responses[i] = self.front.respond(request, part, [str(b) for b in by])

    def _apply_rollout_key(self, request: Prepared, raw: Any) -> None:
        """The client's `rollout_key` request parameter places all of a request's rows in
        a rollout's split together; without it each row's own split key (or key) does."""
        try:
            key = json.loads(raw.parameters() or "{}").get(ROLLOUT_KEY)
        except (ValueError, AttributeError):
            key = None
        if key is not None:
            request.split_keys = [str(key)] * len(request.rows)

    def _run_plan(self, level: Level, plan: Plan, rows: list, keys: list[str]
                  ) -> tuple[np.ndarray, list[ServedBy]]:
        """Outputs from the plan's encoder and what served each row; a vanished primary
        fails over at once."""
        encoder = self.encoders[plan.encoder or "fallback"]
        try:
            outputs, answered = self._call(encoder, rows, plan.calls, keys, level)
            return outputs, [self._served_by(encoder, level, v) for v in answered]
        except ChildModelError as err:
            self.metrics.fallbacks.inc(reason=err.kind)
            self.policy.observe_failure()
            if not err.unavailable or encoder == self.encoders["fallback"]:
                raise
            self._record(self.policy.fail_over(f"primary {encoder.name} failed: "
                                               f"{err.child_message}", time.monotonic()))
            fallback = self.encoders["fallback"]
            rung = self.levels[FALLBACK_LEVEL]
            outputs, answered = self._call(fallback, rows, plan.calls, keys, rung)
            return outputs, [self._served_by(fallback, rung, v) for v in answered]

    def _call(self, encoder: Encoder, rows: list, calls: list[list[int]], keys: list[str],
              level: Level) -> tuple[np.ndarray, list[str]]:
        """The batch's encoder calls, planned first as values (routing.plan_calls: the
        rollout's split and shadowing, when the primary's rollout runs), then made one
        after the other (at once lost throughput: docs/benchmarks.md); results in row
        order, and the version that answered each row. A candidate that fails (counted)
        leaves its rows to the stable version."""
        state = self.rollout.state if encoder == self.encoders["primary"] else None
        split = None if state is None else (lambda group: self.rollout.split(state, group))
        served = self.served.current.get(encoder.name, "?")
        stable_version = int(served) if served.isdigit() else -1
        answered = [served] * len(rows)
        parts: dict[tuple[int, ...], np.ndarray] = {}
        for call in plan_calls(calls, keys, split, may_shadow=level.number == 0):
            run = self._pinned(encoder, call.rows, rows)
            if state is None:
                parts[call.rows] = run(stable_version)
            elif not call.canary:
                parts[call.rows] = self.rollout.stable(state, run, len(call.rows),
                                                       may_shadow=call.shadow)
            else:
                part = self.rollout.answer(state, run, len(call.rows))
                if part is None:
                    parts[call.rows] = self.rollout.stable(state, run, len(call.rows), False)
                    continue
                parts[call.rows] = part
                for i in call.rows:
                    answered[i] = str(state.version)
        self.policy.observe_success()
        return gathered(parts, len(rows)), answered

    def _pinned(self, encoder: Encoder, group: Sequence[int], rows: list
                ) -> Callable[[int], np.ndarray]:
        """A call of `encoder` over rows `group`, pinned to the version it is given."""
        feeds = self.front.feeds([rows[i] for i in group])
        channel = self.channels[encoder.name]

        def run(version: int) -> np.ndarray:
            with self.unlocked():  # other workers serve while this one computes
                return channel(feeds, version)

        return run

    def _channels(self) -> dict[str, Channel]:
        """Each encoder's channel, chosen once: in this process where a LocalEncoder runs
        it (the fallback loaded on the request path when a batch needs it first), else
        over BLS (python_backends/channels.py)."""
        channels: dict[str, Channel] = {}
        for role, encoder in self.encoders.items():
            bls = BlsChannel(encoder.name, encoder.output)
            local = self.local.get(encoder.name)
            ensure = (lambda: self._load_fallback()) if role == "fallback" else None
            channels[encoder.name] = bls if local is None else LocalChannel(local, bls, ensure)
        return channels

    def _load_fallback(self) -> bool:
        """Load the on-demand fallback now, once its served version is known."""
        fallback = self.encoders["fallback"]
        served = self.served.current.get(fallback.name, "?")
        if not served.isdigit():
            return False
        self.on_demand.wanted(FALLBACK_LEVEL, time.monotonic())
        return self.local[fallback.name].load(int(served))

    def _served_by(self, encoder: Encoder, level: Level, version: str) -> ServedBy:
        return ServedBy(encoder.name, version, encoder.precision, level.number)


def gathered(parts: dict[tuple[int, ...], np.ndarray], rows: int) -> np.ndarray:
    """The calls' outputs in row order."""
    if not parts:
        raise ModelError("the router planned no encoder call for a batch with rows")
    first = next(iter(parts.values()))
    out = np.empty((rows, *first.shape[1:]), dtype=first.dtype)
    for group, part in parts.items():
        out[list(group)] = part
    return out


def strings_array(values: list[str]) -> np.ndarray:
    """A [n, 1] BYTES output of strings (SERVED_BY)."""
    return np.array([v.encode() for v in values], dtype=np.object_).reshape(-1, 1)
