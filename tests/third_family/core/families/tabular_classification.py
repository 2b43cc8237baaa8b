"""A third family, registered only by tests/integration/test_third_family.py in a copy of
the project: a classifier of tabular rows (any PyTorch MLP over a fixed set of columns).

Front model (backend `tabular_classification`, python_backends/tabular_classification.py):
FEATURES (one CSV row of numbers per request row, as a client reads it from a file) in;
PROBABILITIES over the classes and SERVED_BY out. Encoders: the network's logits for
`features`, a float32 row whose size is the model's own (its `input_shape`, named
`columns`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

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
    zeros_probe,
)
from core.families.warmup import WarmupPlan
from core.rollout import top1_agreement
from core.settings import FRONT_BATCHING, LadderSettings, ModelSettings

FEATURES = Tensor("FEATURES", "TYPE_STRING", (1,))  # "0.5,1.25,-3" per row
PROBABILITIES = Tensor("PROBABILITIES", "TYPE_FP32", (DIM,))
ENCODER_INPUT = Tensor("features", "TYPE_FP32", ("columns",))
LOGITS = Tensor("logits", "TYPE_FP32", (DIM,))
COLUMNS_PARAMETER = "columns"  # the front config's count of columns
GATE = {"gate_max_top1_drop": "0.01", "gate_min_agreement": "0.9",
        "gate_min_throughput_ratio": "0.5", "gate_max_p99_ratio": "2.0"}


def csv_row(values: np.ndarray) -> bytes:
    return ",".join(f"{v:g}" for v in values).encode()


def front_probe(params: Mapping[str, str]) -> tuple[dict[str, np.ndarray], list[str]]:
    row = csv_row(np.zeros(int(params[COLUMNS_PARAMETER])))
    return {FEATURES.name: np.array([[row]], dtype=np.object_)}, [PROBABILITIES.name]


def check_probe(output: np.ndarray, params: Mapping[str, str]) -> str | None:
    values = np.asarray(output, dtype=np.float64).reshape(-1)
    if values.size == 0 or not np.isfinite(values).all():
        return f"output is empty or not finite ({values.size} values)"
    if "primary_model" in params and abs(values.sum() - 1) > 1e-4:
        return f"probabilities sum to {values.sum():.4f}"
    return None


def describe_answer(outputs: Mapping[str, np.ndarray]) -> str:
    probabilities = outputs[PROBABILITIES.name][0]
    best = int(np.argmax(probabilities))
    return f"class {best} p={float(probabilities[best]):.3f}"


TABULAR_CLASSIFICATION = Family(
    name="tabular_classification",
    backend="tabular_classification",
    formats=standard_formats(GATE, GATE),
    perf_inputs="tabular_classification.json",
    contract=TensorContract(
        front_artifact="columns.txt",
        front_inputs=(FEATURES,),
        front_outputs=(PROBABILITIES, SERVED_BY),
        encoder_inputs=(ENCODER_INPUT,),
        encoder_output=LOGITS,
    ),
    serving=ServingDefaults(
        primary="onnx",
        fallback="int8",
        front_settings=(ModelSettings(), LadderSettings()),
        front_batching=FRONT_BATCHING,
        front_instances=1,
        max_batch_size=16,
        warmup=WarmupPlan(front_batches=(1,), encoder_batches=(1,), encoder_runs=2),
    ),
    probes=Probes(front_probe=front_probe, encoder_probe=zeros_probe(ENCODER_INPUT, LOGITS),
                  check_probe=check_probe, describe_answer=describe_answer),
    rollout=AgreementHooks(agreement=top1_agreement,
                           agreement_gates=AgreementGates("gate_min_agreement", None)),
)
