"""How a row of an image front becomes the encoded image it decodes, and how a refused
format is named (pure: no Pillow, no Triton).

A row is an encoded JPEG, PNG or WebP: raw bytes (a binary tensor), its base64 text (JSON
cannot carry bytes), or a base64 data URL (`data:image/webp;base64,...`, as a browser's
canvas writes it), whose declared type must be accepted and agree with its bytes
(`image_bytes`, `data_url_bytes`). A format is known by its first bytes (`sniff_format`:
GIF, BMP, TIFF, HEIC/HEIF, AVIF, ICO, SVG, PDF, a RIFF that is no WebP...), so a refusal
names what was sent; `webp_canvas` reads a WebP's size from its header.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any, Protocol

from runtime.errors import InvalidInputError

# Magic numbers of common formats, to say what a refused file is (RIFF, ftyp, markup below).
MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xd8\xff", "JPEG"), (b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"), (b"BM", "BMP"), (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"),
    (b"\x00\x00\x01\x00", "ICO"), (b"%PDF", "PDF"),
)  # fmt: skip
RIFF_FORMS = {b"WEBP": "WEBP", b"WAVE": "WAV", b"AVI ": "AVI"}  # bytes 8-11 of a RIFF file
# ISO-BMFF brands (an `ftyp` box at offset 4): HEIF is the container, HEIC and AVIF its codecs.
FTYP_BRANDS = {
    b"heic": "HEIC", b"heix": "HEIC", b"heim": "HEIC", b"heis": "HEIC", b"hevc": "HEIC",
    b"hevx": "HEIC", b"mif1": "HEIF", b"msf1": "HEIF", b"heif": "HEIF", b"avif": "AVIF",
    b"avis": "AVIF",
}  # fmt: skip
# How a message names a format: "a GIF image", "an AVIF image", "a PDF document".
NOUNS = {"PDF": "document", "XML": "document", "WAV": "audio file", "AVI": "video",
         "RIFF": "file"}
VOWEL_SOUND = frozenset({"AVIF", "AVI", "ICO", "SVG", "XML"})
# Data URLs: the media types of the accepted formats (image/jpg is a common alias).
MEDIA_TYPES = {"image/jpeg": "JPEG", "image/jpg": "JPEG", "image/png": "PNG",
               "image/webp": "WEBP"}
MEDIA_TYPE_OF = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp"}


class ImageLimits(Protocol):
    """What the data URL checks read of a model's image spec (images.ImageSpec)."""

    image_formats: tuple[str, ...]
    max_image_bytes: int


def sniff_format(data: bytes) -> str | None:
    """The format named by the first bytes, or None. WEBP is `RIFF....WEBP` exactly."""
    for magic, name in MAGIC:
        if data.startswith(magic):
            return name
    if data.startswith(b"RIFF"):
        return RIFF_FORMS.get(data[8:12], "RIFF")
    return _ftyp_format(data) or _markup_format(data)


def _ftyp_format(data: bytes) -> str | None:
    """HEIC, HEIF or AVIF from an ISO-BMFF `ftyp` box: its major brand, then the compatible
    ones (an AVIF may carry the generic mif1 first)."""
    if data[4:8] != b"ftyp":
        return None
    end = min(int.from_bytes(data[:4], "big"), len(data), 64)
    brands = [data[8:12], *(data[i:i + 4] for i in range(16, end - 3, 4))]
    names = [FTYP_BRANDS[b] for b in brands if b in FTYP_BRANDS]
    specific = [n for n in names if n != "HEIF"]
    return specific[0] if specific else ("HEIF" if names else None)


def _markup_format(data: bytes) -> str | None:
    """SVG for text that starts `<svg`, or `<?xml` with an `<svg` element soon after; XML
    for other `<?xml` text."""
    head = data[:4096].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if head.startswith(b"<svg"):
        return "SVG"
    if head.startswith(b"<?xml"):
        return "SVG" if b"<svg" in head else "XML"
    return None


def article(fmt: str) -> str:
    """"a JPEG", "an AVIF"."""
    return f"{'an' if fmt in VOWEL_SOUND else 'a'} {fmt}"


