"""Export recipe of the text-ranking family: any cross-encoder folder (a Hugging Face
`*ForSequenceClassification` with one label, or a sentence-transformers CrossEncoder).

The recipe is the text-embedding family's (export/text_embedding.py) with a pair for a
text: the graph is the transformer with its classification head, (input_ids,
attention_mask, token_type_ids) -> logits [B, 1], and each corpus text is scored as a
document beside a query drawn from the corpus's short texts. Pairs are fitted to the model's
length as the front fits them (runtime/pairs.py). ONNX FP32, TorchScript and OpenVINO
are held to PARITY_MAX_ABS_DIFF of eager PyTorch on the logits; INT8 is the first dynamic
quantization variant whose order of each query's documents stays with FP32's
(export/quality.py `rank_quality`: Spearman correlation, the top 3 kept, the largest
change of a score), judged on RANK_QUERIES queries of RANK_DOCUMENTS documents.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from core.families import TEXT_RANKING
from core.families.catalog import FamilyModel
from core.families.warmup import serialized
from export import onnx_fp32, quantize
from export.errors import ExportCheckError
from export.quality import Judgement, gate_floats, rank_quality
from export.quiet import quiet_export
from export.rank_source import RankFacts, read_rank_facts
from export.signature import signature
from export.text_embedding import TextEmbeddingRecipe
from export.warmup import front_artifact
from runtime.pairs import PairEncoder, fit_pair, pair_feeds
from runtime.runners import onnx_runner
from runtime.tokenization import TextLimits, TextOptions

log = logging.getLogger(__name__)
progress_log = logging.getLogger("export.progress")
FAMILY = TEXT_RANKING
RECIPE_VERSION = 1
QUERY_WORDS = (4, 12)  # corpus texts of this many words are the queries
RANK_QUERIES, RANK_DOCUMENTS = 48, 16  # the INT8 judgement: queries x their documents
GATE_QUERIES = 12  # the release gate's queries (RANK_DOCUMENTS documents each)
TRUNCATE = TextOptions(policy="truncate", overlap=0)  # as CrossEncoder fits a long pair
# Per-channel weights first: they keep the order best (the test cross-encoder: rank
# correlation 0.95 against 0.91 per tensor, docs/families.md).
VARIANTS = tuple(sorted(quantize.VARIANTS, key=lambda v: not v.per_channel))


class PairScorer(nn.Module):
    """A sequence-classification model as the encoder graph: (input_ids, attention_mask,
    token_type_ids) -> logits [B, labels]."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).logits


def load_scorer(facts: RankFacts) -> PairScorer:
    """The local weights (no network) as an eval-mode PairScorer."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForSequenceClassification

    with quiet_export():
        model = AutoModelForSequenceClassification.from_pretrained(
            str(facts.folder), attn_implementation="eager")
    scorer = PairScorer(model).eval()
    for param in scorer.parameters():
        param.requires_grad_(False)
    return scorer


def stable_index(text: str, n: int) -> int:
    """A text's fixed place among n (the same on every host and run)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") % n


