"""`embed`: TEXT in, sentence EMBEDDING and SERVED_BY out; the degradation router.

Validates and tokenizes every request of a dynamic batch, then serves the valid ones at
the current degradation level (python_backends/degradation.py): the batch to the primary
encoder when all is well, one BLS call per length bucket (`length_bucket_waste`); smaller
calls, the CPU INT8 fallback and cached answers as pressure rises, UNAVAILABLE only when
an operator says so. Priority is Triton's business: its queues serve level 1 first. A
primary that is gone (unloaded, dead stub) fails over to the fallback within the batch.
Every row says what served it in SERVED_BY: "<model>:<version>:<precision>:L<level>".
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from python_backends import contracts
from python_backends.base import error_response, ok_response
from python_backends.batching import length_buckets, split_outputs
from python_backends.bls import bls_infer, failure_reason
from python_backends.degradation import (
    DegradationPolicy,
    EmbeddingCache,
    Level,
    PolicySettings,
    Transition,
    ladder,
    throttled,
)
from python_backends.errors import ChildModelError, ModelError, UnavailableError
from python_backends.metrics import Counter, CounterFamily, Gauge
from python_backends.params import one_of, parameter
from python_backends.queues import queue_capacities
from python_backends.text_model import TextModel, TextRequest
from python_backends.tokenization import pad_batch

MEMORY_SAMPLE_S = 0.5  # how stale the memory signal may be
PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20
OUT_OF_SERVICE = "out of service"


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


_SPECIFIC = re.compile(r"specific\s*:?\s*\{\s*versions\s*:\s*\[?\s*([\d,\s]+)\]?")


def served_version(model_dir: Path) -> str:
    """The version a model serves: its `specific` version_policy (what `tmr promote` and
    `tmr rollback` write), else the highest version folder, as `latest` picks."""
    on_disk = [int(p.name) for p in model_dir.iterdir() if p.name.isdigit()]
    config = model_dir / "config.pbtxt"
    match = _SPECIFIC.search(config.read_text()) if config.exists() else None
    if match:
        on_disk = [int(n) for n in re.findall(r"\d+", match.group(1)) if int(n) in on_disk]
    return str(max(on_disk)) if on_disk else "?"


class EmbedModel(TextModel):
    """Tokenizer + degradation ladder over the primary and fallback encoders."""

    def setup(self, args: dict[str, str]) -> None:
        super().setup(args)
        choice = one_of(*contracts.ENCODER_MODELS)
        self.encoders = {
            "primary": parameter(self.config, "primary_model", "minilm_onnx", choice),
            "fallback": parameter(self.config, "fallback_model", "minilm_int8", choice),
        }
        self.settings = PolicySettings.from_config(self.config)
        self.levels = ladder(self.settings.small_batch_rows)
        self.policy = DegradationPolicy(self.settings, since=time.monotonic())
        self.cache = EmbeddingCache(parameter(self.config, "cache_entries", 4096, int))
        self.max_batch = max(int(self.config.get("max_batch_size", 1)), 1)
        self._versions: dict[str, tuple[float, str]] = {}
        # GPU memory in use where NVML sees a GPU (the encoders live there), else this RSS.
        self.memory_mb = throttled(gpu_memory_reader() or rss_mb, MEMORY_SAMPLE_S, time.monotonic)
        # Rows of one batch are sent to the encoder in groups of similar length, so padding
        # wastes at most this share of real tokens; -1 pads the whole batch as one call.
        self.bucket_waste = parameter(self.config, "length_bucket_waste", -1.0, float)
        base = {"model": self.name}
        instance = args.get("model_instance_name", "0")
        self.level_gauge = Gauge("tmr_degradation_level", "Current degradation level of embed",
                                 {**base, "instance": instance})
        self.level_gauge.set(self.policy.level)
        self.transitions = CounterFamily("tmr_degradation_transitions_total",
                                         "Degradation level changes", base)
        self.fallbacks = CounterFamily("tmr_degradation_fallbacks_total",
                                       "Encoder failures that sent a batch elsewhere, by reason",
                                       base)
        self.cache_hits = Counter("tmr_router_cache_hits_total",
                                  "Texts answered from the router's cache", base)
        self.rejections = CounterFamily("tmr_rejections_total",
                                        "Requests refused by the router, by reason", base)
        self._export_queue_capacity(base)
        self.log.info(f"encoders {self.encoders}, policy {self.settings}")

    def _export_queue_capacity(self, base: dict[str, str]) -> None:
        """`tmr_queue_capacity` per priority from this model's own queue policies, and the
        rejection counter at zero, so rates and ratios exist at once."""
        self.queue_capacity = []  # kept: a metric goes away with its Python object
        for priority, size in queue_capacities(self.config).items():
            gauge = Gauge("tmr_queue_capacity", "max_queue_size of the model's queue, per priority",
                          {**base, "priority": priority})
            gauge.set(size)
            self.queue_capacity.append(gauge)
        self.rejections.inc(0, reason=OUT_OF_SERVICE)

    def degradation_level(self) -> int | None:
        return self.policy.level

    # -- the ladder -------------------------------------------------------------------
    def current_level(self) -> Level:
        self.policy.observe_memory(self.memory_mb())
        self._record(self.policy.decide(time.monotonic()))
        return self.levels[self.policy.level]

    def _record(self, transition: Transition | None) -> None:
        if transition is None:
            return
        self.transitions.inc(**{"from": str(transition.old), "to": str(transition.new)})
        self.level_gauge.set(transition.new)
        self.log.warning(f"degradation level {transition.old} -> {transition.new}: "
                         f"{transition.reason}")

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        level = self.current_level()
        responses, valid = self.tokenize_requests(requests)
        self.policy.observe_batch([len(r.rows) for r in valid.values()], self.max_batch)
        if level.encoder is None:
            for i in valid:
                responses[i] = self._refuse(level, OUT_OF_SERVICE)
            return responses
        if level.use_cache:
            valid = self._answer_from_cache(valid, responses)
        if valid:
            self._encode(level, valid, responses)
        return responses

    def _refuse(self, level: Level, reason: str) -> Any:
        self.rejections.inc(reason=reason)
        return error_response(UnavailableError(
            f"embed is degraded to level {level.number} ({level.name}): {reason}"))

    def _answer_from_cache(self, valid: dict[int, TextRequest],
                           responses: list[Any]) -> dict[int, TextRequest]:
        """Answer the requests whose texts are all cached; return the others."""
        misses = {}
        for i, request in valid.items():
            hits = [self.cache.get(t) for t in request.texts]
            if any(h is None for h in hits):
                misses[i] = request
                continue
            self.cache_hits.inc(len(hits))
            responses[i] = ok_response({
                contracts.EMBEDDING_OUTPUT: np.stack([h[0] for h in hits]),
                contracts.SERVED_BY_OUTPUT: served_by_array([f"{h[1]}:cached" for h in hits]),
            })
        return misses

    # -- encoding ---------------------------------------------------------------------
    def _encode(self, level: Level, valid: dict[int, TextRequest],
                responses: list[Any]) -> None:
        rows = [row for request in valid.values() for row in request.rows]
        try:
            embeddings, served = self._run_level(level, rows)
        except ModelError as err:
            for i in valid:
                responses[i] = error_response(err)
            return
        sizes = [len(request.rows) for request in valid.values()]
        parts = split_outputs({contracts.EMBEDDING_OUTPUT: embeddings}, sizes)
        for (i, request), part in zip(valid.items(), parts):
            for text, vector in zip(request.texts, part[contracts.EMBEDDING_OUTPUT]):
                self.cache.put(text, vector, served)
            part[contracts.SERVED_BY_OUTPUT] = served_by_array([served] * len(request.texts))
            responses[i] = ok_response(part)

    def _run_level(self, level: Level, rows: list[list[int]]) -> tuple[np.ndarray, str]:
        """Embeddings from the level's encoder; a vanished primary fails over at once."""
        name = self.encoders[level.encoder or "fallback"]
        try:
            return self._call(name, rows, level.max_rows), self._served_by(name, level)
        except ChildModelError as err:
            self.fallbacks.inc(reason=failure_reason(err.child_message))
            self.policy.observe_failure()
            if err.code != "UNAVAILABLE" or name == self.encoders["fallback"]:
                raise
            self._record(self.policy.fail_over(f"primary {name} failed: {err.child_message}",
                                               time.monotonic()))
            fallback = self.encoders["fallback"]
            return self._call(fallback, rows, None), self._served_by(fallback, self.levels[2])

    def _call(self, name: str, rows: list[list[int]], max_rows: int | None) -> np.ndarray:
        """The batch through `name`, in length buckets of at most `max_rows` rows."""
        out: np.ndarray | None = None
        for group in length_buckets([len(r) for r in rows], self.bucket_waste, max_rows):
            ids, mask = pad_batch([rows[i] for i in group], self.encoder.pad_id)
            part = self.call_encoder(name, dict(zip(contracts.ENCODER_INPUTS, (ids, mask))))
            if out is None:
                out = np.empty((len(rows), *part.shape[1:]), dtype=part.dtype)
            out[group] = part
        self.policy.observe_success()
        assert out is not None, "a batch has at least one row"
        return out

    def call_encoder(self, name: str, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """One encoder call: BLS (the bare benchmark fixture overrides it)."""
        output = contracts.ENCODER_OUTPUTS[name]
        return bls_infer(name, feeds, [output])[output]

    def _served_by(self, name: str, level: Level) -> str:
        return f"{name}:{self._version(name)}:{contracts.PRECISION[name]}:L{level.number}"

    def _version(self, name: str) -> str:
        """The encoder's served version, re-read from its folder at most once a second."""
        now = time.monotonic()
        cached = self._versions.get(name)
        if cached is None or now - cached[0] > 1.0:
            cached = (now, served_version(self.model_dir.parent / name))
            self._versions[name] = cached
        return cached[1]


def served_by_array(values: list[str]) -> np.ndarray:
    return np.array([v.encode() for v in values], dtype=np.object_).reshape(-1, 1)
