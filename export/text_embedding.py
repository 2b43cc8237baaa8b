"""Export recipe of the text-embedding family: any sentence-transformers model folder.

What the model is comes from its folder, never from code (export/text_source.py reads
it). The encoder graph is the transformer with the folder's pooling and normalisation, so
every served format returns the sentence embedding itself.

Formats: ONNX FP32 and TorchScript, each within PARITY_MAX_ABS_DIFF of eager PyTorch on
parity batches; ONNX INT8 by dynamic quantization, the first variant whose cosines
against FP32 pass the family's int8 gate (mean and minimum) on the fidelity corpus. When
none passes, the MatMuls a sensitivity scan ranks worst stay in FP32, fewest first
(export/sensitivity.py); the scan, the attempts and the speed against FP32 go into the
provenance.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from core.families import TEXT_EMBEDDING
from core.families.catalog import FamilyModel
from core.families.warmup import serialized
from core.versions import sha256_file
from export import onnx_fp32, openvino_format, quantize, sensitivity, torchscript
from export.corpus import build_corpus, corpus_sha256, parity_batches
from export.errors import ExportCheckError
from export.formats import FormatBuilders
from export.parity import check_fidelity, check_max_abs_diff, fidelity, max_abs_diff
from export.quality import Judgement, cosine_quality
from export.quiet import quiet_export
from export.signature import signature
from export.text_source import ModelFacts, read_facts
from export.timing import median_ms
from export.warmup import client_inputs, front_artifact
from runtime.runners import Runner, onnx_runner

log = logging.getLogger(__name__)
progress_log = logging.getLogger("export.progress")  # shown without -v (cli/export.py)
FAMILY = TEXT_EMBEDDING
RECIPE_VERSION = 2  # bump when the recipe changes in a way the fingerprint would not see
PARITY_MAX_ABS_DIFF = 1e-5
FIDELITY_STRIDE = 4  # every 4th corpus text (about 1,000) judges INT8 against FP32
SENSITIVITY_TEXTS = 32  # spread over the lengths; each MatMul's scan runs them once
SPEED_BATCH = 8
GUIDED_BUDGET_SHARE = 0.5  # of the gate's mean-cosine margin, for the scan's summed losses
class SentenceEmbedder(nn.Module):
    """Transformer + pooling (+ L2 normalisation): (input_ids, attention_mask) -> [B, D].

    The embeddings and the encoder are called with an additive mask built here, instead of
    the model's forward, whose mask helper bakes `device="cpu"` into a trace."""

    def __init__(self, transformer: nn.Module, pooling: str, normalize: bool) -> None:
        super().__init__()
        self.transformer, self.pooling, self.normalize = transformer, pooling, normalize

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        embedded = self.transformer.embeddings(input_ids=input_ids)
        keep = attention_mask[:, None, None, :].to(embedded.dtype)
        additive = (1.0 - keep) * torch.finfo(embedded.dtype).min
        hidden = self.transformer.encoder(embedded, attention_mask=additive)[0]
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        elif self.pooling == "max":
            pooled = (hidden + (1.0 - mask) * torch.finfo(hidden.dtype).min).amax(dim=1)
        else:
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return F.normalize(pooled, p=2.0, dim=1) if self.normalize else pooled


