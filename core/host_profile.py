"""The host profile's rules: what `tmr tune` may choose for this host and how it chooses
(pure rules over measured values; the record it writes is core/tune_record.py).

The reviewed configs (`config.pbtxt`, in git) are portable defaults. What depends on the
host (a front's primary format, an encoder's precision, instances and threads) is written
by `tmr tune` as Triton variants, `configs/host.pbtxt` (git-ignored), served with
`--model-config-name=host`.

    layout_for(cores)                 instances and threads for the usable cores
    objective_for(p99s)               the one p99 every candidate is scored against
    choose(baseline, candidates, ...) the candidate that beats the reviewed configs by more
                                      than the rounds' own spread, within the memory ceiling
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from core.errors import CoreError
from core.hardware import host_cpu
from core.settings import WORKERS_PER_CORE, ThreadShare

# The whole server's RSS, a ceiling (docs/serving.md): one model, one process held the
# repository in 707 MiB after a mixed load (2026-12-07), 1,214-1,269 before.
DEFAULT_MEMORY_BUDGET_MB = 1024.0
MIN_MARGIN = 0.02  # a gain under 2% is never taken, however steady the rounds
MAX_ENCODER_INSTANCES = 4  # more instances than this buy less than more threads each
MAX_FRONT_INSTANCES = 8
LANE_MAX_THREADS = 4


class ProfileError(CoreError, RuntimeError):
    """A host profile that must not be served: absent where required, or stale."""

    exit_code = 2


# -- the host -------------------------------------------------------------------------------
def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The container's CPU quota in cores (cgroup v2 cpu.max or v1 cfs), None if none."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None


def usable_cores(affinity: int, quota: float | None) -> int:
    """The cores a server may use: its CPU affinity, bounded by a cgroup quota (rounded up:
    a quota of 1.5 lets two threads run)."""
    cores = max(1, affinity)
    return cores if quota is None else max(1, min(cores, math.ceil(quota)))


def host_cores() -> int:
    """The usable cores of this process: its affinity, bounded by its cgroup's quota."""
    return usable_cores(len(os.sched_getaffinity(0)), cgroup_cpu_limit())


def runtime_threads(setting: int) -> int:
    """An encoder's intra-op threads for its config's setting: 0 is every usable core."""
    return setting or host_cores()


def worker_count(setting: str, cores: int) -> int:
    """A front's bulk workers for its `worker_threads` setting on `cores` usable cores:
    one per core for "cores", else the count (0: none, execute serves)."""
    return max(1, cores) if setting == WORKERS_PER_CORE else int(setting)


