"""`tmr gate MODEL VERSION`: the release gate a candidate version must pass before promotion.

Quality: the candidate's outputs on the family's evaluation set (its recipe's
`gate_batches`) against eager PyTorch and against the version served now (never the
candidate itself), judged by the family's metric with the model's `gate_*` config
parameters: for text embeddings, the mean and minimum row cosine; for image classifiers,
top-1 agreement and, where the set has labels, the accuracy points lost. Performance:
candidate and served version in-process with the server's thread setting, interleaved
in the same run on typical serving batches; refused if throughput falls below
`gate_min_throughput_ratio` or p99 rises above `gate_max_p99_ratio` (the median of the
ratios over four blocks of rounds: one stall of a shared machine is not a verdict;
rounds go on until each side has run for 2 s, so fast models get many samples). The
result is written to `gate.json` in the candidate's folder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from core import versions
from core.families import family
from core.families.configs import encoder_spec, parameters_of
from runtime.runners import Runner, artifact_runner

PERF_ROUNDS = 8  # at least; more until each runner has been timed for PERF_MIN_SECONDS
PERF_MIN_SECONDS = 2.0
PERF_MAX_ROUNDS = 400
PERF_BLOCKS = 4  # p99 is judged per block of rounds, then the median: one stall is not a verdict
PERF_BATCH = 4  # the batches a served encoder sees at moderate load (docs/benchmarks.md)


@dataclass(frozen=True)
class GateSettings:
    """The model's `gate_*` parameters as numbers."""

    quality: dict[str, float]  # the family metric's thresholds, e.g. gate_mean_cosine
    min_throughput_ratio: float
    max_p99_ratio: float

    @classmethod
    def from_params(cls, params: dict[str, str]) -> GateSettings:
        gates = {k: float(val) for k, val in params.items() if k.startswith("gate_")}
        return cls({k: val for k, val in gates.items()
                    if k not in ("gate_min_throughput_ratio", "gate_max_p99_ratio")},
                   gates.get("gate_min_throughput_ratio", 0.8),
                   gates.get("gate_max_p99_ratio", 1.5))


@dataclass
class GateResult:
    model: str
    candidate: int
    current: int | None
    settings: GateSettings
    quality: dict[str, dict[str, float]] = field(default_factory=dict)
    performance: dict[str, float] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.reasons

    def table(self) -> str:
        against = (f"against v{self.current}, the served version" if self.current is not None
                   else "against no other version: quality vs PyTorch only, speed not compared")
        rows = [f"gate {self.model} v{self.candidate} ({against}): "
                f"{'PASS' if self.passed else 'FAIL'}"]
        for other, stats in self.quality.items():
            figures = "  ".join(f"{k} {val:.5f}" for k, val in stats.items())
            rows.append(f"  vs {other:<9} {figures}  (need {self.settings.quality})")
        for key, value in self.performance.items():
            rows.append(f"  {key:<26} {value:.3f}")
        rows += [f"  refused: {r}" for r in self.reasons]
        return "\n".join(rows)


def outputs_of(run: Callable[[dict], dict], batches: list[dict], output: str) -> np.ndarray:
    return np.concatenate([run(feeds)[output] for feeds in batches])


