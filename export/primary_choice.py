"""Which encoder a front calls normally: the fastest format that passes the FP32 gate, by
measurement on this host.

Candidates are the family's formats gated at FP32 fidelity (ONNX, TorchScript, OpenVINO at
the host's precision; not INT8, the degradation fallback). Each runs in-process with the
export's threads on the same typical batch (the middle batch of the recipe's gate set,
repeated to the size), interleaved round by round so that a stall of a shared machine
hits every format alike. The batch sizes are those the latency objective allows: 1 and
each size whose call on the family's default primary fits P99_OBJECTIVE_MS. A format's
score is the geometric mean of its rate over the default's at those sizes; the best score
wins, but only by more than MARGIN: a smaller lead is within this machine's noise and
keeps the family's default, so the routing does not flap between two exports.

The table, the scores, the rule and the host's CPU go to `<front>/primary_choice.json`
(host-specific, not versioned); `tmr add --primary FORMAT` and `tmr export --primary`
override the measurement, `tmr export --keep-primary` measures without rewiring.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from core.families import Family
from core.families.catalog import FamilyModel
from core.families.configs import encoder_spec, front_spec, write_front
from core.files import write_atomically
from core.hardware import host_cpu
from core.paths import P99_OBJECTIVE_MS
from core.versions import artifact_file, read_config
from export.recipe import ExportRecipe
from python_backends.runners import Runner, artifact_runner

MARGIN = 0.05  # a challenger must be this much faster than the default to replace it
SPEED_BATCHES = {"text_embedding": (1, 8, 32), "image_classification": (1, 4, 16)}
CELL_SECONDS = 0.4  # time per format, batch and round
ROUNDS = 3
WARMUP_CALLS = 3
CHOICE_FILE = "primary_choice.json"


@dataclass(frozen=True)
class Choice:
    """The measured rates, the scores, what won and why."""

    primary: str
    reason: str
    rates: dict[str, dict[int, float]]  # format -> batch -> rows/s
    scores: dict[str, float] = field(default_factory=dict)  # geometric mean vs the default
    batches: list[int] = field(default_factory=list)
    cpu: dict[str, Any] = field(default_factory=dict)


def candidates(fam: Family) -> list[str]:
    """The formats gated at FP32 fidelity: those whose precision class is fp32."""
    return [f.name for f in fam.formats if f.precision == "fp32"]


def allowed_batches(default_rates: Mapping[int, float], budget_ms: float) -> list[int]:
    """Batch 1, and each batch whose call on the default primary fits the objective."""
    return sorted({1} | {b for b, rate in default_rates.items()
                         if rate > 0 and b / rate * 1000 <= budget_ms})


def choose(rates: Mapping[str, Mapping[int, float]], default: str, budget_ms: float,
           margin: float = MARGIN) -> tuple[str, dict[str, float], list[int], str]:
    """(primary, scores, batches, reason) from measured rates (pure: see the module)."""
    if default not in rates:
        raise ValueError(f"the default format {default!r} was not measured")
    batches = allowed_batches(rates[default], budget_ms)
    scores = {}
    for fmt, by_batch in rates.items():
        ratios = [by_batch.get(b, 0.0) / rates[default][b] for b in batches]
        scores[fmt] = (math.exp(sum(math.log(r) for r in ratios) / len(ratios))
                       if all(r > 0 for r in ratios) else 0.0)
    best = max(scores, key=lambda f: (scores[f], f == default))
    if best != default and scores[best] > 1 + margin:
        return best, scores, batches, (f"{best} is {scores[best]:.2f}x {default} at batches "
                                       f"{batches} (more than the {margin:.0%} margin)")
    runner_up = max((f for f in scores if f != default), key=scores.get, default=default)
    return default, scores, batches, (
        f"no format beats {default} by more than {margin:.0%} at batches {batches} "
        f"(best other: {runner_up} at {scores[runner_up]:.2f}x)")


def sized(feeds: Mapping[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """`feeds` cut or repeated to `rows` rows."""
    have = len(next(iter(feeds.values())))
    reps = -(-rows // have)
    return {k: np.ascontiguousarray(np.concatenate([v] * reps)[:rows]) for k, v in feeds.items()}


def measure(runs: Mapping[str, Runner], feeds: Mapping[str, np.ndarray],
            batches: Sequence[int], rounds: int = ROUNDS,
            cell_s: float = CELL_SECONDS) -> dict[str, dict[int, float]]:
    """rows/s of each runner at each batch: the median call time over interleaved rounds."""
    times: dict[tuple[str, int], list[float]] = {(f, b): [] for f in runs for b in batches}
    inputs = {b: sized(feeds, b) for b in batches}
    for run in runs.values():  # warm up: first calls allocate, compile and (TorchScript's
        for b in batches:      # profiling executor) optimise
            for _ in range(WARMUP_CALLS):
                run(inputs[b])
    for _ in range(rounds):
        for b in batches:
            for name, run in runs.items():
                end = time.perf_counter() + cell_s
                while True:
                    began = time.perf_counter()
                    run(inputs[b])
                    times[name, b].append(time.perf_counter() - began)
                    if time.perf_counter() > end:
                        break
    return {f: {b: b / float(np.median(times[f, b])) for b in batches} for f in runs}


def served_runner(repository: Path, model: FamilyModel, fmt: str, threads: int,
                  precision: str | None = None) -> Runner:
    """The format's served version in-process, as its backend runs it (at `precision`, by
    default its config's), with its one output named as the family's (TorchScript's
    suffix dropped)."""
    fam, folder = model.family, repository / model.encoder(fmt)
    output = fam.encoder_output.name
    run = artifact_runner(artifact_file(folder), fam.format(fmt).runtime, threads,
                          [t.name for t in fam.encoder_inputs],
                          [output + fam.format(fmt).output_suffix],
                          precision=precision or encoder_spec(read_config(folder)).precision)

    def call(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {output: next(iter(run(feeds).values()))}

    return call


def measure_model(repository: Path, model: FamilyModel, recipe: ExportRecipe,
                  threads: int) -> Choice:
    """Measure the model's FP32-gated formats on this host and apply the rule."""
    fam = model.family
    runs = {f: served_runner(repository, model, f, threads)
            for f in candidates(fam) if f in model.encoders}
    batches = recipe.gate_batches()
    rates = measure(runs, batches[len(batches) // 2], SPEED_BATCHES.get(fam.name, (1, 8)))
    primary, scores, allowed, reason = choose(rates, fam.primary, P99_OBJECTIVE_MS)
    return Choice(primary, reason, rates, scores, allowed, host_cpu())


def check_primary(fam: Family, fmt: str) -> None:
    """ValueError unless `fmt` may be a primary: a format of the family gated at FP32."""
    if fmt not in candidates(fam):
        raise ValueError(f"--primary {fmt}: the primary must be a format gated at FP32 "
                         f"fidelity, one of {', '.join(candidates(fam))}")


def override(model: FamilyModel, fmt: str) -> Choice:
    """An operator's choice (--primary), checked against the model's formats."""
    check_primary(model.family, fmt)
    if fmt not in model.encoders:
        raise ValueError(f"--primary {fmt}: {model.base} has no such encoder; it has "
                         f"{', '.join(sorted(model.encoders))}")
    return Choice(fmt, "chosen by the operator (--primary)", {}, cpu=host_cpu())


def wire(repository: Path, model: FamilyModel, choice: Choice, rewire: bool = True) -> bool:
    """Point the front's primary_model at the choice (unless not `rewire`); True when the
    config changed. The choice's record goes beside the front's config."""
    assert model.front is not None
    record = {**asdict(choice), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "objective_ms": P99_OBJECTIVE_MS, "margin": MARGIN,
              "default": model.family.primary}
    write_atomically(repository / model.front / CHOICE_FILE,
                     json.dumps(record, indent=1, default=float) + "\n")
    spec = front_spec(read_config(repository / model.front))
    wanted = None if choice.primary == model.family.primary else choice.primary
    if spec.primary == wanted or not rewire:
        return False
    write_front(repository, replace(spec, primary=wanted))
    return True


def table(choice: Choice) -> str:
    """The measured rates as a markdown table, relative to the default's."""
    if not choice.rates:
        return f"primary: {choice.primary} ({choice.reason})"
    batches = sorted(next(iter(choice.rates.values())))
    default = next(iter(choice.rates))
    lines = ["| format | " + " | ".join(f"batch {b}" for b in batches) + " | score |",
             "| --- |" + " ---: |" * (len(batches) + 1)]
    for fmt, by_batch in choice.rates.items():
        cells = [f"{by_batch[b]:.0f}/s" if fmt == default
                 else f"{by_batch[b] / choice.rates[default][b]:.2f}x" for b in batches]
        lines.append(f"| {fmt} | " + " | ".join(cells) + f" | {choice.scores.get(fmt, 0):.2f} |")
    return "\n".join(lines) + f"\n\nprimary: {choice.primary}: {choice.reason}"
