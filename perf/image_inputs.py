"""perf_analyzer input data for image front models: real encoded images as base64 text.

    python -m perf.image_inputs [--repository DIR]

Writes the family's perf/inputs/images.json (scikit-image's photos, JPEG q90, and the coffee
photo at 1920x1280) and `<MODEL>.json` for each image model whose `source/source.py` defines
`perf_images(count)`. One image a request, so one file serves HTTP and gRPC (< 1 MB).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
from collections.abc import Sequence
from pathlib import Path

from PIL import Image

from core.families import IMAGE_CLASSIFICATION
from core.paths import DEFAULT_REPOSITORY
from server.goodput import INPUTS

PHOTOS = ("chelsea", "coffee", "astronaut", "rocket")
MODEL_IMAGES = 64


def encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def photos() -> list[bytes]:
    from skimage import data

    images = [Image.fromarray(getattr(data, name)()) for name in PHOTOS]
    web = images[1].resize((1920, 1280), Image.Resampling.BICUBIC)
    return [encode(i, "JPEG", quality=90) for i in [*images, web]]


def model_images(repository: Path, count: int = MODEL_IMAGES) -> dict[str, list[bytes]]:
    """Front model -> `perf_images(count)` of its source, for image models that have one."""
    from core.families.catalog import catalog
    from export.image_classification import PerfImages, load_source

    found = {}
    for model in catalog(repository):
        folder = repository / model.front / "source"
        if model.family is IMAGE_CLASSIFICATION and folder.is_dir():
            source = load_source(folder)
            if isinstance(source, PerfImages):
                found[model.front] = source.perf_images(count)
    return found


def input_data(images: Sequence[bytes]) -> dict:
    """perf_analyzer's real-input JSON: one request per image, base64 text content."""
    name = IMAGE_CLASSIFICATION.contract.front_inputs[0].name
    return {"data": [{name: {"content": [base64.b64encode(i).decode()], "shape": [1]}}
                     for i in images]}


def write(path: Path, images: Sequence[bytes]) -> None:
    path.write_text(json.dumps(input_data(images)) + "\n", encoding="utf-8")
    print(f"{path}: {len(images)} images, {path.stat().st_size / 1024:.0f} KiB")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.image_inputs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=INPUTS)
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    args = parser.parse_args(argv)
    write(args.out / IMAGE_CLASSIFICATION.perf_inputs, photos())
    for model, images in model_images(args.repository).items():
        write(args.out / f"{model}.json", images)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
