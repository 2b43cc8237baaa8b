"""Image decoding, validation, preprocessing and top-k (pure: Pillow and numpy, no Triton).

The front model of an image classifier runs, per encoded image:

    decode_image      refuse hostile or broken bytes, decode, apply EXIF orientation,
                      convert to the model's colour mode (alpha onto white, 16 bit to 8 bit)
    preprocess_into   resize the shorter side, centre-crop, normalise, write CHW float32
                      into a row of a preallocated buffer (ImageBatchBuffer)
    top_k             softmax over the logits, the k best ids, labels and probabilities

Normalisation has one form that states both conventions in their own numbers:

    x = pixel / 255 * value_range;   out[c] = (x - mean[c]) / std[c]

torchvision's `ToTensor` + `Normalize` is value_range=1 (MNIST: mean 0.1307, std 0.3081);
TensorFlow's EfficientNet-Lite `(x*255 - 127) / 128` is value_range=255, mean 127, std 128.
It is applied as a 256-entry lookup table per channel, computed in float64, so the float32
result is the correctly rounded value of the formula.

Accepted: JPEG, PNG and WebP (lossy, lossless, with alpha), the spec's `image_formats`. An
animated WebP is served as its first frame, the only one decoded, on its canvas (whose size
max_pixels limits, read from the header before libwebp allocates it). Other formats are
named by their first bytes and refused; how a row becomes the bytes decoded here (raw,
base64 or a data URL) and how a format is named: runtime/image_inputs.py.
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from PIL import ExifTags, Image, ImageOps

from core.messages import row_ref
from core.params import ConfigError, one_of, positive_int
from core.settings import ParameterSettings, setting
from runtime.errors import InvalidInputError, ModelError
from runtime.image_inputs import describe, either, sniff_format, webp_canvas

COLOR_MODES = ("L", "RGB")
ColorMode = Literal["L", "RGB"]
RESAMPLING = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
}
ACCEPTED_FORMATS = ("JPEG", "PNG", "WEBP")  # what Pillow decodes here, and the default
SIXTEEN_BIT_MODES = frozenset({"I", "I;16", "I;16B", "I;16L", "I;16N"})
# What Pillow's decoders raise for broken pixel data (MemoryError and the like are not ours).
DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, struct.error, zlib.error)


def positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0 or value == float("inf"):
        raise ValueError("must be a positive finite number")
    return value


def float_list(raw: str) -> tuple[float, ...]:
    """Comma-separated floats, e.g. "0.485,0.456,0.406"."""
    values = tuple(float(v) for v in raw.split(","))
    if not all(np.isfinite(values)):
        raise ValueError("must be finite numbers")
    return values


def format_list(raw: str) -> tuple[str, ...]:
    return tuple(one_of(*ACCEPTED_FORMATS)(v.strip().upper()) for v in raw.split(","))


@dataclass(frozen=True)
class ImageSpec(ParameterSettings):
    """How one model wants its images: limits, colour mode, geometry and normalisation.
    A front's config parameters of the same names (its source's IMAGE) set them."""

    color_mode: str = setting("RGB", one_of(*COLOR_MODES))  # a ColorMode
    resize: int = setting(256, positive_int)  # the shorter side after resizing
    crop: int = setting(224, positive_int)  # the side of the square centre crop
    # pixels 0..255 first map to 0..value_range
    value_range: float = setting(1.0, positive_float)
    mean: tuple[float, ...] = setting((0.0,), float_list)  # one value, or one per channel
    std: tuple[float, ...] = setting((1.0,), float_list)
    # 255 - pixel before normalising (dark strokes on white for MNIST)
    invert: bool = False
    interpolation: str = setting("bilinear", one_of(*RESAMPLING))
    max_image_bytes: int = setting(16 * 2**20, positive_int)
    # width x height from the header, checked before decoding
    max_pixels: int = setting(40_000_000, positive_int)
    image_formats: tuple[str, ...] = setting(ACCEPTED_FORMATS, format_list)
    # let libjpeg decode at 1/2, 1/4 or 1/8 scale (still >= resize)
    jpeg_draft: bool = False

    def __post_init__(self) -> None:
        if self.crop > self.resize:
            raise ValueError(f"crop {self.crop} is larger than resize {self.resize}")
        for name in ("mean", "std"):
            if len(getattr(self, name)) not in (1, self.channels):
                raise ValueError(f"{name} needs 1 or {self.channels} values for {self.color_mode}")
        if not all(s > 0 for s in self.std):
            raise ValueError("std values must be positive")
        if self.interpolation not in RESAMPLING:
            raise ValueError(f"interpolation must be one of {', '.join(RESAMPLING)}")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ImageSpec:
        """Read the spec from a model config's `parameters` (string values); absent: default."""
        try:
            return cls.from_parameters(config)
        except ConfigError:
            raise
        except ValueError as err:
            raise ConfigError(f"image parameters are inconsistent: {err}") from err

    @property
    def channels(self) -> int:
        return 1 if self.color_mode == "L" else 3

    @property
    def shape(self) -> tuple[int, int, int]:
        """[C, H, W] of one preprocessed image."""
        return (self.channels, self.crop, self.crop)

    def lookup_table(self) -> np.ndarray:
        """float32 [C, 256]: the normalised value of each pixel value, per channel."""
        pixels = np.arange(256, dtype=np.float64)
        if self.invert:
            pixels = 255.0 - pixels
        x = pixels / 255.0 * self.value_range
        mean = np.broadcast_to(np.asarray(self.mean, np.float64), (self.channels,))
        std = np.broadcast_to(np.asarray(self.std, np.float64), (self.channels,))
        return ((x[None, :] - mean[:, None]) / std[:, None]).astype(np.float32)