class TextRankingRecipe(TextEmbeddingRecipe):
    """Exports one cross-encoder folder in every format of the family. The corpus's texts
    are documents; `feeds` pairs each with its query (`query_for`)."""

    family = FAMILY

    def __init__(self, folder: Path, threads: int = 2) -> None:
        self.facts = read_rank_facts(folder)  # type: ignore[assignment]
        self.threads = threads
        self.contract = signature(FAMILY, self.facts.dimension)
        self.limits = TextLimits(max_tokens=self.facts.max_tokens)
        torch.set_num_threads(threads)

    @cached_property
    def embedder(self) -> PairScorer:  # type: ignore[override]
        return load_scorer(self.facts)  # type: ignore[arg-type]

    @cached_property
    def pairs(self) -> PairEncoder:
        return PairEncoder(self.facts.folder / "tokenizer.json")

    @cached_property
    def queries(self) -> list[str]:
        low, high = QUERY_WORDS
        return [t for t in self.corpus if low <= len(t.split()) <= high]

    def query_for(self, document: str) -> str:
        return self.queries[stable_index(document, len(self.queries))]

    def feeds(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Each text as a document beside its query."""
        return self.pair_feeds([self.query_for(t) for t in texts], texts)

    def pair_feeds(self, queries: list[str], documents: list[str]) -> dict[str, np.ndarray]:
        rows = [fit_pair(q, d, self.pairs.frame, self.limits, TRUNCATE, i).rows[0]
                for i, (q, d) in enumerate(zip(self.pairs.ids(queries),
                                               self.pairs.ids(documents)))]
        return dict(zip(self.contract.input_names, pair_feeds(rows, self.pairs.pad_id)))

    def ranking_batches(self, queries: int, stride: int = 1) -> list[dict[str, np.ndarray]]:
        """`queries` queries, each with RANK_DOCUMENTS documents of the corpus (every
        `stride`-th query and document): one batch per query, so the scores of a batch
        are one ranking."""
        documents = self.corpus[::stride]
        chosen = self.queries[::max(1, len(self.queries) // queries)][:queries]
        batches = []
        for n, query in enumerate(chosen):
            picked = [documents[(n * 7919 + k * 104_729) % len(documents)]
                      for k in range(RANK_DOCUMENTS)]
            batches.append(self.pair_feeds([query] * len(picked), picked))
        return batches

    def _recipe_settings(self) -> dict[str, Any]:
        return {"recipe": RECIPE_VERSION, "model": self.facts.settings(),
                "queries": {"words": list(QUERY_WORDS)}}

    def _int8_settings(self) -> dict[str, Any]:
        return {"quantization_candidates": [v.settings() for v in VARIANTS],
                "ranking": {"queries": RANK_QUERIES, "documents": RANK_DOCUMENTS,
                            "gate": dict(FAMILY.format("int8").gate)}}

    def _int8(self, work: Path, artifact: str) -> tuple[dict, dict]:
        """The first quantization variant whose rankings pass the INT8 gate against FP32
        ONNX on RANK_QUERIES queries; its agreement and speed go into the provenance."""
        gates = gate_floats(FAMILY.format("int8").gate)
        fp32, target = work / "fp32.onnx", work / artifact
        self._export_onnx(fp32)
        fp32_run = onnx_runner(fp32, self.threads)
        diffs = self.check_parity(fp32_run, "int8 reference onnx")
        batches = self.ranking_batches(RANK_QUERIES, stride=4)
        output = self.contract.output_names[0]
        reference = np.concatenate([fp32_run(f)[output] for f in batches])
        attempts = []
        for variant in VARIANTS:
            quantize.quantize_int8(fp32, target, variant)
            onnx_fp32.verify_onnx(target, self.contract)
            run = onnx_runner(target, self.threads)
            candidate = np.concatenate([run(f)[output] for f in batches])
            stats, why = rank_quality(reference, candidate, gates, RANK_DOCUMENTS)
            attempts.append({"variant": variant.settings(), "agreement": stats,
                             "passed": why is None, **({"failure": why} if why else {})})
            progress_log.info("int8 %s: rank correlation %.4f, top-3 kept %.3f, largest score "
                              "change %.4f: %s", variant.name, stats["rank_correlation"],
                              stats["top3_overlap"], stats["max_score_error"],
                              "passed" if why is None else "failed")
            if why is None:
                break
            target.unlink()
        else:
            best = max(attempts, key=lambda a: a["agreement"]["rank_correlation"])
            raise ExportCheckError("int8 ranking agreement (every variant)", best["agreement"],
                                   gates, best["failure"])
        speed = self._speedup(fp32_run, onnx_runner(target, self.threads))
        fp32.unlink()
        chosen = attempts[-1]
        checks = {"reference_parity_max_abs_diff": diffs,
                  "ranking_vs_fp32_onnx": chosen["agreement"],
                  "ranking_set": {"queries": len(batches), "documents": RANK_DOCUMENTS},
                  "thresholds": gates,
                  "quantization": {"chosen": chosen["variant"]["name"], "attempts": attempts},
                  "speed_vs_fp32_onnx": speed}
        stats = chosen["agreement"]
        figures = {"variant": chosen["variant"]["name"],
                   "rank_corr": f"{stats['rank_correlation']:.4f}",
                   "top3": f"{stats['top3_overlap']:.3f}",
                   "max_score_err": f"{stats['max_score_error']:.4f}",
                   "speedup": f"{speed['speedup']:.2f}x"}
        return checks, figures

    # -- the release gate -----------------------------------------------------------
    def judge_quality(self, reference: np.ndarray, candidate: np.ndarray,
                      gates: Mapping[str, float]) -> Judgement:
        return rank_quality(reference, candidate, gates, RANK_DOCUMENTS)

    def gate_batches(self, stride: int = 16, batch: int = 16) -> list[dict[str, np.ndarray]]:
        """GATE_QUERIES rankings of RANK_DOCUMENTS documents (one batch each)."""
        return self.ranking_batches(GATE_QUERIES, stride=stride)


def recipe(folder: Path, threads: int = 2) -> TextRankingRecipe:
    return TextRankingRecipe(folder, threads)


# -- warmup data (export/warmup.py writes it) ---------------------------------------
WARMUP_QUERY = "how does the server answer a request"
WARMUP_DOCUMENT = ("The server tokenizes each query and document together, fits the pair "
                   "to the model's length and scores it with the cross-encoder; the "
                   "documents of one query are scored in one batch and sorted by score.")


def warmup_files(repository: Path, model: FamilyModel) -> dict[str, bytes]:
    """QUERY and DOCUMENT (a typical pair), and its token ids, mask and segment ids padded
    to the warmup length."""
    encoder = PairEncoder(front_artifact(repository, model.front))
    length = model.family.serving.warmup.tokens
    query, document = encoder.ids([WARMUP_QUERY])[0], encoder.ids([WARMUP_DOCUMENT])[0]
    fitted = fit_pair(query, document, encoder.frame, TextLimits(max_tokens=length),
                      TRUNCATE, 0)
    row = fitted.rows[0]
    extra = length - len(row)
    arrays = (np.pad(np.array(row.ids), (0, extra), constant_values=encoder.pad_id),
              np.pad(np.ones(len(row), dtype=np.int64), (0, extra)),
              np.pad(np.array(row.types), (0, extra)))
    inputs = model.family.contract
    return {inputs.front_inputs[0].name: serialized([WARMUP_QUERY.encode()]),
            inputs.front_inputs[1].name: serialized([WARMUP_DOCUMENT.encode()]),
            **{t.name: a.astype("<i8").tobytes() for t, a in zip(inputs.encoder_inputs,
                                                                  arrays)}}
