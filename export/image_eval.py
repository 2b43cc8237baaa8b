"""Running a classifier over preprocessed images; the figures, gates and latency of an export."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch

from export.errors import ExportCheckError
from export.image_data import batches
from export.image_nets import Gates
from export.inference import ort_session
from export.static_int8 import latency_ms
from python_backends.images import top_k

LogitsFn = Callable[[np.ndarray], np.ndarray]


def torch_logits(module: torch.nn.Module | torch.jit.ScriptModule) -> LogitsFn:
    """Logits of an eager or TorchScript module on a float32 [b, C, H, W] batch."""

    def run(inputs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(np.ascontiguousarray(inputs))).numpy()

    return run


def onnx_logits(session: ort.InferenceSession) -> LogitsFn:
    """Logits of an onnxruntime session whose one input takes [b, C, H, W]."""
    name = session.get_inputs()[0].name

    def run(inputs: np.ndarray) -> np.ndarray:
        return session.run(None, {name: np.ascontiguousarray(inputs)})[0]

    return run


def logits_of(fn: LogitsFn, inputs: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """float32 [N, classes] of every row, in order, in batches of batch_size."""
    return np.concatenate([fn(batch) for batch in batches(inputs, batch_size)], axis=0)


def top1_accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Share of rows whose arg-max is the label."""
    if len(logits) != len(labels) or len(labels) == 0:
        raise ValueError(f"{len(logits)} rows of logits for {len(labels)} labels")
    return float(np.mean(np.argmax(logits, axis=1) == labels))


def top1_agreement(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Share of rows where both predict the same class."""
    if reference.shape != candidate.shape or len(reference) == 0:
        raise ValueError(f"shape mismatch: {reference.shape} vs {candidate.shape}")
    return float(np.mean(reference.argmax(axis=1) == candidate.argmax(axis=1)))


def top1_in_top5(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Share of rows where the candidate's top-1 is among the reference's top-5."""
    top5 = np.argsort(-reference, axis=1, kind="stable")[:, :5]
    return float(np.mean(np.any(top5 == candidate.argmax(axis=1)[:, None], axis=1)))


def disagreements(names: Sequence[str], reference: np.ndarray, candidate: np.ndarray,
                  labels: Sequence[str]) -> list[dict[str, str]]:  # fmt: skip
    """The rows whose top-1 differ, with both labels."""
    ref, cand = reference.argmax(axis=1), candidate.argmax(axis=1)
    return [{"image": names[i], "fp32": labels[ref[i]], "int8": labels[cand[i]]}
            for i in np.flatnonzero(ref != cand)]  # fmt: skip


def top5_table(logits: np.ndarray, labels: Sequence[str]) -> list[list[Any]]:
    """[[class id, label, probability rounded to 4 places], ...] best first, for one row."""
    ids, names, probs = top_k(logits, 5, labels)
    return [[int(i), str(n), round(float(p), 4)] for i, n, p in zip(ids, names, probs)]


def sanity_report(names: Sequence[str], logits: dict[str, np.ndarray], labels: Sequence[str],
                  expected: dict[str, tuple[int, ...]]) -> dict[str, Any]:  # fmt: skip
    """Per photo: expected ids, and per runtime its top-5 and whether top-1 is expected."""
    report: dict[str, Any] = {}
    for row, name in enumerate(names):
        entry: dict[str, Any] = {"expected": [labels[i] for i in expected[name]]}
        for runtime, values in logits.items():
            table = top5_table(values[row], labels)
            entry[f"{runtime}_top5"] = table
            if expected[name]:
                entry[f"{runtime}_top1_expected"] = table[0][0] in expected[name]
        report[name] = entry
    return report


def check_gates(gates: Gates, figures: dict[str, Any]) -> None:
    """Raise ExportCheckError for the first gate the figures miss."""
    accuracy, agreement = figures.get("accuracy", {}), figures.get("agreement", {})
    if gates.min_fp32_top1 is not None:
        for runtime in ("eager_top1", "onnx_fp32_top1"):
            if not accuracy[runtime] >= gates.min_fp32_top1:
                raise ExportCheckError(runtime, accuracy[runtime], f">= {gates.min_fp32_top1}")
    if gates.max_int8_top1_drop is not None and not (
        accuracy["int8_top1_drop"] <= gates.max_int8_top1_drop
    ):
        raise ExportCheckError("int8 top-1 drop vs FP32 ONNX", accuracy["int8_top1_drop"],
                               f"<= {gates.max_int8_top1_drop}")  # fmt: skip
    if gates.min_int8_agreement is not None and not (
        agreement["int8_top1_agreement"] >= gates.min_int8_agreement
    ):
        raise ExportCheckError("int8 top-1 agreement with FP32", agreement["int8_top1_agreement"],
                               f">= {gates.min_int8_agreement}", f"n={agreement['n']}")  # fmt: skip
    if gates.sanity_top1:
        for photo, entry in figures.get("sanity", {}).items():
            for key, ok in entry.items():
                if key.endswith("_top1_expected") and not ok:
                    got = entry[key.replace("_top1_expected", "_top5")][0][1]
                    raise ExportCheckError(f"sanity {photo} {key}", got, entry["expected"])


def compare_latency(paths: dict[str, Path], inputs: np.ndarray, rounds: int = 3) -> dict[str, Any]:
    """Median ms per run at batch 1 and 8, one intra-op thread, sessions interleaved per round."""
    sessions = {name: ort_session(path, 1) for name, path in paths.items()}
    samples: dict[str, list[float]] = {f"{n}_b{b}": [] for n in sessions for b in (1, 8)}
    for _ in range(rounds):
        for name, session in sessions.items():
            for b, runs in ((1, 10), (8, 3)):
                samples[f"{name}_b{b}"].append(latency_ms(session, inputs[:b], runs))
    return {"threads": 1, "load_average_1m": round(os.getloadavg()[0], 2),
            **{k: round(float(np.median(v)), 2) for k, v in samples.items()}}  # fmt: skip
