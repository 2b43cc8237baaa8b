"""Export all-MiniLM-L6-v2 into Triton's versioned model folders: ONNX, TorchScript and INT8.

Each format is built in `<model_dir>/.tmp-<pid>`, checked, given a provenance.json and only then
renamed to the next integer version, so Triton never sees a half-written version.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch

from export import onnx_fp32, quantize, torchscript
from export.corpus import build_corpus, corpus_sha256, parity_batches
from export.embedder import SentenceEmbedder, load_embedder, load_tokenizer, weights_path
from export.errors import ExportCheckError
from export.inference import EmbedFn, embed_texts, encode, onnx_fn, ort_session, torch_fn
from export.layout import (
    ARTIFACTS,
    DEFAULT_REPOSITORY,
    FORMATS,
    INT8_MIN_COSINE,
    INT8_MIN_MEAN_COSINE,
    MODEL_NAMES,
    PARITY_MAX_ABS_DIFF,
)
from export.parity import check_fidelity, check_max_abs_diff, fidelity, max_abs_diff
from export.provenance import build_provenance, source_fingerprint, tool_versions
from export.versions import is_up_to_date, next_version, sha256_file, write_provenance
from server.versions import pin_served_version

log = logging.getLogger(__name__)

# Bump when the export recipe changes in a way the fingerprint would not otherwise see.
RECIPE_VERSION = 1


@dataclass(frozen=True)
class ExportResult:
    """What happened to one model: written as a new version, or already up to date."""

    model_name: str
    version: int
    action: str  # "written" | "up to date"
    path: Path
    figures: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        """One line for humans: name, version, action and key figures."""
        figures = " ".join(f"{k}={v}" for k, v in self.figures.items())
        action = self.action if self.action == "written" else f"up to date (version {self.version})"
        return f"{self.model_name:<20} v{self.version:<3} {action:<22} {figures}".rstrip()


def format_settings(export_format: str) -> dict[str, Any]:
    """Settings that, with weights and tools, determine the artifact of a format."""
    onnx_settings = onnx_fp32.export_settings()
    settings: dict[str, Any] = {"recipe": RECIPE_VERSION, "embedder": "mean-pool+l2norm"}
    if export_format == "onnx":
        return {**settings, "onnx": onnx_settings}
    if export_format == "torchscript":
        return {**settings, "torchscript": torchscript.export_settings()}
    if export_format == "int8":
        return {
            **settings,
            "onnx": onnx_settings,
            "quantization_candidates": [v.settings() for v in quantize.VARIANTS],
            "thresholds": {"mean_cosine": INT8_MIN_MEAN_COSINE, "min_cosine": INT8_MIN_COSINE},
        }
    raise ValueError(f"unknown export format {export_format!r}; expected one of {FORMATS}")


def _opset(export_format: str) -> int | None:
    return None if export_format == "torchscript" else onnx_fp32.OPSET


class _Session:
    """Inputs shared by all formats of one run, loaded only when an export is needed."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.weights = weights_path()
        self.weights_sha256 = sha256_file(self.weights)
        self.tools = tool_versions()

    def fingerprint(self, export_format: str) -> str:
        return source_fingerprint(
            self.weights_sha256,
            export_format,
            _opset(export_format),
            self.tools,
            format_settings(export_format),
        )

    @cached_property
    def embedder(self) -> SentenceEmbedder:
        return load_embedder()

    @cached_property
    def tokenizer(self) -> Any:
        return load_tokenizer()

    @cached_property
    def corpus(self) -> list[str]:
        # Length-sorted, so corpus batches carry little padding (fast); order is deterministic.
        return sorted(build_corpus(), key=lambda t: (len(t), t))

    @cached_property
    def sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask = encode(self.tokenizer, parity_batches(self.corpus)[1])
        return torch.from_numpy(ids), torch.from_numpy(mask)


