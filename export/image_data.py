"""Helpers the image models' sources use for their data (nothing here knows a model).

Images go through the serving path (`runtime.images`) so an export measures what
Triton will compute: photos are JPEG-encoded, decoded by `decode_image` and preprocessed
by `ImageBatchBuffer`; raw pixel arrays go through `preprocess_into`. Photos come from
scikit-image's bundled pictures, so nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import io
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from runtime.images import ImageBatchBuffer, ImageSpec, preprocess_into


def package_dir(package: str) -> Path:
    """The folder of an installed package, found without importing (running) it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def pixel_inputs(pixels: np.ndarray, mode: str, spec: ImageSpec) -> np.ndarray:
    """float32 [N, C, H, W] model inputs of uint8 pixel arrays [N, H, W(, C)] in `mode`,
    through the serving preprocessing."""
    out = np.empty((len(pixels), *spec.shape), dtype=np.float32)
    table = spec.lookup_table()
    for i, image in enumerate(pixels):
        preprocess_into(Image.fromarray(image, mode).convert(spec.color_mode), spec, out[i],
                        table)
    return out


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
        from runtime.images import on_white

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


def photo_inputs(images: Sequence[Image.Image], spec: ImageSpec) -> np.ndarray:
    """float32 [N, C, H, W]: each image JPEG-encoded, then decoded and preprocessed as served."""
    buffer = ImageBatchBuffer(spec, max_batch=max(1, len(images)))
    return buffer.fill([encode_jpeg(image) for image in images]).copy()


def views_of(names: Sequence[str], views: int, seed: int = 0) -> tuple[list[str], list]:
    """`views` random crops/flips of each named photo (for calibration), with names."""
    rng = np.random.default_rng(seed)
    named, images = [], []
    for name in names:
        source = photo(name)
        for i in range(views):
            named.append(f"{name}#{i}")
            images.append(random_view(source, rng))
    return named, images


def batches(inputs: np.ndarray, batch_size: int) -> Iterator[np.ndarray]:
    """Consecutive [<= batch_size, ...] slices of inputs."""
    for start in range(0, len(inputs), batch_size):
        yield inputs[start : start + batch_size]
