"""`tmr gate MODEL VERSION`: the release gate a candidate version must pass before promotion.

Fidelity: the candidate's embeddings of a fixed evaluation set (every 16th text of the
export corpus) against eager PyTorch and against the currently selected version, with
the cosine thresholds of the model's `gate_*` config parameters. Performance: candidate
and current in-process with the server's thread setting, interleaved in the same run;
refused if throughput falls below `gate_min_throughput_ratio` or p99 rises above
`gate_max_p99_ratio`. The result is written to `gate.json` in the candidate's folder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from server import versions as v

EVAL_STRIDE = 16
BATCH = 16
PERF_ROUNDS = 8
PERF_BATCH = 4  # the batches a served encoder sees at moderate load (docs/benchmarks.md)


@dataclass(frozen=True)
class GateSettings:
    mean_cosine: float
    min_cosine: float
    min_throughput_ratio: float
    max_p99_ratio: float

    @classmethod
    def from_config(cls, model_dir: Path) -> GateSettings:
        params = v.parse_config((model_dir / "config.pbtxt").read_text()).parameters

        def number(key: str, default: float) -> float:
            return float(params[key].string_value) if key in params else default

        return cls(number("gate_mean_cosine", 0.9999), number("gate_min_cosine", 0.999),
                   number("gate_min_throughput_ratio", 0.8), number("gate_max_p99_ratio", 1.5))


@dataclass
class GateResult:
    model: str
    candidate: int
    current: int | None
    settings: GateSettings
    fidelity: dict[str, dict[str, float]] = field(default_factory=dict)
    performance: dict[str, float] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.reasons

    def table(self) -> str:
        against = (f"against v{self.current}, the served version" if self.current is not None
                   else "against no other version: fidelity vs PyTorch only, speed not compared")
        rows = [f"gate {self.model} v{self.candidate} ({against}): "
                f"{'PASS' if self.passed else 'FAIL'}"]
        for against, stats in self.fidelity.items():
            rows.append(f"  cosine vs {against:<9} mean {stats['mean']:.5f}  "
                        f"min {stats['min']:.5f}  (need {self.settings.mean_cosine} / "
                        f"{self.settings.min_cosine})")
        for key, value in self.performance.items():
            rows.append(f"  {key:<26} {value:.3f}")
        rows += [f"  refused: {r}" for r in self.reasons]
        return "\n".join(rows)


def runner(artifact: Path, threads: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """An in-process forward function for an ONNX or TorchScript artifact."""
    if artifact.suffix == ".onnx":
        from python_backends.tensor_model import onnx_session

        session = onnx_session(str(artifact), threads)
        return lambda ids, mask: session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    import torch

    torch.set_num_threads(threads)
    module = torch.jit.load(str(artifact), map_location="cpu").eval()

    def forward(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()

    return forward


def evaluation_batches() -> list[tuple[np.ndarray, np.ndarray]]:
    from export.corpus import build_corpus
    from export.embedder import load_tokenizer
    from python_backends.tokenization import pad_batch

    texts = build_corpus()[::EVAL_STRIDE]
    tokenizer = load_tokenizer()
    # Length-sorted, so a batch pads little: the same texts at a fraction of the compute.
    rows = sorted((e.ids for e in tokenizer.encode_batch(texts)), key=len)
    return [pad_batch(rows[i:i + BATCH]) for i in range(0, len(rows), BATCH)]


def embed_all(fn: Callable, batches: list) -> np.ndarray:
    return np.concatenate([fn(ids, mask) for ids, mask in batches])


def reference(batches: list) -> np.ndarray:
    import torch

    from export.embedder import load_embedder

    model = load_embedder()
    with torch.inference_mode():
        return np.concatenate([model(torch.from_numpy(i), torch.from_numpy(m)).numpy()
                               for i, m in batches])


def timings(fns: dict[str, Callable], batches: list) -> dict[str, list[float]]:
    """Per function, seconds per batch, interleaved round by round (same noise for both)."""
    timing_batches = serving_batches(batches)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(PERF_ROUNDS):
        for name, fn in fns.items():
            for ids, mask in timing_batches:
                began = time.perf_counter()
                fn(ids, mask)
                times[name].append(time.perf_counter() - began)
    return times


def serving_batches(batches: list) -> list:
    """Eight batches of PERF_BATCH rows from the middle of the length range: the requests a
    served encoder typically sees, not the extremes."""
    from python_backends.tokenization import pad_batch

    middle = batches[len(batches) // 2]
    rows = [list(ids[mask == 1]) for ids, mask in zip(*middle)]
    return [pad_batch(rows[i:i + PERF_BATCH]) for i in range(0, len(rows), PERF_BATCH)] * 2


def artifact_of(model_dir: Path, version: int) -> Path:
    provenance = v.read_provenance(model_dir / str(version))
    return model_dir / str(version) / provenance["artifact"]["file"]


def run_gate(model_dir: Path, candidate: int, threads: int = 2) -> GateResult:
    from export.parity import fidelity

    settings = GateSettings.from_config(model_dir)
    result = GateResult(model_dir.name, candidate, v.gate_baseline(model_dir, candidate), settings)
    batches = evaluation_batches()
    fns = {"candidate": runner(artifact_of(model_dir, candidate), threads)}
    outputs = {"candidate": embed_all(fns["candidate"], batches), "reference": reference(batches)}
    if result.current is not None:
        fns["current"] = runner(artifact_of(model_dir, result.current), threads)
        outputs["current"] = embed_all(fns["current"], batches)
    for against in ("reference", "current"):
        if against in outputs:
            stats = fidelity(outputs[against], outputs["candidate"])
            result.fidelity[against] = {"mean": stats.mean, "min": stats.min}
            if stats.mean < settings.mean_cosine or stats.min < settings.min_cosine:
                result.reasons.append(f"fidelity vs {against}: mean {stats.mean:.5f} / min "
                                      f"{stats.min:.5f} under {settings.mean_cosine} / "
                                      f"{settings.min_cosine}")
    if "current" in fns:
        judge_performance(result, timings(fns, batches))
    (model_dir / str(candidate) / "gate.json").write_text(json.dumps(
        {**asdict(result), "passed": result.passed}, indent=1, default=str) + "\n")
    return result


def judge_performance(result: GateResult, times: dict[str, list[float]]) -> None:
    rate = {n: len(t) / sum(t) for n, t in times.items()}
    p99 = {n: float(np.percentile(t, 99)) for n, t in times.items()}
    result.performance = {"throughput_ratio": rate["candidate"] / rate["current"],
                          "p99_ratio": p99["candidate"] / p99["current"],
                          "candidate_batches_per_s": rate["candidate"],
                          "current_batches_per_s": rate["current"]}
    s = result.settings
    if result.performance["throughput_ratio"] < s.min_throughput_ratio:
        result.reasons.append(f"throughput {result.performance['throughput_ratio']:.2f}x the "
                              f"current version, under {s.min_throughput_ratio}x")
    if result.performance["p99_ratio"] > s.max_p99_ratio:
        result.reasons.append(f"p99 {result.performance['p99_ratio']:.2f}x the current "
                              f"version, over {s.max_p99_ratio}x")