def load_embedder(facts: ModelFacts) -> SentenceEmbedder:
    """The local weights (no network) as an eval-mode SentenceEmbedder."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModel

    with quiet_export():
        try:
            transformer = AutoModel.from_pretrained(str(facts.folder), attn_implementation="eager",
                                                    add_pooling_layer=False)
        except TypeError:  # an architecture without a pooling layer to leave out
            transformer = AutoModel.from_pretrained(str(facts.folder), attn_implementation="eager")
    model = SentenceEmbedder(transformer, facts.pooling, facts.normalize).eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return model


def load_tokenizer(facts: ModelFacts) -> Tokenizer:
    """The folder's tokenizer, truncating at the model's length, no padding (ours pads)."""
    tok = Tokenizer.from_file(str(facts.folder / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    tok.enable_truncation(max_length=facts.max_tokens)
    return tok


def encode(tokenizer: Tokenizer, texts: list[str], pad_id: int) -> tuple[np.ndarray, ...]:
    """input_ids and attention_mask, int64 [B, L], padded to the longest text."""
    from runtime.tokenization import pad_batch

    return pad_batch([e.ids for e in tokenizer.encode_batch(list(texts))], pad_id)


class TextEmbeddingRecipe(FormatBuilders):
    """Exports one sentence-transformers folder in every format of the family."""

    family = FAMILY

    def __init__(self, folder: Path, threads: int = 2) -> None:
        self.facts = read_facts(folder)
        self.threads = threads
        self.contract = signature(FAMILY, self.facts.dimension)
        torch.set_num_threads(threads)

    @cached_property
    def weights_sha256(self) -> str:
        return sha256_file(self.facts.weights)

    @cached_property
    def embedder(self) -> SentenceEmbedder:
        return load_embedder(self.facts)

    @cached_property
    def tokenizer(self) -> Tokenizer:
        return load_tokenizer(self.facts)

    @cached_property
    def corpus(self) -> list[str]:
        # Length-sorted, so corpus batches carry little padding; deterministic.
        return sorted(build_corpus(), key=lambda t: (len(t), t))

    @cached_property
    def fidelity_texts(self) -> list[str]:
        return self.corpus[::FIDELITY_STRIDE]

    def feeds(self, texts: list[str]) -> dict[str, np.ndarray]:
        return dict(zip(self.contract.input_names,
                        encode(self.tokenizer, texts, self.facts.pad_id)))

    def _recipe_settings(self) -> dict[str, Any]:
        return {"recipe": RECIPE_VERSION, "model": self.facts.settings()}

    def _int8_settings(self) -> dict[str, Any]:
        gate = FAMILY.format("int8").gate
        return {"quantization_candidates": [v.settings() for v in quantize.VARIANTS],
                "guided": {"base": quantize.GUIDED_BASE.name,
                           "budget_share": GUIDED_BUDGET_SHARE,
                           "sensitivity_texts": SENSITIVITY_TEXTS},
                "fidelity": {"stride": FIDELITY_STRIDE,
                             "mean_cosine": gate["gate_mean_cosine"],
                             "min_cosine": gate["gate_min_cosine"]}}

    @property
    def sample(self) -> tuple[torch.Tensor, ...]:
        feeds = self.feeds(parity_batches(self.corpus)[1])
        return tuple(torch.from_numpy(feeds[n]) for n in self.contract.input_names)

    def embed(self, run: Runner, texts: list[str], batch: int = 32) -> np.ndarray:
        output = self.contract.output_names[0]
        return np.concatenate([run(self.feeds(texts[i:i + batch]))[output]
                               for i in range(0, len(texts), batch)])

    def eager(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with torch.inference_mode():
            out = self.embedder(*(torch.from_numpy(feeds[n]) for n in self.contract.input_names))
        return {self.contract.output_names[0]: out.numpy()}

    def check_parity(self, run: Runner, name: str) -> dict[str, float]:
        """Max abs diff vs eager PyTorch on each parity batch; raise over the threshold."""
        output, diffs = self.contract.output_names[0], {}
        for texts in parity_batches(self.corpus):
            feeds = self.feeds(texts)
            case = "batch{}x{}".format(*feeds[self.contract.input_names[0]].shape)
            diffs[case] = max_abs_diff(self.eager(feeds)[output], run(feeds)[output])
            check_max_abs_diff(f"{name} {case}", diffs[case], PARITY_MAX_ABS_DIFF)
        return diffs

    def _export_onnx(self, path: Path) -> None:
        onnx_fp32.export_onnx(self.embedder, path, self.sample, self.contract)
        onnx_fp32.verify_onnx(path, self.contract)

    def _openvino(self, path: Path, precision: str) -> tuple[dict, dict]:
        checks, figures, _ = openvino_format.build(
            self, self._export_onnx, path, precision, self.check_parity,
            self.contract.output_names[0])
        return checks, figures

    def _onnx(self, work: Path, artifact: str) -> tuple[dict, dict]:
        path = work / artifact
        self._export_onnx(path)
        return self._fp32_figures(self.check_parity(onnx_runner(path, self.threads), "onnx"))

    def _torchscript(self, work: Path, artifact: str) -> tuple[dict, dict]:
        run = torchscript.traced_runner(self.embedder, work / artifact, self.sample,
                                        self.contract, self.threads)
        return self._fp32_figures(self.check_parity(run, "torchscript"))

    @staticmethod
    def _fp32_figures(diffs: dict[str, float]) -> tuple[dict, dict]:
        return ({"parity_max_abs_diff": diffs, "thresholds": {"max_abs_diff": PARITY_MAX_ABS_DIFF}},
                {"max_abs_diff": f"{max(diffs.values()):.2e}"})

    def _int8(self, work: Path, artifact: str) -> tuple[dict, dict]:
        gate = FAMILY.format("int8").gate
        mean, minimum = float(gate["gate_mean_cosine"]), float(gate["gate_min_cosine"])
        fp32, target = work / "fp32.onnx", work / artifact
        self._export_onnx(fp32)
        fp32_run = onnx_runner(fp32, self.threads)
        diffs = self.check_parity(fp32_run, "int8 reference onnx")
        reference = self.embed(fp32_run, self.fidelity_texts)
        attempts, scan = [], {}
        for variant in self._int8_variants(fp32, 1.0 - mean, scan):
            quantize.quantize_int8(fp32, target, variant)
            onnx_fp32.verify_onnx(target, self.contract)
            stats = fidelity(reference, self.embed(onnx_runner(target, self.threads),
                                                   self.fidelity_texts))
            attempt = {"variant": variant.settings(), "fidelity": stats.as_dict(),
                       "size_bytes": target.stat().st_size}
            try:
                check_fidelity(f"int8 {variant.name}", stats, mean, minimum)
                attempt["passed"] = True
            except ExportCheckError as exc:
                attempt["passed"], attempt["failure"] = False, str(exc)
            log.info("int8 %s: %s", variant.name, {k: v for k, v in attempt.items()
                                                   if k != "variant"})
            progress_log.info("int8 %s: mean cosine %.4f, min %.4f: %s", variant.name,
                              stats.mean, stats.min, "passed" if attempt["passed"] else "failed")
            attempts.append(attempt)
            if attempt["passed"]:
                break
            target.unlink()
        else:
            best = max(attempts, key=lambda a: a["fidelity"]["mean"])
            raise ExportCheckError("int8 fidelity (every variant)", best["fidelity"],
                                   {"mean": mean, "min": minimum}, best["failure"])
        speed = self._speedup(fp32_run, onnx_runner(target, self.threads))
        fp32.unlink()
        chosen = attempts[-1]
        stats = chosen["fidelity"]
        checks = {"reference_parity_max_abs_diff": diffs, "fidelity_vs_fp32_onnx": stats,
                  "corpus": {"n": len(self.fidelity_texts),
                             "sha256": corpus_sha256(self.fidelity_texts)},
                  "thresholds": {"mean_cosine": mean, "min_cosine": minimum},
                  "quantization": {"chosen": chosen["variant"]["name"], "attempts": attempts,
                                   **scan},
                  "speed_vs_fp32_onnx": speed}
        figures = {"variant": chosen["variant"]["name"], "cos_mean": f"{stats['mean']:.4f}",
                   "cos_min": f"{stats['min']:.4f}", "n": stats["n"],
                   "speedup": f"{speed['speedup']:.2f}x"}
        return checks, figures

    def _int8_variants(self, fp32: Path, budget: float,
                       scan: dict[str, Any]) -> Iterator[quantize.QuantVariant]:
        """The plain variants, then GUIDED_BASE keeping the MatMuls that the sensitivity
        scan ranks worst in FP32, fewest first. The scan runs only if every plain variant
        fails; its ranking goes into `scan` (for provenance)."""
        yield from quantize.VARIANTS
        nodes = [n.name for n in onnx.load(str(fp32), load_external_data=False).graph.node]
        texts = self.fidelity_texts[:: max(1, len(self.fidelity_texts) // SENSITIVITY_TEXTS)]
        batches = [tuple(torch.from_numpy(a) for a in self.feeds(texts[i:i + 16]).values())
                   for i in range(0, len(texts), 16)]
        progress_log.info("int8: every plain variant failed; scanning the sensitivity of each "
                          "MatMul on %d texts", len(texts))
        ranking = sensitivity.linear_sensitivity(
            self.embedder, batches, nodes, quantize.GUIDED_BASE.reduce_range, _scan_progress)
        budget *= GUIDED_BUDGET_SHARE
        counts = sensitivity.exclusion_counts([s.loss for s in ranking], budget)
        scan["sensitivity"] = {"texts": len(texts), "budget": budget, "counts": counts,
                               "ranking": [asdict(s) for s in ranking]}
        if not counts:
            progress_log.warning("int8: the scan needs more than half of the %d MatMuls in "
                                 "FP32 to fit the gate; no guided variant to try", len(ranking))
        for count in counts:
            yield quantize.GUIDED_BASE.keeping(tuple(s.node for s in ranking[:count]))

    def _speedup(self, fp32: Runner, int8: Runner) -> dict[str, float]:
        """Median latency of both at batch SPEED_BATCH (mid-length corpus texts)."""
        middle = len(self.fidelity_texts) // 2
        feeds = self.feeds(self.fidelity_texts[middle:middle + SPEED_BATCH])
        fp32_ms, int8_ms = median_ms(fp32, feeds), median_ms(int8, feeds)
        return {"batch": SPEED_BATCH, "fp32_ms": round(fp32_ms, 2), "int8_ms": round(int8_ms, 2),
                "speedup": round(fp32_ms / int8_ms, 3)}

    def front_files(self) -> dict[str, bytes]:
        """Files the front model's version folder holds: the tokenizer it tokenizes with."""
        return {FAMILY.contract.front_artifact: (self.facts.folder / "tokenizer.json").read_bytes()}

    # -- the release gate -----------------------------------------------------------
    def judge_quality(self, reference: np.ndarray, candidate: np.ndarray,
                      gates: Mapping[str, float]) -> Judgement:
        return cosine_quality(reference, candidate, gates)  # row cosines, no labels

    def gate_batches(self, stride: int = 16, batch: int = 16) -> list[dict[str, np.ndarray]]:
        """Every `stride`-th corpus text, length-sorted into batches (little padding)."""
        texts = sorted(build_corpus()[::stride], key=len)
        return [self.feeds(texts[i:i + batch]) for i in range(0, len(texts), batch)]


