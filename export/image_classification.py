"""Export recipe of the image-classification family: a model folder with its own code.

An image model's source is a folder whose `source.py` says what only that model knows
(its network's code, its preprocessing, its data), so the family's code names no model:

    IMAGE                  its preprocessing: runtime.images.ImageSpec's parameters
    network()              the network in eval mode: forward(pixels [B, C, H, W]) -> logits
    labels()               one name per class
    calibration(spec)      float32 [N, C, H, W]: representative inputs, preprocessed as served
    evaluation(spec)       an Evaluation: held-out inputs never calibrated on, with their
                           labels when the model has a labelled test set
    sanity(spec)           optional: a few named images and the classes each must land in

Formats: ONNX FP32 and TorchScript, each within PARITY_MAX_ABS_DIFF of eager PyTorch on
the evaluation inputs; ONNX INT8 by static quantization (export/static_int8.py) calibrated
on `calibration`, kept only when it meets the family's int8 gate against FP32 ONNX on
`evaluation` (accuracy points lost where there are labels, top-1 agreement always) and,
when the source has sanity images, puts each in its expected classes in FP32 and INT8.
"""

from __future__ import annotations

import base64
import importlib.util
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from core import versions
from core.families import IMAGE_CLASSIFICATION
from core.families.catalog import FamilyModel
from core.families.warmup import serialized
from core.versions import sha256_file
from export import onnx_fp32, openvino_format, torchscript
from export.errors import ExportCheckError
from export.formats import FormatBuilders
from export.image_eval import (
    disagreements,
    sanity_report,
    top1_accuracy,
    top1_agreement,
    top1_in_top5,
)
from export.parity import check_max_abs_diff, max_abs_diff
from export.quality import Judgement, top1_quality
from export.signature import signature
from export.sources import SourceError
from export.static_int8 import DEFAULT_CONFIG, BatchCalibrationReader, quantize_int8
from export.warmup import client_inputs
from runtime.images import ImageSpec
from runtime.runners import Runner, onnx_runner

log = logging.getLogger(__name__)
FAMILY = IMAGE_CLASSIFICATION
RECIPE_VERSION = 1
SOURCE_FILE = "source.py"
# Logits of FP32 ONNX and TorchScript against eager PyTorch: FP32 reassociation measured
# about 1.5e-5 on logits up to 46; an export defect (train-mode batch norm, wrong padding)
# moves them by 1e-2 or more.
PARITY_MAX_ABS_DIFF = 1e-4
GATE_BATCH = 64
PARITY_ROWS = 256  # evaluation rows each FP32 export is compared on, logit by logit


@dataclass(frozen=True)
class Evaluation:
    """Held-out inputs of a model, with their labels when it has a labelled test set."""

    inputs: np.ndarray  # float32 [N, C, H, W], preprocessed as served
    labels: np.ndarray | None  # int64 [N]
    names: list[str]
    description: str


@dataclass(frozen=True)
class Sanity:
    """A few named images and the classes each must land in (top-1)."""

    names: list[str]
    inputs: np.ndarray
    expected: dict[str, tuple[int, ...]]


class PixelClassifier(torch.nn.Module):
    """The network with its forward argument named like the family's input, so Triton's
    libtorch backend can match a TorchScript model's input by name, as ONNX's."""

    def __init__(self, network: torch.nn.Module) -> None:
        super().__init__()
        self.network = network

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.network(pixel_values)


@runtime_checkable
class ImageSource(Protocol):
    """What an image model's source.py defines (the module docstring says what each is)."""

    IMAGE: Mapping[str, str]

    def network(self) -> torch.nn.Module: ...

    def labels(self) -> Sequence[str]: ...

    def calibration(self, spec: ImageSpec) -> np.ndarray: ...

    def evaluation(self, spec: ImageSpec) -> Evaluation: ...


@runtime_checkable
class SanityImages(Protocol):
    """A source that also names a few images and the classes each must land in."""

    def sanity(self, spec: ImageSpec) -> Sanity: ...


@runtime_checkable
class PerfImages(Protocol):
    """A source that also gives what its model's clients send, for perf_analyzer."""

    def perf_images(self, count: int) -> list[bytes]: ...