def _check_pixels(size: tuple[int, int], spec: ImageSpec, name: str) -> None:
    width, height = size
    if width * height > spec.max_pixels:
        raise InvalidInputError(
            f"{name} is {width}x{height} = {width * height} pixels, "
            f"over the limit of {spec.max_pixels} pixels"
        )


def _check_webp(data: bytes, spec: ImageSpec, name: str) -> None:
    """Before Pillow opens a WebP (libwebp parses the whole file and allocates the canvas
    then): its RIFF size against the bytes that came, its canvas against max_pixels."""
    riff_end = 8 + int.from_bytes(data[4:8], "little")
    if len(data) < riff_end:
        raise InvalidInputError(
            f"{name} is a truncated WEBP: its RIFF header says {riff_end} bytes, "
            f"{len(data)} arrived"
        )
    size = webp_canvas(data)
    if size is not None:
        _check_pixels(size, spec, name)


def _open(data: bytes, spec: ImageSpec, name: str) -> Image.Image:
    """Read the header only (Image.open decodes no pixels) and refuse what cannot be served."""
    sniffed = sniff_format(data)
    if sniffed is not None and sniffed not in spec.image_formats:
        raise InvalidInputError(
            f"{name} is {describe(sniffed)}; only {either(spec.image_formats)} are accepted"
        )
    if sniffed == "WEBP":
        _check_webp(data, spec, name)
    try:
        image = Image.open(io.BytesIO(data), formats=spec.image_formats)
    except Image.DecompressionBombError as err:
        raise InvalidInputError(
            f"{name} is over the limit of {spec.max_pixels} pixels (Pillow: {err})"
        ) from None
    except DECODE_ERRORS as err:  # OSError mostly; a PNG's short IHDR is a ValueError
        raise _open_error(sniffed, spec, name, err) from None
    _check_pixels(image.size, spec, name)
    return image