def lane_threads(cores: int) -> int:
    """An interactive lane's threads on `cores` usable cores: half of them, at least one,
    at most LANE_MAX_THREADS (one text gains little from more). While the lane is
    saturated the shared path keeps the rest: on one core, nothing (docs/serving.md)."""
    return max(1, min(cores // 2, LANE_MAX_THREADS))


def in_process_threads(setting: ThreadShare, cores: int) -> int | None:
    """The threads of a front's in-process primary for its `in_process_threads` setting
    (core/settings.py) on `cores` usable cores; None: those of one encoder instance."""
    if setting.kind == "every_core":
        return cores
    if setting.kind == "lane":
        return lane_threads(cores)
    return setting.count if setting.kind == "fixed" else None


@dataclass(frozen=True)
class Host:
    """What a profile depends on: the CPU model, its relevant flags, the usable cores and
    the precision core.hardware's rule gives."""

    model: str
    flags: tuple[str, ...]
    cores: int
    precision: str

    @classmethod
    def current(cls) -> Host:
        cpu = host_cpu()
        cores = host_cores()
        return cls(str(cpu["model"]), tuple(cpu["flags"]), cores, str(cpu["precision"]))  # type: ignore[arg-type]

    def describe(self) -> str:
        return (f"{self.model}, {self.cores} usable core{'s' * (self.cores != 1)}, "
                f"{self.precision} ({' '.join(self.flags) or 'no relevant flags'})")


# -- the layout -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """Instances and threads of a model's encoders, and its front's instances."""

    encoder_instances: int
    encoder_threads: int
    front_instances: int
    idle_session: bool = True  # the encoders' second session for a lone request
    # Each front instance runs the primary's served version itself (python_backends/
    # in_process.py); the primary encoder model keeps one instance, for BLS calls.
    in_process: bool = False
    # Worker threads in each front instance, answering after execute returns
    # (python_backends/workers.py): one process, one copy of the weights, `front_workers`
    # batches at once, sharing `encoder_threads`. 0: execute serves.
    front_workers: int = 0

    def describe(self) -> str:
        idle = "" if self.idle_session or self.encoder_instances < 2 else ", no idle session"
        threads = (f"{self.encoder_threads} thread{'s' * (self.encoder_threads != 1)}"
                   if self.encoder_threads else "every core")
        if self.in_process and self.front_workers:
            return (f"primary in process: one front process, {self.front_workers} workers "
                    f"over one copy, {threads}")
        if self.in_process:
            return f"primary in process: front {self.front_instances} instances x {threads}"
        return (f"encoders {self.encoder_instances}x {threads}{idle}, "
                f"front {self.front_instances} instances")


def layout_for(cores: int) -> Layout:
    """One encoder instance per core up to MAX_ENCODER_INSTANCES, then more threads each;
    one front instance more than the cores (tokenizing overlaps the encoder calls), never
    fewer than two: one instance with priority queues stalls (docs/serving.md)."""
    instances = max(1, min(cores, MAX_ENCODER_INSTANCES))
    return Layout(instances, max(1, cores // instances),
                  max(2, min(cores + 1, MAX_FRONT_INSTANCES)))


# -- the choice -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Kind:
    """A way to serve a text front the tuner measures: its primary format, that encoder's
    precision, and the layout."""

    primary: str
    precision: str
    layout: Layout

    @property
    def name(self) -> str:
        return f"{self.primary} {self.precision} ({self.layout.describe()})"


@dataclass(frozen=True)
class Candidate:
    """One way to serve a model, measured through the real server: goodput per round
    (requests/s with p99 within the objective), the server's RSS, and the gate's verdict."""

    name: str
    primary: str  # the front's primary format
    precision: str  # the primary encoder's precision
    layout: Layout
    goodputs: tuple[float, ...] = ()  # round by round, interleaved with the baseline's
    rss_mb: float = 0.0
    gate_failure: str | None = None  # why its precision failed the fidelity gate
    reviewed: bool = False  # the reviewed configs themselves, the baseline of every ratio

    @property
    def goodput(self) -> float:
        return statistics.median(self.goodputs) if self.goodputs else 0.0


class Verdict(StrEnum):
    """What a tuning concluded for one front; the value is what `tmr serve` says of it."""

    SERVES = "chose a candidate"
    NOTHING_BETTER = "found nothing better on this host within the memory budget"
    NO_ROUNDS = "measured no round"
    ONE_ROUND = "measured one round only, which is no evidence: re-run `tmr tune`"
    NONE_MET = "no candidate met the objective at any concurrency"
    HOST_BUSY = "inconclusive: the host was busy, re-run `tmr tune`"


@dataclass(frozen=True)
class Decision:
    """What serves: the winner (the baseline when nothing beats it), the verdict and why."""

    chosen: Candidate
    verdict: Verdict
    reason: str
    ratios: dict[str, float] = field(default_factory=dict)  # candidate -> goodput / baseline
    noise: dict[str, float] = field(default_factory=dict)  # candidate -> its margin
    refused: dict[str, str] = field(default_factory=dict)  # candidate -> why not


def paired_ratios(baseline: Candidate, cand: Candidate) -> list[float]:
    """The candidate's goodput over the baseline's, round by round (the rounds interleave
    them, so a round's ratio saw one state of the shared machine); a round where the
    baseline scored 0 has no ratio and is left out."""
    return [c / b for b, c in zip(baseline.goodputs, cand.goodputs) if b > 0]


def gain_and_noise(ratios: Sequence[float], min_margin: float = MIN_MARGIN
                   ) -> tuple[float, float] | None:
    """(the median ratio, the margin it must beat 1 by): half the ratios' range, never
    under `min_margin`; None with fewer than two ratios (no spread to judge a gain by)."""
    if len(ratios) < 2:
        return None
    return statistics.median(ratios), max(min_margin, (max(ratios) - min(ratios)) / 2)


# What a server's RSS grows by between the tuner's reading (after its rounds and a bulk
# round) and a 5-minute mixed load of both families: the reviewed configs measured 1,227
# then 1,324 MB (+8%), on 2026-12-05 (docs/serving.md). A candidate must leave this room.
GROWTH_HEADROOM = 0.10


def memory_refusal(cand: Candidate, budget_mb: float,
                   headroom: float = GROWTH_HEADROOM) -> str | None:
    """Why the candidate's memory is refused, or None: the whole server must hold within
    the budget (docs/serving.md: the repository in 1 GiB) once a long mixed load has
    grown it by `headroom`, whatever it gains."""
    if cand.rss_mb * (1 + headroom) <= budget_mb:
        return None
    return (f"the server held {cand.rss_mb:.0f} MB RSS after its rounds, "
            f"{cand.rss_mb * (1 + headroom):.0f} with the {headroom:.0%} a long mixed load "
            f"adds: over the {budget_mb:.0f} MB budget")


def objective_for(reviewed_c1_p99_ms: Sequence[float], fixed_ms: float | None = None,
                  standard_ms: float = 60.0, headroom: float = 2.0) -> float:
    """The p99 every candidate is scored against: `fixed_ms` when given; else the standard
    objective, or, on a host where the reviewed configs' lone request (their p99 at the
    lowest concurrency, median over the rounds) leaves no room under it, `headroom` times
    that p99. Every candidate gets the same objective, so a slow host still compares them."""
    if fixed_ms is not None:
        return fixed_ms
    if not reviewed_c1_p99_ms:
        return standard_ms
    return max(standard_ms, headroom * statistics.median(reviewed_c1_p99_ms))


def choose(baseline: Candidate, candidates: Sequence[Candidate], budget_mb: float,
           min_margin: float = MIN_MARGIN, busy: str | None = None) -> Decision:
    """The candidate with the best median paired ratio, if that ratio beats 1 by more than
    the rounds' noise (gain_and_noise) and it passed its gate and memory_refusal; with
    nothing better the baseline (the reviewed configs) serves. `busy`: why the host was
    busy in rounds that had to be left out, when fewer than two clean rounds remained."""
    rounds = len(baseline.goodputs)
    if busy is not None and rounds < 2:
        return Decision(baseline, Verdict.HOST_BUSY,
                        f"{busy}; {rounds} clean round{'s' * (rounds != 1)} left, no "
                        "comparison: the reviewed configs serve")
    if rounds == 0:
        return Decision(baseline, Verdict.NO_ROUNDS,
                        "no round was measured: the reviewed configs serve")
    if not any(g > 0 for c in (baseline, *candidates) for g in c.goodputs):
        return Decision(baseline, Verdict.NONE_MET,
                        "no candidate met the objective at any concurrency, the reviewed "
                        "configs included (every score 0): they serve")
    if rounds == 1:
        return Decision(baseline, Verdict.ONE_ROUND,
                        "one round has no spread to judge a gain by: the reviewed configs "
                        "serve")
    refused: dict[str, str] = {}
    ratios: dict[str, float] = {}
    noise: dict[str, float] = {}
    for cand in candidates:
        judged = gain_and_noise(paired_ratios(baseline, cand), min_margin)
        if judged is not None:
            ratios[cand.name], noise[cand.name] = judged
        memory = memory_refusal(cand, budget_mb)
        if cand.gate_failure:
            refused[cand.name] = f"failed the fidelity gate: {cand.gate_failure}"
        elif judged is None:
            refused[cand.name] = ("the reviewed configs scored 0 in all but "
                                  f"{len(paired_ratios(baseline, cand))} round(s): no ratio "
                                  "to judge by")
        elif judged[0] < 1 - judged[1]:
            refused[cand.name] = f"{judged[0]:.2f}x the reviewed goodput: slower"
        elif judged[0] - 1 <= judged[1]:
            refused[cand.name] = (f"{judged[0]:.2f}x the reviewed goodput is within the "
                                  f"rounds' noise (+-{judged[1]:.0%})")
        elif memory:
            refused[cand.name] = memory
    winners = [c for c in candidates if c.name not in refused]
    if not winners:
        return Decision(baseline, Verdict.NOTHING_BETTER,
                        "no candidate beats the reviewed configs beyond the noise and within "
                        "the limits: they serve", ratios, noise, refused)
    best = max(winners, key=lambda c: ratios[c.name])
    return Decision(best, Verdict.SERVES,
                    f"{best.name} serves {ratios[best.name]:.2f}x the reviewed goodput "
                    f"(median of the rounds' ratios; {best.goodput:.0f} against "
                    f"{baseline.goodput:.0f} req/s at p99 within the objective), beyond the "
                    f"rounds' noise (+-{noise[best.name]:.0%})", ratios, noise, refused)