def describe(fmt: str) -> str:
    """How a message names a format: "a GIF image", "an AVIF image", "a PDF document"."""
    return f"{article(fmt)} {NOUNS.get(fmt, 'image')}"


def either(names: Sequence[str]) -> str:
    """"JPEG, PNG or WEBP"; "JPEG or PNG"; "PNG"."""
    return " or ".join(filter(None, (", ".join(names[:-1]), names[-1])))


def webp_canvas(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a WebP from its first chunk's header: the canvas of a VP8X
    (extended or animated) file, else the VP8 or VP8L frame's; None if not readable."""
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        return (int.from_bytes(data[26:28], "little") & 0x3FFF,
                int.from_bytes(data[28:30], "little") & 0x3FFF)
    return None


def is_data_url(data: bytes) -> bool:
    """Whether a row is a data URL (`data:...`; the scheme is case-insensitive)."""
    return data[:5].lower() == b"data:"


def base64_min_size(length: int) -> int:
    """The fewest bytes that `length` characters of valid base64 decode to."""
    return max(0, length * 3 // 4 - 2)


def data_url_bytes(text: bytes, spec: ImageLimits, name: str = "IMAGE") -> bytes:
    """The encoded image in a data URL (`data:image/webp;base64,...`), or InvalidInputError.

    Only base64 data URLs are accepted. The media type (case-insensitive; image/jpg is
    image/jpeg) must name one of the spec's formats, and the decoded bytes must be that
    format. Parameters before `;base64` (`;charset=...`, `;name=...`) are ignored. The data
    is strict base64 (no whitespace), and its length must fit max_image_bytes once decoded,
    which is checked before decoding.
    """
    header, comma, payload = text[5:].partition(b",")
    if not comma:
        raise InvalidInputError(f"{name} is a data URL without the ',' before its data")
    media, *params = header.decode("latin-1").split(";")
    media = media.strip().lower()
    if not params or params[-1].strip().lower() != "base64":
        raise InvalidInputError(
            f"{name} is a data URL without ';base64'; only base64 data URLs are accepted"
        )
    fmt = MEDIA_TYPES.get(media)
    if fmt not in spec.image_formats:
        shown = media if len(media) <= 64 else media[:64] + "..."
        accepted = either([MEDIA_TYPE_OF[f] for f in spec.image_formats])
        raise InvalidInputError(f"{name} is a data URL declaring {shown or 'no media type'}; "
                                f"only {accepted} are accepted")
    return _data_url_image(payload, fmt, media, spec, name)


def _data_url_image(payload: bytes, fmt: str, media: str, spec: ImageLimits, name: str) -> bytes:
    """A data URL's base64 payload, decoded, checked against its declared format."""
    if not payload:
        raise InvalidInputError(f"{name} is a data URL with no data after the ','")
    if base64_min_size(len(payload)) > spec.max_image_bytes:
        raise InvalidInputError(
            f"{name} is a data URL of {len(payload)} base64 characters, at least "
            f"{base64_min_size(len(payload))} bytes decoded, over the limit of "
            f"{spec.max_image_bytes} bytes"
        )
    try:
        data = base64.b64decode(payload, validate=True)
    except binascii.Error as err:
        raise InvalidInputError(
            f"{name} is a data URL whose data is not valid base64 ({err})"
        ) from None
    sniffed = sniff_format(data)
    if sniffed != fmt:
        bytes_are = article(sniffed) if sniffed else f"not {article(fmt)}"
        raise InvalidInputError(
            f"{name} is a data URL declaring {media}, but its bytes are {bytes_are}"
        )
    return data


def image_bytes(item: Any, spec: ImageLimits, name: str = "IMAGE") -> bytes:
    """An image's bytes: a data URL's (checked, or InvalidInputError naming `name`), as
    sent, or decoded when the row is base64 text of an image. A row whose base64 could not
    fit max_image_bytes is not decoded: images.decode_image refuses it by its size."""
    data = item if isinstance(item, bytes) else str(item).encode()
    if is_data_url(data):
        return data_url_bytes(data, spec, name)
    if sniff_format(data) is not None or base64_min_size(len(data)) > spec.max_image_bytes:
        return data
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return data  # neither: decode_image names what it is
    return decoded if sniff_format(decoded) is not None else data