def members(protocol: type) -> list[str]:
    """The names a protocol asks for, in the order it declares them."""
    methods = [name for name, value in vars(protocol).items()
               if not name.startswith("_") and callable(value)]
    return [*protocol.__annotations__, *methods]


def load_source(folder: Path) -> ImageSource:
    """The folder's source.py as a module (run: it is the model's own code)."""
    path = folder / SOURCE_FILE
    if not path.is_file():
        raise SourceError(f"{folder}: no {SOURCE_FILE}; an image model folder holds the "
                          "model's own source.py (export/image_classification.py says what)")
    spec = importlib.util.spec_from_file_location(f"tmr_source_{folder.name}", path)
    if spec is None or spec.loader is None:  # a file location always has both
        raise ExportCheckError(f"source folder {folder}", f"{SOURCE_FILE} cannot be loaded",
                               "a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not isinstance(module, ImageSource):
        missing = [name for name in members(ImageSource) if not hasattr(module, name)]
        raise ExportCheckError(f"{path}", f"no {', '.join(missing)}", "what source.py must define")
    return module


def batches(inputs: np.ndarray, size: int) -> Iterator[np.ndarray]:
    for start in range(0, len(inputs), size):
        yield inputs[start:start + size]


@dataclass(frozen=True)
class ImageFacts:
    """What a source says about its model, as the pipeline and `tmr add` need it."""

    folder: Path
    weights: Path  # the source file: what its provenance fingerprints
    dimension: int  # classes
    input_shape: tuple[int, int, int]
    front_parameters: dict[str, str]


class ImageClassificationRecipe(FormatBuilders):
    """Exports one image model folder in every format of the family."""

    family = FAMILY

    def __init__(self, folder: Path, threads: int = 2) -> None:
        self.source = load_source(folder)
        self.spec = ImageSpec.from_config(
            {"parameters": {k: {"string_value": str(v)} for k, v in self.source.IMAGE.items()}})
        self.threads = threads
        self.facts = ImageFacts(folder, folder / SOURCE_FILE, len(self.labels), self.spec.shape,
                                {k: str(v) for k, v in self.source.IMAGE.items()})
        self.contract = signature(FAMILY, self.facts.dimension, self.spec.shape)
        torch.set_num_threads(threads)

    @cached_property
    def labels(self) -> list[str]:
        return list(self.source.labels())

    @cached_property
    def weights_sha256(self) -> str:
        """The source file's digest: it names the weights and how they load."""
        return sha256_file(self.facts.weights)

    @cached_property
    def network(self) -> torch.nn.Module:
        module = PixelClassifier(self.source.network()).eval()
        for param in module.parameters():
            param.requires_grad_(False)
        return module

    @cached_property
    def evaluation(self) -> Evaluation:
        return self.source.evaluation(self.spec)

    @cached_property
    def calibration(self) -> np.ndarray:
        return self.source.calibration(self.spec)

    @cached_property
    def sanity(self) -> Sanity | None:
        return self.source.sanity(self.spec) if isinstance(self.source, SanityImages) else None

    def _recipe_settings(self) -> dict[str, Any]:
        return {"recipe": RECIPE_VERSION, "image": self.facts.front_parameters,
                "classes": self.facts.dimension}

    def _int8_settings(self) -> dict[str, Any]:
        return {"quantization": DEFAULT_CONFIG.settings(),
                "gate": dict(FAMILY.format("int8").gate)}

    @property
    def sample(self) -> tuple[torch.Tensor, ...]:
        return (torch.from_numpy(np.ascontiguousarray(self.evaluation.inputs[:2])),)

    def eager(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        inputs = feeds[self.contract.input_names[0]]
        with torch.inference_mode():
            out = self.network(torch.from_numpy(np.ascontiguousarray(inputs)))
        return {self.contract.output_names[0]: out.numpy()}

    def logits(self, run: Runner, inputs: np.ndarray, size: int = GATE_BATCH) -> np.ndarray:
        name, output = self.contract.input_names[0], self.contract.output_names[0]
        return np.concatenate([run({name: np.ascontiguousarray(b)})[output]
                               for b in batches(inputs, size)])

    @cached_property
    def eager_logits(self) -> np.ndarray:
        """Eager PyTorch over the whole evaluation set (for its accuracy)."""
        return self.logits(self.eager, self.evaluation.inputs)

    @cached_property
    def eager_parity_logits(self) -> np.ndarray:
        return self.logits(self.eager, self.evaluation.inputs[:PARITY_ROWS])

    def check_parity(self, run: Runner, name: str) -> dict[str, float]:
        """Max abs diff of logits vs eager PyTorch at batch 1, 8 and over the first
        PARITY_ROWS evaluation inputs; raise over the threshold."""
        inputs = self.evaluation.inputs[:PARITY_ROWS]
        diffs = {f"batch{b}": max_abs_diff(self.logits(self.eager, inputs[:b]),
                                           self.logits(run, inputs[:b])) for b in (1, 8)}
        diffs[f"evaluation_{len(inputs)}"] = max_abs_diff(self.eager_parity_logits,
                                                          self.logits(run, inputs))
        for case, diff in diffs.items():
            check_max_abs_diff(f"{name} {case}", diff, PARITY_MAX_ABS_DIFF)
        return diffs

    def _openvino(self, path: Path, precision: str) -> tuple[dict, dict]:
        """The format's checks, and the sanity photos' top-1 on OpenVINO too."""
        checks, figures, run = openvino_format.build(
            self, self._fp32_onnx, path, precision, self.check_parity,
            self.contract.output_names[0])
        if self.sanity is not None:
            checks["sanity"] = self.check_sanity({"openvino": run})
        return checks, figures

    def _fp32_onnx(self, path: Path) -> Runner:
        onnx_fp32.export_onnx(self.network, path, self.sample, self.contract)
        onnx_fp32.verify_onnx(path, self.contract)
        return onnx_runner(path, self.threads)

    def _onnx(self, work: Path, artifact: str) -> tuple[dict, dict]:
        diffs = self.check_parity(self._fp32_onnx(work / artifact), "onnx")
        return self._fp32_figures(diffs)

    def _torchscript(self, work: Path, artifact: str) -> tuple[dict, dict]:
        run = torchscript.traced_runner(self.network, work / artifact, self.sample,
                                        self.contract, self.threads)
        return self._fp32_figures(self.check_parity(run, "torchscript"))

    def _fp32_figures(self, diffs: dict[str, float]) -> tuple[dict, dict]:
        checks: dict[str, Any] = {"parity_max_abs_diff": diffs,
                                  "thresholds": {"max_abs_diff": PARITY_MAX_ABS_DIFF}}
        figures: dict[str, Any] = {"max_abs_diff": f"{max(diffs.values()):.2e}"}
        if self.evaluation.labels is not None:
            accuracy = top1_accuracy(self.eager_logits, self.evaluation.labels)
            checks["eager_top1"] = accuracy
            figures["top1"] = f"{accuracy:.4f}"
        return checks, figures

    def _int8(self, work: Path, artifact: str) -> tuple[dict, dict]:
        fp32_path, target = work / "fp32.onnx", work / artifact
        fp32_run = self._fp32_onnx(fp32_path)
        quantize_int8(fp32_path, target, BatchCalibrationReader(self.calibration), DEFAULT_CONFIG)
        onnx_fp32.verify_onnx(target, self.contract)
        int8_run = onnx_runner(target, self.threads)
        checks = self.int8_quality(fp32_run, int8_run)
        fp32_path.unlink()
        figures = {k: (f"{v:.4f}" if isinstance(v, float) else v)
                   for k, v in checks["figures"].items()}
        return checks, figures

    def int8_quality(self, fp32_run: Runner, int8_run: Runner,
                     evaluation: Evaluation | None = None) -> dict[str, Any]:
        """INT8 against FP32 ONNX on the evaluation inputs (and the sanity images), with
        the family's int8 gate; raise when it is missed."""
        gate = FAMILY.format("int8").gate
        max_drop, min_agreement = float(gate["gate_max_top1_drop"]), float(
            gate["gate_min_agreement"])
        evaluation = evaluation or self.evaluation
        inputs, labels = evaluation.inputs, evaluation.labels
        fp32, int8 = self.logits(fp32_run, inputs), self.logits(int8_run, inputs)
        figures: dict[str, Any] = {"n": len(inputs), "agreement": top1_agreement(fp32, int8),
                                   "int8_top1_in_fp32_top5": top1_in_top5(fp32, int8)}
        if labels is not None:
            figures |= {"fp32_top1": top1_accuracy(fp32, labels),
                        "int8_top1": top1_accuracy(int8, labels)}
            figures["top1_drop"] = figures["fp32_top1"] - figures["int8_top1"]
        checks: dict[str, Any] = {
            "figures": figures, "evaluation": evaluation.description,
            "thresholds": {"max_top1_drop": max_drop, "min_agreement": min_agreement},
            "disagreements": disagreements(evaluation.names, fp32, int8, self.labels)[:20]}
        if labels is not None and not figures["top1_drop"] <= max_drop:
            raise ExportCheckError("int8 top-1 drop vs FP32 ONNX", figures["top1_drop"],
                                   f"<= {max_drop}", evaluation.description)
        if not figures["agreement"] >= min_agreement:
            raise ExportCheckError("int8 top-1 agreement with FP32 ONNX", figures["agreement"],
                                   f">= {min_agreement}", f"n={len(inputs)}")
        if self.sanity is not None:
            checks["sanity"] = self.check_sanity({"fp32": fp32_run, "int8": int8_run})
        return checks

    def check_sanity(self, runs: dict[str, Callable]) -> dict[str, Any]:
        """Each sanity image's top-5 per format; raise unless its top-1 is expected."""
        sanity = self.sanity
        if sanity is None:
            return {}
        logits = {name: self.logits(run, sanity.inputs) for name, run in runs.items()}
        report = sanity_report(sanity.names, logits, self.labels, sanity.expected)
        for image, entry in report.items():
            for key, ok in entry.items():
                if key.endswith("_top1_expected") and not ok:
                    got = entry[key.replace("_top1_expected", "_top5")][0][1]
                    raise ExportCheckError(f"sanity {image} {key}", got, entry["expected"])
        return report

    def front_files(self) -> dict[str, bytes]:
        """The front model's version folder holds its labels, one a line."""
        return {FAMILY.contract.front_artifact: ("\n".join(self.labels) + "\n").encode("utf-8")}

    # -- the release gate -----------------------------------------------------------
    def gate_batches(self) -> list[dict[str, np.ndarray]]:
        name = self.contract.input_names[0]
        return [{name: b} for b in batches(self.evaluation.inputs, GATE_BATCH)]

    def judge_quality(self, reference: np.ndarray, candidate: np.ndarray,
                      gates: Mapping[str, float]) -> Judgement:
        """Top-1 agreement, and the accuracy lost where the evaluation set has labels."""
        return top1_quality(reference, candidate, gates, self.evaluation.labels)


def recipe(folder: Path, threads: int = 2) -> ImageClassificationRecipe:
    return ImageClassificationRecipe(folder, threads)


# -- warmup data (export/warmup.py writes it) ---------------------------------------
def warmup_feeds(repository: Path, model: FamilyModel, image: bytes) -> dict[str, np.ndarray]:
    """The encoder's input for one encoded image as the front preprocesses it."""
    from runtime.images import ImageBatchBuffer

    config = versions.read_config_json(repository / model.front)
    pixels = ImageBatchBuffer(ImageSpec.from_config(config), 1).fill([image])
    return {model.family.contract.encoder_inputs[0].name: pixels.copy()}


def warmup_files(repository: Path, model: FamilyModel) -> dict[str, bytes]:
    """IMAGE (a client's encoded image) and its pixels as the front preprocesses them."""
    image = base64.b64decode(client_inputs(model)[0])
    feeds = warmup_feeds(repository, model, image)
    return {model.family.contract.front_inputs[0].name: serialized([image]),
            **{name: array[0].astype("<f4").tobytes() for name, array in feeds.items()}}
