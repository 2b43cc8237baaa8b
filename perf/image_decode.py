"""Decode cost per image: what a front model pays on the CPU before the model runs.

    python -m perf.image_decode [--repeats 40] [--json FILE]

Per case, the median and p95 wall time of the two serving steps of `python_backends.images`:
`decode_image` (checks, Pillow decode, EXIF orientation, colour conversion) and
`preprocess_into` (resize, centre crop, normalise into a preallocated row). The images are
real photos from scikit-image, encoded here; the large JPEG is the coffee photo upscaled to
4000x3000 with mild noise, like a phone camera's output. One thread, as in a Python stub.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from PIL import Image

from python_backends.images import ImageSpec, decode_image, preprocess_into

EFFICIENTNET = ImageSpec(color_mode="RGB", resize=256, crop=224, value_range=255.0,
                         mean=(127.0,), std=(128.0,))  # fmt: skip
DIGITS = ImageSpec(color_mode="L", resize=28, crop=28, mean=(0.1307,), std=(0.3081,))


@dataclass(frozen=True)
class Case:
    name: str
    data: bytes
    spec: ImageSpec
    repeats_scale: float = 1.0  # fewer repeats for slow cases


@dataclass(frozen=True)
class CaseResult:
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


def cases() -> list[Case]:
    """The benchmark's images, built from scikit-image's photos (deterministic)."""
    from skimage import data

    cat, coffee = Image.fromarray(data.chelsea()), Image.fromarray(data.coffee())
    noise = np.random.default_rng(0).normal(0, 3, (3000, 4000, 3))
    big = np.asarray(coffee.resize((4000, 3000), Image.Resampling.BICUBIC), np.float64)
    big_jpeg = encode(Image.fromarray((big + noise).clip(0, 255).astype(np.uint8)), "JPEG",
                      quality=90)  # fmt: skip
    digit = Image.fromarray(data.camera()).resize((28, 28), Image.Resampling.BILINEAR)
    return [
        Case("photo JPEG q90 (chelsea)", encode(cat, "JPEG", quality=90), EFFICIENTNET),
        Case("large JPEG q90 4000x3000", big_jpeg, EFFICIENTNET, 0.25),
        Case("large JPEG, jpeg_draft=true", big_jpeg,
             ImageSpec(**{**asdict(EFFICIENTNET), "jpeg_draft": True}), 0.5),
        Case("PNG RGB (coffee)", encode(coffee, "PNG"), EFFICIENTNET),
        Case("MNIST-size PNG 28x28 L", encode(digit, "PNG"), DIGITS),
    ]  # fmt: skip


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    """Wall milliseconds of `repeats` calls after one warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000.0)
    return times


def measure(case: Case, repeats: int) -> CaseResult:
    """Median and p95 of decode and of preprocess for one case."""
    n = max(5, round(repeats * case.repeats_scale))
    decode_ms = timed(lambda: decode_image(case.data, case.spec), n)
    image = decode_image(case.data, case.spec)
    row, table = np.empty(case.spec.shape, np.float32), case.spec.lookup_table()
    preprocess_ms = timed(lambda: preprocess_into(image, case.spec, row, table), n)
    original = Image.open(io.BytesIO(case.data)).size
    return CaseResult(
        case.name, f"{original[0]}x{original[1]}", round(len(case.data) / 1024, 1),
        *(round(float(np.percentile(t, q)), 2) for t in (decode_ms, preprocess_ms)
          for q in (50, 95)),
    )  # fmt: skip


def table(results: Sequence[CaseResult]) -> str:
    """A markdown table of the results."""
    lines = ["| image | size | KB | decode p50 ms | decode p95 ms | preprocess p50 ms "
             "| preprocess p95 ms |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r.case} | {r.size} | {r.kilobytes} | {r.decode_median_ms} | "
              f"{r.decode_p95_ms} | {r.preprocess_median_ms} | {r.preprocess_p95_ms} |"
              for r in results]  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.image_decode", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=40, help="timed calls per small case")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    results = [measure(case, args.repeats) for case in cases()]
    print(table(results))
    print(f"\nload average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump([asdict(r) for r in results], handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
