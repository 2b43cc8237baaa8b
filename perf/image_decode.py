"""Decode cost per image: what a front model pays on the CPU before the model runs.

    python -m perf.image_decode [--repeats 40] [--json FILE]

For every image-classification front model of the repository, with its own parameters
(ImageSpec from its config), the median and p95 wall time of the two serving steps of
`python_backends.images`: `decode_image` (checks, Pillow decode, EXIF orientation, colour
conversion) and `preprocess_into` (resize, centre crop, normalise into a preallocated
row). The images are scikit-image's photos, encoded here: a web-size JPEG, a PNG, an
image already at the model's input size, and a 4000x3000 JPEG like a phone camera's
(the coffee photo upscaled, with mild noise), decoded with and without `jpeg_draft`.
One thread, as in a Python stub.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from PIL import Image

from core.families import IMAGE_CLASSIFICATION
from core.families.catalog import catalog
from core.families.configs import parameters_of
from core.paths import DEFAULT_REPOSITORY
from core.versions import read_config
from perf.stats import percentile
from python_backends.errors import InvalidInputError
from python_backends.images import ImageSpec, decode_image, preprocess_into


@dataclass(frozen=True)
class Case:
    name: str
    data: bytes
    spec: ImageSpec
    repeats_scale: float = 1.0  # fewer repeats for slow cases


@dataclass(frozen=True)
class CaseResult:
    model: str
    case: str
    size: str
    kilobytes: float
    decode_median_ms: float
    decode_p95_ms: float
    preprocess_median_ms: float
    preprocess_p95_ms: float


def encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def image_specs(repository: Path = DEFAULT_REPOSITORY) -> dict[str, ImageSpec]:
    """Every image front model of the repository and its preprocessing parameters."""
    specs = {}
    for model in catalog(repository):
        if model.family is IMAGE_CLASSIFICATION:
            params = parameters_of(read_config(repository / model.front))
            specs[model.front] = ImageSpec.from_config(
                {"parameters": {k: {"string_value": v} for k, v in params.items()}})
    return specs


def cases(spec: ImageSpec) -> list[Case]:
    """The benchmark's images for one model, built from scikit-image's photos."""
    from skimage import data

    cat, coffee = Image.fromarray(data.chelsea()), Image.fromarray(data.coffee())
    noise = np.random.default_rng(0).normal(0, 3, (3000, 4000, 3))
    big = np.asarray(coffee.resize((4000, 3000), Image.Resampling.BICUBIC), np.float64)
    big_jpeg = encode(Image.fromarray((big + noise).clip(0, 255).astype(np.uint8)), "JPEG",
                      quality=90)  # fmt: skip
    side = spec.crop
    small = cat.resize((side, side), Image.Resampling.BILINEAR).convert(spec.color_mode)
    return [
        Case(f"PNG at the input size {side}x{side} {spec.color_mode}", encode(small, "PNG"),
             spec),
        Case("photo JPEG q90 451x300", encode(cat, "JPEG", quality=90), spec),
        Case("photo PNG 600x400", encode(coffee, "PNG"), spec),
        Case("phone JPEG q90 4000x3000, jpeg_draft off", big_jpeg,
             replace(spec, jpeg_draft=False), 0.25),
        Case("phone JPEG q90 4000x3000, jpeg_draft on", big_jpeg,
             replace(spec, jpeg_draft=True), 0.5),
    ]


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    """Wall milliseconds of `repeats` calls after one warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000.0)
    return times


def measure(model: str, case: Case, repeats: int) -> CaseResult:
    """Median and p95 of decode and of preprocess for one case."""
    n = max(5, round(repeats * case.repeats_scale))
    decode_ms = timed(lambda: decode_image(case.data, case.spec), n)
    image = decode_image(case.data, case.spec)
    row, table = np.empty(case.spec.shape, np.float32), case.spec.lookup_table()
    preprocess_ms = timed(lambda: preprocess_into(image, case.spec, row, table), n)
    original = Image.open(io.BytesIO(case.data)).size
    return CaseResult(
        model, case.name, f"{original[0]}x{original[1]}", round(len(case.data) / 1024, 1),
        *(round(percentile(t, q), 2) for t in (decode_ms, preprocess_ms)
          for q in (50, 95)),
    )  # fmt: skip


def table(results: Sequence[CaseResult]) -> str:
    """A markdown table of the results."""
    lines = ["| model | image | size | KB | decode p50 ms | decode p95 ms | preprocess p50 ms "
             "| preprocess p95 ms |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r.model} | {r.case} | {r.size} | {r.kilobytes} | {r.decode_median_ms} | "
              f"{r.decode_p95_ms} | {r.preprocess_median_ms} | {r.preprocess_p95_ms} |"
              for r in results]  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.image_decode", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=40, help="timed calls per small case")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    results, refused = [], []
    for model, spec in image_specs().items():
        for case in cases(spec):
            try:
                decode_image(case.data, case.spec)
            except InvalidInputError as err:  # over the model's own limits: not timed
                refused.append(f"{model}: {case.name}: {err}")
                continue
            results.append(measure(model, case, args.repeats))
    print(table(results))
    for line in refused:
        print(f"refused, as served: {line}")
    print(f"\nload average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump([asdict(r) for r in results], handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