def serving_batches(batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """Batches of PERF_BATCH rows cut from the middle evaluation batch: the requests a
    served encoder typically sees, not the extremes."""
    middle = batches[len(batches) // 2]
    rows = len(next(iter(middle.values())))
    return [{k: a[i:i + PERF_BATCH] for k, a in middle.items()}
            for i in range(0, rows, PERF_BATCH)] * 2


def timings(runs: dict[str, Runner], batches: list[dict]) -> dict[str, list[list[float]]]:
    """Per runner, per round, seconds per batch; interleaved round by round (same noise
    for both), for at least PERF_ROUNDS rounds and PERF_MIN_SECONDS per runner."""
    typical = serving_batches(batches)
    times: dict[str, list[list[float]]] = {name: [] for name in runs}
    spent = dict.fromkeys(runs, 0.0)
    rounds = 0
    while rounds < PERF_MAX_ROUNDS and (rounds < PERF_ROUNDS
                                        or min(spent.values()) < PERF_MIN_SECONDS):
        rounds += 1
        for name, run in runs.items():
            round_times = []
            for feeds in typical:
                began = time.perf_counter()
                run(feeds)
                round_times.append(time.perf_counter() - began)
            times[name].append(round_times)
            spent[name] += sum(round_times)
    return times


def block_p99_ratio(candidate: list[list[float]], current: list[list[float]],
                    blocks: int = PERF_BLOCKS) -> float:
    """The median over `blocks` consecutive runs of rounds of candidate p99 / current p99."""
    size = max(1, len(candidate) // blocks)
    ratios = []
    for start in range(0, size * blocks, size):
        a = [t for r in candidate[start:start + size] for t in r]
        b = [t for r in current[start:start + size] for t in r]
        if a and b:
            ratios.append(float(np.percentile(a, 99)) / float(np.percentile(b, 99)))
    return float(np.median(ratios))


def run_gate(model_dir: Path, candidate: int, threads: int = 2) -> GateResult:
    from export.pipeline import recipe_for

    config = versions.read_config(model_dir)
    params, spec = parameters_of(config), encoder_spec(config)
    fam = family(spec.family)
    settings = GateSettings.from_params(params)
    baseline = versions.gate_baseline(model_dir, candidate)
    result = GateResult(model_dir.name, candidate, baseline, settings)
    recipe = recipe_for(fam, spec.source, threads, model_dir.parent)
    inputs, output = recipe.contract.input_names, config.output[0].name
    batches = recipe.gate_batches()
    runtime = fam.format(spec.format).runtime

    def version_runner(version: int) -> Runner:
        return artifact_runner(versions.artifact_file(model_dir, version), runtime, threads, inputs,
                               [output], precision=spec.precision)

    runs = {"candidate": version_runner(candidate)}
    outputs = {"candidate": outputs_of(runs["candidate"], batches, output),
               "reference": outputs_of(recipe.eager, batches, recipe.contract.output_names[0])}
    if result.current is not None:
        runs["current"] = version_runner(result.current)
        outputs["current"] = outputs_of(runs["current"], batches, output)
    for against in ("reference", "current"):
        if against in outputs:
            stats, why = recipe.judge_quality(outputs[against], outputs["candidate"],
                                              settings.quality)
            result.quality[against] = stats
            if why:
                result.reasons.append(f"quality vs {against}: {why}")
    if "current" in runs:
        judge_performance(result, timings(runs, batches))
    (model_dir / str(candidate) / "gate.json").write_text(json.dumps(
        {**asdict(result), "passed": result.passed}, indent=1, default=str) + "\n")
    return result


def judge_performance(result: GateResult, times: dict[str, list[list[float]]]) -> None:
    flat = {n: [t for r in rounds for t in r] for n, rounds in times.items()}
    rate = {n: len(t) / sum(t) for n, t in flat.items()}
    result.performance = {"throughput_ratio": rate["candidate"] / rate["current"],
                          "p99_ratio": block_p99_ratio(times["candidate"], times["current"]),
                          "candidate_batches_per_s": rate["candidate"],
                          "current_batches_per_s": rate["current"],
                          "rounds": float(len(times["candidate"]))}
    s = result.settings
    if result.performance["throughput_ratio"] < s.min_throughput_ratio:
        result.reasons.append(f"throughput {result.performance['throughput_ratio']:.2f}x the "
                              f"current version, under {s.min_throughput_ratio}x")
    if result.performance["p99_ratio"] > s.max_p99_ratio:
        result.reasons.append(f"p99 {result.performance['p99_ratio']:.2f}x the current "
                              f"version, over {s.max_p99_ratio}x")


def precision_gate(model_dir: Path, precision: str, threads: int = 2
                   ) -> tuple[dict[str, float], str | None]:
    """The encoder's served version run at `precision` against eager PyTorch on the
    family's gate set, judged by its `gate_*` thresholds: (figures, why it fails or None).
    What `tmr tune` checks before it times a precision (core/host_profile.py)."""
    from export.pipeline import recipe_for

    config = versions.read_config(model_dir)
    spec, settings = encoder_spec(config), GateSettings.from_params(parameters_of(config))
    fam = family(spec.family)
    recipe = recipe_for(fam, spec.source, threads, model_dir.parent)
    version = versions.served_version(model_dir)
    if version is None:
        return {}, f"{model_dir.name} serves no version"
    output = config.output[0].name
    run = artifact_runner(versions.artifact_file(model_dir, version),
                          fam.format(spec.format).runtime, threads,
                          recipe.contract.input_names, [output], precision=precision)
    batches = recipe.gate_batches()
    return recipe.judge_quality(outputs_of(recipe.eager, batches, recipe.contract.output_names[0]),
                                outputs_of(run, batches, output), settings.quality)