def _open_error(
    sniffed: str | None, spec: ImageSpec, name: str, err: Exception
) -> InvalidInputError:
    """An accepted format (or none known) that Pillow could not open."""
    if "truncated" in str(err).lower():
        kind = sniffed or "image"
        return InvalidInputError(f"{name} is a truncated {kind}: its header ends early")
    if sniffed is not None:
        return InvalidInputError(f"{name} starts like a {sniffed} but its header is corrupt")
    said = str(err).split(" <", 1)[0]  # drop the BytesIO repr Pillow appends
    return InvalidInputError(
        f"{name} is not a {either(spec.image_formats)} image (Pillow: {said})"
    )


def _load(image: Image.Image, spec: ImageSpec, name: str) -> Image.Image:
    """Decode the pixels (at reduced scale if jpeg_draft) and apply the EXIF orientation."""
    fmt = image.format
    if spec.jpeg_draft and fmt == "JPEG":
        image.draft(spec.color_mode, (spec.resize, spec.resize))
    try:
        image.load()
        orientation = image.getexif().get(ExifTags.Base.Orientation, 1)
        if orientation in range(2, 9):
            image = ImageOps.exif_transpose(image)
    except DECODE_ERRORS as err:
        if "truncated" in str(err).lower():
            raise InvalidInputError(f"{name} is a truncated {fmt} ({err})") from None
        raise InvalidInputError(
            f"{name} could not be decoded as {fmt}: {type(err).__name__}: {err}"
        ) from None
    return image


