"""The text-embedding family: any sentence-transformers model (BERT, MPNet...).

Front model (backend `text_embedding`, python_backends/embed.py): TEXT in, EMBEDDING,
SERVED_BY and TOKENS out; it tokenizes with the tokenizer.json in its version folder and
routes through the degradation ladder to its encoders. Encoders: the transformer with
the model's pooling and normalisation in the graph, as ONNX FP32, TorchScript FP32 and
ONNX INT8 (dynamic quantization; the gate compares cosines with eager PyTorch).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from core.families.spec import DIM, Family, Format, Tensor

FP32_GATE = {"gate_mean_cosine": "0.9999", "gate_min_cosine": "0.999",
             "gate_min_throughput_ratio": "0.8", "gate_max_p99_ratio": "1.5"}
INT8_GATE = {**FP32_GATE, "gate_mean_cosine": "0.99", "gate_min_cosine": "0.95"}
# Token ids a health probe sends straight to an encoder: inside every vocabulary this
# family serves (BERT and MPNet tokenizers have about 30k entries).
PROBE_IDS = np.array([[101, 2740, 4638, 102]], dtype=np.int64)


def front_probe(params: Mapping[str, str]) -> tuple[dict[str, np.ndarray], list[str]]:
    return {"TEXT": np.array([[b"health check"]], dtype=np.object_)}, ["EMBEDDING"]


def encoder_probe(params: Mapping[str, str]) -> tuple[dict[str, np.ndarray], list[str]]:
    feeds = {"input_ids": PROBE_IDS, "attention_mask": np.ones_like(PROBE_IDS)}
    return feeds, [params.get("output", "embedding")]


def check_probe(output: np.ndarray, params: Mapping[str, str]) -> str | None:
    """None when a probe's embedding is sane: finite, and of norm 1 for a normalising model."""
    vector = np.asarray(output, dtype=np.float64).reshape(-1)
    if vector.size == 0 or not np.isfinite(vector).all():
        return f"embedding is empty or not finite ({vector.size} values)"
    norm = float(np.linalg.norm(vector))
    if params.get("normalize", "true") == "true" and abs(norm - 1.0) > 1e-3:
        return f"embedding norm {norm:.4f}, expected 1"
    return None


TEXT_EMBEDDING = Family(
    name="text_embedding",
    backend="text_embedding",
    front_artifact="tokenizer.json",
    front_inputs=(Tensor("TEXT", "TYPE_STRING", (1,)),),
    front_outputs=(
        Tensor("EMBEDDING", "TYPE_FP32", (DIM,)),
        Tensor("SERVED_BY", "TYPE_STRING", (1,)),  # "<model>:<version>:<precision>:L<level>"
        Tensor("TOKENS", "TYPE_INT32", (1,)),  # tokens of the text, as the model counted them
    ),
    encoder_inputs=(Tensor("input_ids", "TYPE_INT64", (-1,)),
                    Tensor("attention_mask", "TYPE_INT64", (-1,))),
    encoder_output=Tensor("embedding", "TYPE_FP32", (DIM,)),
    formats=(
        Format("onnx", "fp32", "model.onnx", backend="onnxruntime", gate=FP32_GATE),
        Format("torchscript", "fp32", "model.pt", platform="pytorch_libtorch",
               output_suffix="__0", threads_parameter="INTRA_OP_THREAD_COUNT", gate=FP32_GATE),
        Format("int8", "int8", "model.onnx", backend="onnxruntime", gpu=False, gate=INT8_GATE),
    ),
    primary="onnx",
    fallback="int8",
    front_parameters={
        # Input limits (python_backends/tokenization.py); max_tokens comes from the model.
        "max_text_bytes": "16384",
        "overlength_policy": "reject",
        # Rows of a batch go to the encoder in groups whose padding is at most this share
        # of their real tokens (perf/profile.py measured it); -1 pads a batch as one call.
        "length_bucket_waste": "0.25",
        # The degradation ladder (python_backends/degradation.py; README "When things go
        # wrong"): queue signal, hysteresis, failures, memory, level 1's call size, cache.
        "queue_ratio": "0.9",
        "degrade_down_ratio": "0.5",
        "min_dwell_s": "5",
        "recover_dwell_s": "1",
        "failures_to_degrade": "3",
        "memory_limit_mb": "4096",
        "small_batch_rows": "8",
        "cache_entries": "4096",
        "forced_level": "-1",  # an operator's override: 0-4 pins the ladder there
        "gc_policy": "default",
    },
    # Two priority levels; level 2 (low, the default) is shed first by Triton's queues:
    # 128 queued requests (about 0.6 s of work) and a 2 s timeout, against 512 and 10 s.
    front_batching={
        "max_queue_delay_microseconds": 0,
        "priority_levels": 2,
        "default_priority_level": 2,
        "priority_queue_policy": {
            "1": {"timeout_action": "REJECT", "default_timeout_microseconds": 10_000_000,
                  "allow_timeout_override": True, "max_queue_size": 512},
            "2": {"timeout_action": "REJECT", "default_timeout_microseconds": 2_000_000,
                  "allow_timeout_override": True, "max_queue_size": 128},
        },
    },
    front_instances=3,
    max_batch_size=64,
    export_recipe="export.text_embedding",
    sdk_method="embed",
    perf_inputs="embed.json",
    front_probe=front_probe,
    encoder_probe=encoder_probe,
    check_probe=check_probe,
    gate_metric="cosine",
)
