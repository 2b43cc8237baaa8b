"""The text-embedding family: any sentence-transformers model (BERT, MPNet...).

Front model (backend `text_embedding`, python_backends/embed.py): TEXT in, EMBEDDING,
SERVED_BY, TOKENS, TRUNCATED_TOKENS and WINDOWS out; it tokenizes with the tokenizer.json
in its version folder, fits each text to the model's length (reject, truncate, or chunk
into windows pooled into one vector) and routes through the degradation ladder to its
encoders. Encoders: the transformer with
the model's pooling and normalisation in the graph, as ONNX FP32, TorchScript FP32 and
ONNX INT8 (dynamic quantization; the gate compares cosines with eager PyTorch).
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
from core.families.warmup import WarmupPlan
from core.rollout import row_cosine
from core.settings import (
    ONE_PROCESS,
    DynamicBatching,
    LadderSettings,
    TextFrontSettings,
    in_process,
)

# The front's tensors (the front model, the SDK and the configs name them from here) ...
TEXT = Tensor(contract.TEXT, "TYPE_STRING", (1,))
EMBEDDING = Tensor(contract.EMBEDDING, "TYPE_FP32", (DIM,))
# Per text: the tokens the encoder ran over (special tokens included; every window of a
# chunked text), the tokens truncation dropped, and the windows it was embedded in.
TOKENS = Tensor(contract.TOKENS, "TYPE_INT32", (1,))
TRUNCATED_TOKENS = Tensor(contract.TRUNCATED_TOKENS, "TYPE_INT32", (1,))
WINDOWS = Tensor(contract.WINDOWS, "TYPE_INT32", (1,))
# ... and the encoders': token ids and mask in, the pooled (normalised) embedding out.
INPUT_IDS, ATTENTION_MASK = "input_ids", "attention_mask"
ENCODER_INPUTS = (Tensor(INPUT_IDS, "TYPE_INT64", (-1,)),
                  Tensor(ATTENTION_MASK, "TYPE_INT64", (-1,)))
ENCODER_OUTPUT = Tensor("embedding", "TYPE_FP32", (DIM,))
FP32_GATE = {"gate_mean_cosine": "0.9999", "gate_min_cosine": "0.999",
             "gate_min_throughput_ratio": "0.8", "gate_max_p99_ratio": "1.5"}
INT8_GATE = {**FP32_GATE, "gate_mean_cosine": "0.99", "gate_min_cosine": "0.95"}
# Token ids a health probe sends straight to an encoder: inside every vocabulary this
# family serves (BERT and MPNet tokenizers have about 30k entries).
PROBE_IDS = np.array([[101, 2740, 4638, 102]], dtype=np.int64)


def front_probe(params: Mapping[str, str]) -> tuple[dict[str, np.ndarray], list[str]]:
    return {TEXT.name: np.array([[b"health check"]], dtype=np.object_)}, [EMBEDDING.name]


def encoder_probe(params: Mapping[str, str]) -> tuple[dict[str, np.ndarray], list[str]]:
    return {INPUT_IDS: PROBE_IDS, ATTENTION_MASK: np.ones_like(PROBE_IDS)}, [
        params.get("output", ENCODER_OUTPUT.name)]


def check_probe(output: np.ndarray, params: Mapping[str, str]) -> str | None:
    """None when a probe's embedding is sane: finite, and of norm 1 for a normalising model."""
    vector = np.asarray(output, dtype=np.float64).reshape(-1)
    if vector.size == 0 or not np.isfinite(vector).all():
        return f"embedding is empty or not finite ({vector.size} values)"
    norm = float(np.linalg.norm(vector))
    if params.get("normalize", "true") == "true" and abs(norm - 1.0) > 1e-3:
        return f"embedding norm {norm:.4f}, expected 1"
    return None


def describe_answer(outputs: Mapping[str, np.ndarray]) -> str:
    """The first embedding's size, norm and first values."""
    vector = np.asarray(outputs[EMBEDDING.name][0], dtype=np.float32)
    norm = float(np.sqrt((vector.astype(np.float64) ** 2).sum()))
    return f"dim={vector.shape[0]} norm={norm:.4f} first={vector[:4].round(4)}"


TEXT_EMBEDDING = Family(
    name="text_embedding",
    backend="text_embedding",
    formats=standard_formats(FP32_GATE, INT8_GATE),
    perf_inputs="embed.json",
    contract=TensorContract(
        front_artifact="tokenizer.json",
        front_inputs=(TEXT,),
        front_outputs=(EMBEDDING, SERVED_BY, TOKENS, TRUNCATED_TOKENS, WINDOWS),
        encoder_inputs=ENCODER_INPUTS,
        encoder_output=ENCODER_OUTPUT,
    ),
    serving=ServingDefaults(
        primary="onnx",
        fallback="int8",
        # One process: the bulk workers and the lane's worker over one in-process copy
        # (docs/serving.md, "One model, one process"). The stub holds the queue, so Triton's
        # batcher keeps no queue policy (with one instance it would stall a lone request).
        # An execution takes 8 rows when more wait: what a client puts in one request.
        front_settings=(ONE_PROCESS, in_process(LadderSettings()), TextFrontSettings()),
        front_batching=DynamicBatching(preferred_batch_size=(8,)),
        front_instances=1,
        max_batch_size=64,
        # A typical text of 32 tokens: one alone (a lone request) and 8 (what an execution
        # takes under load, preferred_batch_size) at the front and at each encoder.
        warmup=WarmupPlan(front_batches=(1, 8), encoder_batches=(1, 8), encoder_runs=2,
                          tokens=32),
    ),
    probes=Probes(
        front_probe=front_probe,
        encoder_probe=encoder_probe,
        check_probe=check_probe,
        describe_answer=describe_answer,
    ),
    rollout=AgreementHooks(
        agreement=row_cosine,
        agreement_gates=AgreementGates("gate_mean_cosine", "gate_min_cosine"),
    ),
)
