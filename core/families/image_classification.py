"""The image-classification family: any PyTorch image classifier and its preprocessing.

Front model (backend `image_classification`, python_backends/classify.py): IMAGE (an
encoded JPEG, PNG or WebP per row, an animated WebP served as its first frame: raw bytes
in a binary tensor, or in JSON base64 text or a base64 data URL) in; CLASS_IDS, LABELS
and PROBABILITIES of the `top_k` best classes, and SERVED_BY, out. It decodes, applies
the EXIF orientation, converts to the model's colour mode, resizes, crops and normalises
into a preallocated batch buffer (runtime/images.py), with the labels in its
version folder. Encoders: the network's logits for `pixel_values`, as
ONNX FP32, TorchScript FP32 and ONNX INT8 by static quantization calibrated on the
model's own representative images; the gate compares top-1 (accuracy where the
evaluation set has labels, agreement otherwise).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
from tmr_client import contract

from core.families.spec import (
    DIM,
    IMAGE_DIMS,
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
from core.settings import (
    ONE_PROCESS,
    DynamicBatching,
    ImageFrontSettings,
    LadderSettings,
    in_process,
)

# The front's tensors (the front model, the SDK and the configs name them from here) ...
# An encoded JPEG, PNG or WebP per row: bytes, base64 text or `data:image/...;base64,`
IMAGE = Tensor(contract.IMAGE, "TYPE_STRING", (1,))
CLASS_IDS = Tensor(contract.CLASS_IDS, "TYPE_INT64", (-1,))  # the top_k classes, best first
LABELS = Tensor(contract.LABELS, "TYPE_STRING", (-1,))
PROBABILITIES = Tensor(contract.PROBABILITIES, "TYPE_FP32", (-1,))
# ... and the encoders': preprocessed pixels in, the network's logits out.
PIXEL_VALUES = Tensor("pixel_values", "TYPE_FP32", IMAGE_DIMS)
LOGITS = Tensor("logits", "TYPE_FP32", (DIM,))
THROUGHPUT_GATE = {"gate_min_throughput_ratio": "0.8", "gate_max_p99_ratio": "1.5"}
# Top-1 against eager PyTorch on the model's evaluation set: accuracy points lost where it
# has labels, agreement otherwise. INT8 may lose at most 1 point (the seeds, section 4.2).
FP32_GATE = {"gate_max_top1_drop": "0.002", "gate_min_agreement": "0.99", **THROUGHPUT_GATE}
INT8_GATE = {"gate_max_top1_drop": "0.01", "gate_min_agreement": "0.8", **THROUGHPUT_GATE}


def probe_image() -> bytes:
    """A small valid PNG (a grey gradient) every image model can decode and classify."""
    from PIL import Image

    pixels = np.linspace(0, 255, 64 * 64).reshape(64, 64).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels, "L").convert("RGB").save(buffer, "PNG")
    return buffer.getvalue()


def front_probe(params: Mapping[str, str]) -> tuple[dict[str, np.ndarray], list[str]]:
    return {IMAGE.name: np.array([[probe_image()]], dtype=np.object_)}, [PROBABILITIES.name]


def check_probe(output: np.ndarray, params: Mapping[str, str]) -> str | None:
    """None when a probe's answer is sane: finite, and probabilities within [0, 1]."""
    values = np.asarray(output, dtype=np.float64).reshape(-1)
    if values.size == 0 or not np.isfinite(values).all():
        return f"output is empty or not finite ({values.size} values)"
    if "primary_model" in params and not (values.min() >= 0 and values.sum() <= 1 + 1e-4):
        return f"probabilities out of range: min {values.min():.4f}, sum {values.sum():.4f}"
    return None


def describe_answer(outputs: Mapping[str, np.ndarray]) -> str:
    """The first image's best class, its label and probability."""
    label = outputs[LABELS.name][0][0]
    label = label.decode() if isinstance(label, bytes) else str(label)
    return (f"class {int(outputs[CLASS_IDS.name][0][0])} ({label}) "
            f"p={float(outputs[PROBABILITIES.name][0][0]):.3f}")


IMAGE_CLASSIFICATION = Family(
    name="image_classification",
    backend="image_classification",
    formats=standard_formats(FP32_GATE, INT8_GATE),
    perf_inputs="images.json",
    contract=TensorContract(
        front_artifact="labels.txt",
        front_inputs=(IMAGE,),
        front_outputs=(CLASS_IDS, LABELS, PROBABILITIES, SERVED_BY),
        encoder_inputs=(PIXEL_VALUES,),
        encoder_output=LOGITS,
    ),
    serving=ServingDefaults(
        primary="onnx",
        fallback="int8",
        # The model's image parameters (colour mode, resize, crop, normalisation, limits)
        # come from its source; these are the family's: level 1 calls of 4 images, and 1024
        # cached answers (by the image's digest) at level 3.
        front_settings=(ONE_PROCESS, in_process(replace(
            LadderSettings(), small_batch_rows=4, cache_entries=1024)), ImageFrontSettings()),
        # One process, as the text family (docs/serving.md, "One model, one process"); an
        # execution takes 4 images when more wait.
        front_batching=DynamicBatching(preferred_batch_size=(4,)),
        front_instances=1,
        max_batch_size=16,
        # A real photo: one alone (a lone request) and 4 (what an execution takes under
        # load, preferred_batch_size) at the front and at each encoder.
        warmup=WarmupPlan(front_batches=(1, 4), encoder_batches=(1, 4), encoder_runs=2),
    ),
    probes=Probes(
        front_probe=front_probe,
        encoder_probe=zeros_probe(PIXEL_VALUES, LOGITS),
        check_probe=check_probe,
        describe_answer=describe_answer,
    ),
    rollout=AgreementHooks(
        agreement=top1_agreement,
        agreement_gates=AgreementGates("gate_min_agreement", None),
    ),
)