def _scan_progress(done: int, total: int) -> None:
    """A line at every tenth of the sensitivity scan (each step is one model pass)."""
    if done == total or done % max(1, total // 10) == 0:
        progress_log.info("int8 sensitivity scan: %d/%d MatMuls", done, total)


def recipe(folder: Path, threads: int = 2) -> TextEmbeddingRecipe:
    return TextEmbeddingRecipe(folder, threads)


# -- warmup data (export/warmup.py writes it) ---------------------------------------
def warmup_feeds(repository: Path, model: FamilyModel, texts: list[str],
                 length: int = 0) -> dict[str, np.ndarray]:
    """The encoder's inputs for `texts` as the front tokenizes them: token ids and mask,
    padded with the tokenizer's pad id to the longest text, or to `length`."""
    from runtime.tokenization import TextEncoder, pad_batch

    tokenizer = TextEncoder(front_artifact(repository, model.front))
    ids, mask = pad_batch(tokenizer.token_ids(texts), tokenizer.pad_id)
    extra = ((0, 0), (0, max(length - ids.shape[1], 0)))
    ids, mask = np.pad(ids, extra, constant_values=tokenizer.pad_id), np.pad(mask, extra)
    return dict(zip((t.name for t in model.family.contract.encoder_inputs), (ids, mask)))


def warmup_files(repository: Path, model: FamilyModel) -> dict[str, bytes]:
    """TEXT (the longest client text within the warmup length), and its token ids and
    mask padded to that length."""
    from runtime.tokenization import TextEncoder

    length = model.family.serving.warmup.tokens
    texts = client_inputs(model)
    counts = map(len, TextEncoder(front_artifact(repository, model.front)).token_ids(texts))
    _, text = max((n, t) for n, t in zip(counts, texts) if n <= length)
    feeds = warmup_feeds(repository, model, [text], length)
    return {model.family.contract.front_inputs[0].name: serialized([text.encode()]),
            **{name: array[0].astype("<i8").tobytes() for name, array in feeds.items()}}