def check_parity(session: _Session, candidate: EmbedFn, name: str) -> dict[str, float]:
    """Max abs diff vs eager PyTorch on each parity batch; raise if any exceeds the threshold."""
    eager = torch_fn(session.embedder)
    diffs: dict[str, float] = {}
    for batch in parity_batches(session.corpus):
        ids, mask = encode(session.tokenizer, batch)
        case = f"batch{ids.shape[0]}x{ids.shape[1]}"
        diffs[case] = max_abs_diff(eager(ids, mask), candidate(ids, mask))
        check_max_abs_diff(f"{name} {case}", diffs[case], PARITY_MAX_ABS_DIFF)
    return diffs


def _build_onnx(session: _Session, work: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    path = work / ARTIFACTS["onnx"]
    onnx_fp32.export_onnx(session.embedder, path, session.sample)
    onnx_fp32.verify_onnx(path)
    diffs = check_parity(session, onnx_fn(ort_session(path, session.threads)), "onnx")
    checks = {"parity_max_abs_diff": diffs, "thresholds": {"max_abs_diff": PARITY_MAX_ABS_DIFF}}
    return checks, {"max_abs_diff": f"{max(diffs.values()):.2e}"}


def _build_torchscript(session: _Session, work: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    path = work / ARTIFACTS["torchscript"]
    torchscript.export_torchscript(session.embedder, path, session.sample)
    module = torchscript.load_torchscript(path)
    diffs = check_parity(session, torch_fn(module), "torchscript")
    checks = {"parity_max_abs_diff": diffs, "thresholds": {"max_abs_diff": PARITY_MAX_ABS_DIFF}}
    return checks, {"max_abs_diff": f"{max(diffs.values()):.2e}"}


def _try_variant(
    session: _Session, fp32: Path, reference: np.ndarray, variant: quantize.QuantVariant, out: Path
) -> dict[str, Any]:
    """Quantize with one variant and measure it; the attempt record carries `passed`."""
    quantize.quantize_int8(fp32, out, variant)
    onnx_fp32.verify_onnx(out)
    int8 = ort_session(out, session.threads)
    stats = fidelity(reference, embed_texts(onnx_fn(int8), session.tokenizer, session.corpus))
    attempt: dict[str, Any] = {
        "variant": variant.settings(),
        "fidelity": stats.as_dict(),
        "size_bytes": out.stat().st_size,
        "latency_ms_b16_t32": round(quantize.latency_ms(int8), 2),
    }
    try:
        check_fidelity(f"int8 {variant.name}", stats, INT8_MIN_MEAN_COSINE, INT8_MIN_COSINE)
        attempt["passed"] = True
    except ExportCheckError as exc:
        attempt["passed"], attempt["failure"] = False, str(exc)
    log.info("int8 %s: %s", variant.name, attempt)
    return attempt


def _build_int8(session: _Session, work: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    fp32, target = work / "fp32.onnx", work / ARTIFACTS["int8"]
    onnx_fp32.export_onnx(session.embedder, fp32, session.sample)
    onnx_fp32.verify_onnx(fp32)
    fp32_session = ort_session(fp32, session.threads)
    diffs = check_parity(session, onnx_fn(fp32_session), "int8 reference onnx")
    reference = embed_texts(onnx_fn(fp32_session), session.tokenizer, session.corpus)
    baseline = {"size_bytes": fp32.stat().st_size,
                "latency_ms_b16_t32": round(quantize.latency_ms(fp32_session), 2)}  # fmt: skip
    attempts = []
    for variant in quantize.VARIANTS:
        attempts.append(_try_variant(session, fp32, reference, variant, target))
        if attempts[-1]["passed"]:
            break
        target.unlink()
    else:
        best = max(attempts, key=lambda a: a["fidelity"]["mean"])
        raise ExportCheckError(
            "int8 fidelity (every variant)", best["fidelity"],
            {"mean": INT8_MIN_MEAN_COSINE, "min": INT8_MIN_COSINE}, best["failure"],
        )  # fmt: skip
    fp32.unlink()
    chosen = attempts[-1]
    checks = {
        "reference_parity_max_abs_diff": diffs,
        "fidelity_vs_fp32_onnx": chosen["fidelity"],
        "corpus": {"n": len(session.corpus), "sha256": corpus_sha256(session.corpus)},
        "thresholds": {"mean_cosine": INT8_MIN_MEAN_COSINE, "min_cosine": INT8_MIN_COSINE},
        "quantization": {"chosen": chosen["variant"]["name"], "attempts": attempts,
                         "fp32_baseline": baseline},
    }  # fmt: skip
    stats = chosen["fidelity"]
    figures = {
        "variant": chosen["variant"]["name"],
        "cos_mean": f"{stats['mean']:.4f}", "cos_min": f"{stats['min']:.4f}",
        "cos_p01": f"{stats['p01']:.4f}", "n": stats["n"],
        "latency_ms": f"{chosen['latency_ms_b16_t32']}(fp32 {baseline['latency_ms_b16_t32']})",
    }  # fmt: skip
    return checks, figures


_BUILDERS: dict[str, Callable[[_Session, Path], tuple[dict[str, Any], dict[str, Any]]]] = {
    "onnx": _build_onnx,
    "torchscript": _build_torchscript,
    "int8": _build_int8,
}


def _export_format(session: _Session, repository: Path, export_format: str) -> ExportResult:
    """Build, check and publish one new version of a format."""
    name = MODEL_NAMES[export_format]
    model_dir = repository / name
    model_dir.mkdir(parents=True, exist_ok=True)
    work = model_dir / f".tmp-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    started = time.perf_counter()
    try:
        checks, figures = _BUILDERS[export_format](session, work)
        artifact = work / ARTIFACTS[export_format]
        version = next_version(model_dir)
        provenance = build_provenance(
            model_name=name, version=version, weights=session.weights,
            weights_sha256=session.weights_sha256, artifact=artifact,
            artifact_sha256=sha256_file(artifact), export_format=export_format,
            opset=_opset(export_format), tools=session.tools,
            settings=format_settings(export_format), checks=checks,
        )  # fmt: skip
        write_provenance(work, provenance)
        size_mib = artifact.stat().st_size / 2**20
        final = model_dir / str(version)
        pin_served_version(model_dir)  # the new version serves only once promoted
        work.rename(final)  # atomic on one filesystem; fails if the version appeared meanwhile
    finally:
        shutil.rmtree(work, ignore_errors=True)
    took = time.perf_counter() - started
    figures = {**figures, "size": f"{size_mib:.1f}MiB", "took": f"{took:.1f}s"}
    return ExportResult(name, version, "written", final, figures)


def export_minilm(
    repository: Path = DEFAULT_REPOSITORY,
    formats: Sequence[str] = FORMATS,
    force: bool = False,
    threads: int = 2,
    on_result: Callable[[ExportResult], None] | None = None,
) -> list[ExportResult]:
    """Export the requested formats into `repository`, skipping those already up to date.

    Sets torch's intra-op thread count to `threads` (onnxruntime sessions use the same).
    Raises ExportCheckError on the first failed check; that format's version is not written.
    `on_result` is called after each format, e.g. to print progress.
    """
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown export format(s) {unknown}; expected some of {FORMATS}")
    torch.set_num_threads(threads)
    session = _Session(threads)
    results = []
    for export_format in dict.fromkeys(formats):
        model_dir = Path(repository) / MODEL_NAMES[export_format]
        current = None if force else is_up_to_date(model_dir, session.fingerprint(export_format))
        if current is not None:
            result = ExportResult(
                MODEL_NAMES[export_format], current, "up to date", model_dir / str(current)
            )
        else:
            result = _export_format(session, Path(repository), export_format)
        log.debug("%s", result.summary())
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results
