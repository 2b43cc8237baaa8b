"""The text-ranking family: cross-encoders (rerankers) that score a query and a document
together (any Hugging Face `*ForSequenceClassification` folder with one label, a
sentence-transformers CrossEncoder folder among them).

Front model (backend `text_ranking`, python_backends/rerank.py): QUERY and DOCUMENT in,
one pair per row; SCORE (the model's activation of its logit, sigmoid unless the folder
says otherwise; the logit itself with `raw_scores`), SERVED_BY, TOKENS, TRUNCATED_TOKENS
and WINDOWS out. A pair is tokenized as the model was trained (one pair sequence) and fitted
to the model's length by the request's policy (runtime/pairs.py): truncated longest first
as CrossEncoder does (the family's default), refused, or the document cut into windows,
each beside the whole query, scored as its best window. Encoders: the transformer and its
classification head, as ONNX FP32, TorchScript FP32, ONNX INT8 (dynamic quantization,
judged on the order it gives a query's documents) and OpenVINO.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from tmr_client import contract

from core.families.spec import (
    DIM,
    SERVED_BY,
    AgreementGates,
    AgreementHooks,
    Family,
    Probes,
    ServingDefaults,
    Tensor,
    TensorContract,
    standard_formats,
)
from core.families.text_embedding import TOKENS, TRUNCATED_TOKENS, WINDOWS
from core.families.warmup import WarmupPlan
from core.rollout import score_agreement
from core.settings import (
    ONE_PROCESS,
    DynamicBatching,
    LadderSettings,
    RankFrontSettings,
    TextFrontSettings,
    in_process,
)

# The front's tensors: a pair per row, its score.
QUERY = Tensor(contract.QUERY, "TYPE_STRING", (1,))
DOCUMENT = Tensor(contract.DOCUMENT, "TYPE_STRING", (1,))
SCORE = Tensor(contract.SCORE, "TYPE_FP32", (1,))
# The encoders': the pair's token ids, mask and segment ids in; the logit out (DIM is the
# model's labels, 1: `tmr add` refuses more).
INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS = "input_ids", "attention_mask", "token_type_ids"
ENCODER_INPUTS = tuple(Tensor(n, "TYPE_INT64", (-1,))
                       for n in (INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS))
ENCODER_OUTPUT = Tensor("logits", "TYPE_FP32", (DIM,))
THROUGHPUT_GATE = {"gate_min_throughput_ratio": "0.8", "gate_max_p99_ratio": "1.5"}
# The release gate (export/quality.py rank_quality), over the documents of each of a set
# of queries: the mean Spearman correlation of their order with the reference's, the mean
# share of the reference's top 3 kept in the candidate's, and the largest change of a
# score (after the sigmoid). A rollout's agreement is 1 - that change, per pair.
FP32_GATE = {"gate_min_rank_correlation": "0.999", "gate_min_top3_overlap": "0.99",
             "gate_max_score_error": "0.001", "gate_mean_score_agreement": "0.999",
             "gate_min_score_agreement": "0.99", **THROUGHPUT_GATE}
# INT8 is judged on the order (a reranker's job), with a bound on a score's change that only
# a broken quantization passes: the test cross-encoder's best variant keeps a rank
# correlation of 0.95 and 88% of each top 3, and moves a score by up to 0.25.
INT8_GATE = {**FP32_GATE, "gate_min_rank_correlation": "0.93", "gate_min_top3_overlap": "0.8",
             "gate_max_score_error": "0.3", "gate_mean_score_agreement": "0.95",
             "gate_min_score_agreement": "0.7"}
# Token ids a health probe sends straight to an encoder: [CLS] a [SEP] b [SEP] in every
# BERT vocabulary, and inside every vocabulary this family serves.
PROBE_IDS = np.array([[101, 2740, 102, 4638, 102]], dtype=np.int64)
PROBE_TYPES = np.array([[0, 0, 0, 1, 1]], dtype=np.int64)


def front_probe(params: Mapping[str, str]) -> tuple[dict[str, np.ndarray], list[str]]:
    return ({QUERY.name: np.array([[b"health check"]], dtype=np.object_),
             DOCUMENT.name: np.array([[b"the server answers"]], dtype=np.object_)},
            [SCORE.name])


def encoder_probe(params: Mapping[str, str]) -> tuple[dict[str, np.ndarray], list[str]]:
    return ({INPUT_IDS: PROBE_IDS, ATTENTION_MASK: np.ones_like(PROBE_IDS),
             TOKEN_TYPE_IDS: PROBE_TYPES}, [params.get("output", ENCODER_OUTPUT.name)])


def check_probe(output: np.ndarray, params: Mapping[str, str]) -> str | None:
    """None when a probe's score is sane: one finite value, within [0, 1] at a front whose
    activation is the sigmoid."""
    values = np.asarray(output, dtype=np.float64).reshape(-1)
    if values.size != 1 or not np.isfinite(values).all():
        return f"score is not one finite value ({values.size} values)"
    sigmoid = params.get("activation", RankFrontSettings.activation) == "sigmoid"
    if "primary_model" in params and sigmoid and not 0.0 <= values[0] <= 1.0:
        return f"score {values[0]:.4f} out of [0, 1]"
    return None


def describe_answer(outputs: Mapping[str, np.ndarray]) -> str:
    """The first pair's score."""
    return f"score={float(np.asarray(outputs[SCORE.name]).reshape(-1)[0]):.4f}"


TEXT_RANKING = Family(
    name="text_ranking",
    backend="text_ranking",
    formats=standard_formats(FP32_GATE, INT8_GATE),
    perf_inputs="rerank.json",
    contract=TensorContract(
        front_artifact="tokenizer.json",
        front_inputs=(QUERY, DOCUMENT),
        front_outputs=(SCORE, SERVED_BY, TOKENS, TRUNCATED_TOKENS, WINDOWS),
        encoder_inputs=ENCODER_INPUTS,
        encoder_output=ENCODER_OUTPUT,
    ),
    serving=ServingDefaults(
        primary="onnx",
        fallback="int8",
        # One process, as the other families. A long pair is cut as CrossEncoder cuts it
        # (truncate); a request may ask `reject` or `chunk` instead.
        front_settings=(ONE_PROCESS, in_process(LadderSettings()),
                        TextFrontSettings(overlength_policy="truncate"), RankFrontSettings()),
        # An execution takes 16 pairs when more wait: half of a typical query's 32 candidates.
        front_batching=DynamicBatching(preferred_batch_size=(16,)),
        front_instances=1,
        max_batch_size=64,
        # A typical pair of 64 tokens: one alone, and 16 (an execution under load).
        warmup=WarmupPlan(front_batches=(1, 16), encoder_batches=(1, 16), encoder_runs=2,
                          tokens=64),
    ),
    probes=Probes(
        front_probe=front_probe,
        encoder_probe=encoder_probe,
        check_probe=check_probe,
        describe_answer=describe_answer,
    ),
    rollout=AgreementHooks(
        agreement=score_agreement,
        agreement_gates=AgreementGates("gate_mean_score_agreement", "gate_min_score_agreement"),
    ),
)