def sixteen_to_eight_bit(image: Image.Image) -> Image.Image:
    """A 16-bit grayscale image ("I;16*", or "I" holding 0..65535) scaled to "L", rounded."""
    values = np.asarray(image).astype(np.uint32).clip(0, 65535)
    return Image.fromarray(((values * 255 + 32767) // 65535).astype(np.uint8), "L")


def on_white(image: Image.Image) -> Image.Image:
    """Composite an image with alpha (or a transparency key) onto white; returns RGB."""
    rgba = image.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")


def to_color_mode(image: Image.Image, mode: ColorMode) -> Image.Image:
    """Convert any decoded JPEG/PNG/WebP mode (CMYK, P, RGBA, LA, 1, I;16, ...) to "L" or
    "RGB"."""
    if image.mode in SIXTEEN_BIT_MODES:
        image = sixteen_to_eight_bit(image)
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in image.info:
        image = on_white(image)
    if image.mode not in ("L", "RGB"):
        image = image.convert("RGB")  # CMYK, P, 1, YCbCr: via RGB, so L uses one luma formula
    return image if image.mode == mode else image.convert(mode)


def decode_image(data: bytes, spec: ImageSpec, name: str = "IMAGE") -> Image.Image:
    """Decode one encoded image into the spec's colour mode, or raise InvalidInputError.

    Checks, in order: empty, over max_image_bytes, not an accepted image (named when its
    first bytes say what it is), a WebP shorter than its RIFF header says, over max_pixels
    (from the header, before any pixel is decoded), truncated or corrupt pixel data. An
    animated WebP decodes its first frame only.
    """
    if len(data) == 0:
        raise InvalidInputError(
            f"{name} is empty (0 bytes); send an encoded {either(spec.image_formats)}"
        )
    if len(data) > spec.max_image_bytes:
        raise InvalidInputError(
            f"{name} is {len(data)} bytes, over the limit of {spec.max_image_bytes} bytes"
        )
    with warnings.catch_warnings():
        # Our max_pixels check follows Pillow's bomb warning, and what Pillow warns that it
        # skipped (corrupt EXIF, a malformed MPO) is neither an error nor worth a log line.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        warnings.simplefilter("ignore", UserWarning)
        image = _load(_open(data, spec, name), spec, name)
    return to_color_mode(image, spec.color_mode)


def resized_size(width: int, height: int, shorter: int) -> tuple[int, int]:
    """(w, h) with the shorter side = `shorter`, the longer truncated as torchvision does."""
    if width <= height:
        return shorter, int(shorter * height / width)
    return int(shorter * width / height), shorter


def resize_and_crop(image: Image.Image, spec: ImageSpec) -> Image.Image:
    """Resize the shorter side to spec.resize, then the centre spec.crop square (torchvision's
    Resize(int) + CenterCrop rounding, so results match it exactly)."""
    size = resized_size(*image.size, spec.resize)
    if size != image.size:
        image = image.resize(size, RESAMPLING[spec.interpolation])
    left = round((size[0] - spec.crop) / 2.0)
    top = round((size[1] - spec.crop) / 2.0)
    if (left, top, spec.crop, spec.crop) == (0, 0, *size):
        return image
    return image.crop((left, top, left + spec.crop, top + spec.crop))


def normalize_into(pixels: np.ndarray, table: np.ndarray, out: np.ndarray) -> None:
    """uint8 [H, W] or [H, W, C] through the [C, 256] table into float32 out [C, H, W]."""
    planes = pixels[..., None] if pixels.ndim == 2 else pixels
    for c in range(out.shape[0]):
        np.take(table[c], planes[..., c], out=out[c])


def _check_row(out: np.ndarray, spec: ImageSpec) -> None:
    if out.shape != spec.shape or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(
            f"output row must be C-contiguous float32 {spec.shape}, got {out.dtype} {out.shape}"
        )


def preprocess_into(
    image: Image.Image, spec: ImageSpec, out: np.ndarray, table: np.ndarray | None = None
) -> None:
    """Resize, crop and normalise a decoded image (in spec.color_mode) into out [C, H, W]."""
    _check_row(out, spec)
    if image.mode != spec.color_mode:
        raise ValueError(f"image mode {image.mode} is not the spec's {spec.color_mode}")
    pixels = np.asarray(resize_and_crop(image, spec))
    normalize_into(pixels, spec.lookup_table() if table is None else table, out)


class ImageBatchBuffer:
    """A preallocated float32 [max_batch, C, H, W] input, refilled per batch (no allocation).

    `fill` returns a view of the first n rows: use it before the next fill.
    """

    def __init__(self, spec: ImageSpec, max_batch: int) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.spec = spec
        self.table = spec.lookup_table()
        self.array = np.zeros((max_batch, *spec.shape), dtype=np.float32)

    @property
    def max_batch(self) -> int:
        return self.array.shape[0]

    def fill(self, items: Sequence[bytes], name: str = "IMAGE") -> np.ndarray:
        """Decode and preprocess each encoded image into its row; errors name the index."""
        self.fill_from(items, 0, name)
        return self.array[: len(items)]

    def fill_from(self, items: Sequence[bytes], start: int, name: str = "IMAGE") -> list[int]:
        """Rows `start`.. for the images of one request; the row indices. An error names
        the image's index within the request (its rows are then free again)."""
        if start + len(items) > self.max_batch:
            raise InvalidInputError(
                f"{start + len(items)} images in one batch, over the limit of {self.max_batch}"
            )
        for i, data in enumerate(items):
            image = decode_image(bytes(data), self.spec, row_ref(name, i))
            preprocess_into(image, self.spec, self.array[start + i], self.table)
        return list(range(start, start + len(items)))


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64, shifted by the row maximum (no overflow)."""
    z = np.asarray(logits, dtype=np.float64)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def top_k(
    logits: np.ndarray, k: int, labels: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The k most probable classes of each row of logits [n, classes] (or one row [classes]).

    Returns ids int64, labels (object array of str) and probabilities float32, each [n, k]
    (or [k]), best first; equal probabilities keep the lower class id first.
    """
    logits = np.asarray(logits)
    classes = logits.shape[-1]
    if len(labels) != classes:
        raise ValueError(f"{len(labels)} labels for {classes} classes")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= classes:
        raise InvalidInputError(f"top_k must be an integer from 1 to {classes}, got {k!r}")
    if not np.all(np.isfinite(logits)):
        raise ModelError("the model returned non-finite logits")
    probs = softmax(logits)
    ids = np.argsort(-probs, axis=-1, kind="stable")[..., :k]
    names = np.asarray(labels, dtype=object)[ids]
    return ids.astype(np.int64), names, np.take_along_axis(probs, ids, -1).astype(np.float32)
