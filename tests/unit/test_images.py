"""runtime.images: limits, hostile bytes, what a row's first bytes say, colour modes,
EXIF, WebP (alpha, animation), data URLs and rows as sent, preprocessing, top-k."""

from __future__ import annotations

import base64
import io
import struct

import numpy as np
import pytest
from PIL import Image, ImageFile, WebPImagePlugin

from core.params import ConfigError
from runtime.errors import InvalidInputError, ModelError
from runtime.image_inputs import (
    base64_min_size,
    data_url_bytes,
    either,
    image_bytes,
    is_data_url,
    sniff_format,
    webp_canvas,
)
from runtime.images import (
    ImageBatchBuffer,
    ImageSpec,
    decode_image,
    preprocess_into,
    resize_and_crop,
    resized_size,
    softmax,
    top_k,
)
from tests import image_samples as samples
from tests.image_samples import bomb, encode, raw_png

# The two models' conventions, as their configs will state them.
EFFICIENTNET = ImageSpec(color_mode="RGB", resize=256, crop=224, value_range=255.0,
                         mean=(127.0,), std=(128.0,))
DIGITS = ImageSpec(color_mode="L", resize=28, crop=28, value_range=1.0,
                   mean=(0.1307,), std=(0.3081,))


def config(**params: str) -> dict:
    return {"parameters": {k: {"string_value": v} for k, v in params.items()}}


@pytest.fixture(scope="module")
def cat() -> Image.Image:
    return samples.cat()


@pytest.fixture(scope="module")
def cat_jpeg(cat: Image.Image) -> bytes:
    return encode(cat, "JPEG", quality=90)


@pytest.fixture
def no_pixel_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any image's pixels get decoded."""
    def refuse(self: ImageFile.ImageFile) -> None:
        raise AssertionError("pixels were decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", refuse)


# --- ImageSpec -----------------------------------------------------------------------------


def test_image_spec_from_config_without_parameters_uses_defaults():
    assert ImageSpec.from_config({}) == ImageSpec()


def test_image_spec_from_config_reads_the_digits_parameters():
    spec = ImageSpec.from_config(config(
        color_mode="L", resize="28", crop="28", value_range="1", mean="0.1307", std="0.3081",
        invert="false", max_image_bytes="65536", max_pixels="1000000", image_formats="png, jpeg",
        jpeg_draft="true", interpolation="bicubic"))
    assert spec == ImageSpec(color_mode="L", resize=28, crop=28, value_range=1.0,
                             mean=(0.1307,), std=(0.3081,), max_image_bytes=65536,
                             max_pixels=1_000_000, image_formats=("PNG", "JPEG"),
                             jpeg_draft=True, interpolation="bicubic")
    assert spec.shape == (1, 28, 28)


def test_image_spec_from_config_reads_per_channel_mean_and_std():
    spec = ImageSpec.from_config(config(mean="0.485,0.456,0.406", std="0.229, 0.224, 0.225"))
    assert spec.mean == (0.485, 0.456, 0.406)
    assert spec.std == (0.229, 0.224, 0.225)
    assert spec.shape == (3, 224, 224)


@pytest.mark.parametrize(("key", "value", "why"), [
    ("color_mode", "CMYK", "must be one of L, RGB"),
    ("resize", "0", "must be a positive integer"),
    ("value_range", "-1", "must be a positive finite number"),
    ("mean", "0.1,x", "could not convert"),
    ("std", "nan", "must be finite numbers"),
    ("invert", "yes", "must be one of true, false"),
    ("image_formats", "JPEG,GIF", "must be one of JPEG, PNG, WEBP"),
    ("interpolation", "lanczos", "must be one of nearest, bilinear, bicubic"),
])
def test_image_spec_from_config_rejects_an_invalid_value_naming_the_key(key, value, why):
    with pytest.raises(ConfigError, match=rf"parameter '{key}'='{value}' is invalid: .*{why}"):
        ImageSpec.from_config(config(**{key: value}))


@pytest.mark.parametrize(("params", "why"), [
    ({"resize": "200", "crop": "224"}, "crop 224 is larger than resize 200"),
    ({"mean": "0.1,0.2"}, "mean needs 1 or 3 values for RGB"),
    ({"color_mode": "L", "std": "0.2,0.2,0.2"}, "std needs 1 or 1 values for L"),
    ({"std": "0"}, "std values must be positive"),
])
def test_image_spec_from_config_rejects_inconsistent_parameters(params, why):
    with pytest.raises(ConfigError, match=f"image parameters are inconsistent: {why}"):
        ImageSpec.from_config(config(**params))


# --- normalisation -------------------------------------------------------------------------


def test_lookup_table_is_efficientnet_lite_x255_minus_127_over_128_exactly():
    x = np.arange(256) / 255.0  # the model card's x in [0, 1]
    expected = ((x * 255.0 - 127.0) / 128.0).astype(np.float32)
    table = EFFICIENTNET.lookup_table()
    assert table.shape == (3, 256)
    for channel in table:
        np.testing.assert_array_equal(channel, expected)
    assert table[0, 0] == -127 / 128 and table[0, 255] == 1.0


def test_lookup_table_is_torchvision_to_tensor_then_normalize_for_mnist():
    x = np.arange(256, dtype=np.float32) / np.float32(255)  # ToTensor, in float32 as torch does
    torchvision_style = (x - np.float32(0.1307)) / np.float32(0.3081)
    table = DIGITS.lookup_table()
    assert table.shape == (1, 256)
    np.testing.assert_allclose(table[0], torchvision_style, rtol=0, atol=1e-6)
    exact = ((np.arange(256) / 255.0 - 0.1307) / 0.3081).astype(np.float32)
    np.testing.assert_array_equal(table[0], exact)


def test_lookup_table_with_invert_maps_white_to_the_value_of_black():
    inverted = ImageSpec(color_mode="L", resize=28, crop=28, mean=(0.1307,), std=(0.3081,),
                         invert=True).lookup_table()
    np.testing.assert_array_equal(inverted[0], DIGITS.lookup_table()[0][::-1])


def test_lookup_table_applies_per_channel_mean_and_std():
    spec = ImageSpec(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    table = spec.lookup_table()
    assert table[1, 255] == np.float32((1.0 - 0.456) / 0.224)
    assert table[2, 0] == np.float32(-0.406 / 0.225)


# --- refusing bad bytes --------------------------------------------------------------------


def test_decode_refuses_zero_bytes_with_invalid_input():
    with pytest.raises(InvalidInputError, match=r"^IMAGE\[2\] is empty \(0 bytes\); send an "
                                                r"encoded JPEG, PNG or WEBP$"):
        decode_image(b"", EFFICIENTNET, "IMAGE[2]")


def test_decode_refuses_an_image_over_the_byte_limit_naming_size_and_limit(cat_jpeg):
    spec = ImageSpec(max_image_bytes=len(cat_jpeg) - 1)
    with pytest.raises(InvalidInputError, match=rf"^IMAGE is {len(cat_jpeg)} bytes, over the "
                                                rf"limit of {len(cat_jpeg) - 1} bytes$"):
        decode_image(cat_jpeg, spec)
    assert decode_image(cat_jpeg, ImageSpec(max_image_bytes=len(cat_jpeg))).size == (451, 300)


def test_decode_refuses_bytes_that_are_not_an_image_naming_what_pillow_said():
    with pytest.raises(InvalidInputError, match=r"^IMAGE is not a JPEG, PNG or WEBP image "
                                                r"\(Pillow: cannot identify image file\)$"):
        decode_image(b"name,label\nchelsea,cat\n", EFFICIENTNET)


@pytest.mark.parametrize(("fmt", "named"), [("GIF", "a GIF image"), ("BMP", "a BMP image"),
                                            ("TIFF", "a TIFF image"), ("ICO", "an ICO image"),
                                            ("PDF", "a PDF document")])
def test_decode_refuses_other_formats_naming_them(cat, fmt, named):
    with pytest.raises(InvalidInputError,
                       match=rf"^IMAGE is {named}; only JPEG, PNG or WEBP are accepted$"):
        decode_image(encode(cat.resize((32, 32)), fmt), EFFICIENTNET)


def test_decode_accepts_only_the_formats_the_spec_lists(cat):
    with pytest.raises(InvalidInputError, match=r"^IMAGE is a JPEG image; only PNG are accepted"):
        decode_image(encode(cat, "JPEG"), ImageSpec(image_formats=("PNG",)))


def test_decode_refuses_a_truncated_jpeg_with_invalid_input(cat_jpeg):
    with pytest.raises(InvalidInputError, match=r"^IMAGE is a truncated JPEG "
                                                r"\(image file is truncated .*\)$"):
        decode_image(cat_jpeg[: len(cat_jpeg) // 2], EFFICIENTNET)


def test_decode_refuses_a_jpeg_truncated_inside_its_header(cat_jpeg):
    with pytest.raises(InvalidInputError,
                       match=r"^IMAGE is a truncated JPEG: its header ends early$"):
        decode_image(cat_jpeg[:10], EFFICIENTNET)


def test_decode_refuses_a_truncated_png_with_invalid_input(cat):
    png = encode(cat, "PNG")
    with pytest.raises(InvalidInputError, match=r"^IMAGE is a truncated PNG"):
        decode_image(png[: len(png) - 1000], EFFICIENTNET)


def test_decode_refuses_a_png_whose_header_is_corrupt():
    with pytest.raises(InvalidInputError,
                       match=r"^IMAGE starts like a PNG but its header is corrupt$"):
        decode_image(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, EFFICIENTNET)


def test_decode_refuses_corrupt_png_pixel_data_naming_pillows_error(cat):
    png = bytearray(encode(cat, "PNG"))
    png[2000:2400] = b"\x00" * 400
    with pytest.raises(InvalidInputError, match=r"^IMAGE could not be decoded as PNG: OSError: "):
        decode_image(bytes(png), EFFICIENTNET)


def test_decode_refuses_a_20000x20000_png_bomb_without_decoding_it(no_pixel_decoding):
    data_ = bomb(20_000)
    assert len(data_) < 64 * 1024
    with pytest.raises(InvalidInputError, match=r"^IMAGE is over the limit of 40000000 pixels "
                                                r"\(Pillow: Image size \(400000000 pixels\)"):
        decode_image(data_, EFFICIENTNET)


def test_decode_refuses_a_bomb_under_pillows_own_limit_by_header_size_without_warning(
        no_pixel_decoding):
    # 100 Mpixels: Pillow only warns (warnings are errors in this suite); our check refuses.
    with pytest.raises(InvalidInputError, match=r"^IMAGE is 10000x10000 = 100000000 pixels, "
                                                r"over the limit of 40000000 pixels$"):
        decode_image(bomb(10_000), EFFICIENTNET)


def test_decode_refuses_an_image_over_max_pixels_before_decoding(cat_jpeg, no_pixel_decoding):
    with pytest.raises(InvalidInputError, match=r"^IMAGE is 451x300 = 135300 pixels, over the "
                                                r"limit of 135299 pixels$"):
        decode_image(cat_jpeg, ImageSpec(max_pixels=451 * 300 - 1))


# --- serving every colour mode -------------------------------------------------------------


def mean_abs_diff(a: Image.Image, b: Image.Image) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).mean())


def test_decode_serves_a_cmyk_jpeg_as_rgb_with_its_colours(cat):
    cmyk = encode(cat.convert("CMYK"), "JPEG", quality=95)
    assert Image.open(io.BytesIO(cmyk)).mode == "CMYK"
    image = decode_image(cmyk, EFFICIENTNET)
    assert (image.mode, image.size) == ("RGB", cat.size)
    assert mean_abs_diff(image, cat) < 3.0


def test_decode_composites_rgba_png_alpha_onto_white():
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[..., 0] = 200  # red everywhere; left half opaque, right half transparent, one half-alpha
    rgba[:, :2, 3] = 255
    rgba[0, 3, 3] = 128
    image = decode_image(encode(Image.fromarray(rgba, "RGBA"), "PNG"), EFFICIENTNET)
    pixels = np.asarray(image)
    assert image.mode == "RGB"
    assert pixels[1, 0].tolist() == [200, 0, 0]
    assert pixels[1, 3].tolist() == [255, 255, 255]
    assert pixels[0, 3].tolist() == [227, 127, 127]


def test_decode_composites_grayscale_alpha_onto_white_for_an_l_model():
    la = Image.fromarray(np.array([[[0, 255], [0, 0]]], np.uint8), "LA")
    assert np.asarray(decode_image(encode(la, "PNG"), DIGITS)).tolist() == [[0, 255]]


def test_decode_scales_a_16_bit_grayscale_png_to_8_bit_rather_than_clipping():
    values = np.array([[0, 257, 32768, 65535]], np.uint16)
    png = encode(Image.fromarray(values), "PNG")
    assert Image.open(io.BytesIO(png)).mode == "I;16"
    assert np.asarray(decode_image(png, DIGITS)).tolist() == [[0, 1, 128, 255]]


def test_decode_serves_a_16_bit_rgb_png():
    row = struct.pack(">6H", 65535, 0, 0, 0, 32896, 65535)  # red, then (0, 128, 255)
    image = decode_image(raw_png(2, 3, 16, 2, row), EFFICIENTNET)
    assert (image.mode, image.size) == ("RGB", (2, 3))
    assert np.asarray(image)[2].tolist() == [[255, 0, 0], [0, 128, 255]]


def test_decode_serves_a_palette_png_with_its_palette_colours(cat):
    palette = cat.quantize(16)
    image = decode_image(encode(palette, "PNG"), EFFICIENTNET)
    np.testing.assert_array_equal(np.asarray(image), np.asarray(palette.convert("RGB")))


def test_decode_paints_the_transparent_palette_entry_white():
    indexed = Image.fromarray(np.array([[0, 1]], np.uint8), "P")
    indexed.putpalette([10, 20, 30, 40, 50, 60])
    image = decode_image(encode(indexed, "PNG", transparency=0), EFFICIENTNET)
    assert np.asarray(image).tolist() == [[[255, 255, 255], [40, 50, 60]]]


def test_decode_serves_a_1_bit_png_as_black_and_white():
    image = decode_image(raw_png(8, 1, 1, 0, b"\x0f"), DIGITS)
    assert np.asarray(image).tolist() == [[0, 0, 0, 0, 255, 255, 255, 255]]


def test_decode_gives_a_grayscale_jpeg_three_equal_channels_for_an_rgb_model(cat):
    pixels = np.asarray(decode_image(encode(cat.convert("L"), "JPEG"), EFFICIENTNET))
    assert pixels.shape == (300, 451, 3)
    assert (pixels[..., 0] == pixels[..., 1]).all() and (pixels[..., 1] == pixels[..., 2]).all()


def test_decode_converts_an_rgb_photo_to_luma_for_an_l_model(cat):
    image = decode_image(encode(cat, "PNG"), DIGITS)
    assert image.mode == "L"
    np.testing.assert_array_equal(np.asarray(image), np.asarray(cat.convert("L")))


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_decode_applies_exif_orientation_6_by_rotating_90_degrees_clockwise(fmt):
    pixels = np.zeros((30, 40, 3), np.uint8)  # 40 wide, 30 high; a red block at the top left
    pixels[:10, :10] = (255, 0, 0)
    exif = Image.Exif()
    exif[0x0112] = 6
    image = decode_image(encode(Image.fromarray(pixels), fmt, exif=exif), EFFICIENTNET)
    assert image.size == (30, 40)
    rotated = np.asarray(image)
    assert rotated[5, 25, 0] > 200 and rotated[5, 5, 0] < 50  # now at the top right


def test_decode_with_jpeg_draft_decodes_a_large_jpeg_at_reduced_scale_not_below_resize():
    big = encode(Image.fromarray(np.full((1536, 2048, 3), 90, np.uint8)), "JPEG")
    assert decode_image(big, EFFICIENTNET).size == (2048, 1536)
    drafted = decode_image(big, ImageSpec(jpeg_draft=True))
    assert drafted.size == (512, 384)


# --- geometry and buffers ------------------------------------------------------------------


@pytest.mark.parametrize(("size", "expected"), [
    ((451, 300), (384, 256)), ((300, 451), (256, 384)), ((500, 500), (256, 256)),
    ((257, 1000), (256, 996)), ((4000, 3000), (341, 256)),
])
def test_resized_size_sets_the_shorter_side_and_truncates_the_longer_like_torchvision(
        size, expected):
    assert resized_size(*size, 256) == expected


def test_resize_and_crop_takes_the_centre_square(cat):
    cropped = resize_and_crop(cat, EFFICIENTNET)
    assert cropped.size == (224, 224)
    resized = cat.resize((384, 256), Image.Resampling.BILINEAR)
    np.testing.assert_array_equal(np.asarray(cropped), np.asarray(resized)[16:240, 80:304])


def test_preprocess_into_writes_efficientnet_chw_values_into_the_given_row(cat):
    out = np.full(EFFICIENTNET.shape, np.nan, np.float32)
    preprocess_into(cat, EFFICIENTNET, out)
    hwc = np.asarray(resize_and_crop(cat, EFFICIENTNET)).astype(np.float64) / 255.0
    expected = ((hwc * 255.0 - 127.0) / 128.0).transpose(2, 0, 1)
    np.testing.assert_array_equal(out, expected.astype(np.float32))


def test_preprocess_into_normalises_an_mnist_sized_digit_without_resizing():
    digit = np.random.default_rng(0).integers(0, 256, (28, 28), dtype=np.uint8)
    out = np.empty(DIGITS.shape, np.float32)
    preprocess_into(Image.fromarray(digit, "L"), DIGITS, out)
    expected = (digit / 255.0 - 0.1307) / 0.3081
    np.testing.assert_allclose(out[0], expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("row", [np.empty((3, 224, 224), np.float64),
                                 np.empty((3, 223, 224), np.float32),
                                 np.empty((3, 224, 224), np.float32, order="F")])
def test_preprocess_into_refuses_a_row_of_the_wrong_shape_dtype_or_layout(cat, row):
    with pytest.raises(ValueError, match=r"output row must be C-contiguous float32"):
        preprocess_into(cat, EFFICIENTNET, row)


def test_image_batch_buffer_fills_rows_in_place_and_returns_a_view(cat):
    buffer = ImageBatchBuffer(EFFICIENTNET, max_batch=4)
    items = [encode(cat, "JPEG"), encode(cat.convert("RGBA"), "PNG")]
    batch = buffer.fill(items)
    assert batch.shape == (2, 3, 224, 224) and batch.dtype == np.float32
    assert np.shares_memory(batch, buffer.array)
    again = buffer.fill(items[1:])
    assert np.shares_memory(again, batch)
    np.testing.assert_array_equal(again[0], batch[1])


def test_image_batch_buffer_names_the_index_of_a_bad_image(cat_jpeg):
    buffer = ImageBatchBuffer(EFFICIENTNET, max_batch=2)
    with pytest.raises(InvalidInputError, match=r"^IMAGE\[1\] is empty"):
        buffer.fill([cat_jpeg, b""])


def test_image_batch_buffer_refuses_more_images_than_its_rows(cat_jpeg):
    with pytest.raises(InvalidInputError, match=r"^3 images in one batch, over the limit of 2$"):
        ImageBatchBuffer(EFFICIENTNET, max_batch=2).fill([cat_jpeg] * 3)


def test_sniff_format_names_jpeg_and_png_from_their_first_bytes(cat_jpeg):
    assert sniff_format(cat_jpeg) == "JPEG"
    assert sniff_format(b"\x89PNG\r\n\x1a\nrest") == "PNG"
    assert sniff_format(b"hello") is None


def riff(form: bytes) -> bytes:
    return b"RIFF" + struct.pack("<I", 4 + 8) + form + b"fmt \x00\x00\x00\x00"


def ftyp(major: bytes, *compatible: bytes) -> bytes:
    payload = major + b"\x00\x00\x00\x00" + b"".join(compatible)
    return struct.pack(">I", 8 + len(payload)) + b"ftyp" + payload + b"\x00" * 16


@pytest.mark.parametrize(("head", "fmt"), [
    (riff(b"WEBP"), "WEBP"), (riff(b"WAVE"), "WAV"), (riff(b"AVI "), "AVI"),
    (riff(b"ACON"), "RIFF"), (b"RIFF\x00\x00", "RIFF"),
    (ftyp(b"heic", b"mif1", b"heic"), "HEIC"), (ftyp(b"heix"), "HEIC"),
    (ftyp(b"mif1", b"heic"), "HEIC"), (ftyp(b"heif"), "HEIF"), (ftyp(b"mif1"), "HEIF"),
    (ftyp(b"avif", b"mif1"), "AVIF"), (ftyp(b"avis"), "AVIF"),
    (ftyp(b"mif1", b"avif", b"miaf"), "AVIF"), (ftyp(b"isom", b"mp41"), None),
    (b"GIF89a\x01\x00", "GIF"), (b"BM\x00\x00", "BMP"), (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"), (b"\x00\x00\x01\x00\x01\x00", "ICO"), (b"%PDF-1.7", "PDF"),
    (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "SVG"),
    (b"\xef\xbb\xbf\n  <?xml version='1.0'?>\n<!-- x -->\n<svg/>", "SVG"),
    (b"<?xml version='1.0'?><feed/>", "XML"), (b"<html>", None),
])
def test_sniff_format_names_each_format_exactly(head, fmt):
    assert sniff_format(head) == fmt


@pytest.mark.parametrize(("head", "named"), [
    (riff(b"WAVE"), "a WAV audio file"), (riff(b"AVI "), "an AVI video"),
    (ftyp(b"heic"), "a HEIC image"), (ftyp(b"heif"), "a HEIF image"),
    (ftyp(b"avif"), "an AVIF image"), (b"<svg/>", "an SVG image"),
    (b"<?xml version='1.0'?><rss/>", "an XML document"),
])
def test_decode_names_a_refused_format_by_its_first_bytes(head, named, no_pixel_decoding):
    with pytest.raises(InvalidInputError, match=rf"^IMAGE\[0\] is {named}; only JPEG, PNG or "
                                                r"WEBP are accepted$"):
        decode_image(head, EFFICIENTNET, "IMAGE[0]")


@pytest.mark.parametrize(("names", "text"), [
    (("JPEG", "PNG", "WEBP"), "JPEG, PNG or WEBP"), (("JPEG", "PNG"), "JPEG or PNG"),
    (("PNG",), "PNG"),
])
def test_either_lists_formats_as_a_sentence(names, text):
    assert either(names) == text


def test_image_formats_default_to_jpeg_png_and_webp_and_accept_webp_in_a_config():
    assert ImageSpec().image_formats == ("JPEG", "PNG", "WEBP")
    assert ImageSpec.from_config(config(image_formats="webp,png")).image_formats == (
        "WEBP", "PNG")


def test_decode_refuses_webp_where_the_spec_does_not_list_it(cat):
    with pytest.raises(InvalidInputError,
                       match=r"^IMAGE is a WEBP image; only JPEG or PNG are accepted$"):
        decode_image(encode(cat, "WEBP"), ImageSpec(image_formats=("JPEG", "PNG")))


# --- WebP ----------------------------------------------------------------------------------


@pytest.fixture
def no_webp_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if libwebp is handed the file (its decoder allocates the canvas)."""
    def refuse(data: bytes) -> None:
        raise AssertionError("libwebp's decoder was created")

    monkeypatch.setattr(WebPImagePlugin._webp, "WebPAnimDecoder", refuse)


@pytest.mark.parametrize(("options", "chunk", "tolerance"), [
    ({"quality": 90}, b"VP8 ", 6.0), ({"lossless": True}, b"VP8L", 0.0),
])
def test_decode_serves_lossy_and_lossless_webp(cat, options, chunk, tolerance):
    webp = encode(cat, "WEBP", **options)
    assert webp[12:16] == chunk
    image = decode_image(webp, EFFICIENTNET)
    assert (image.mode, image.size) == ("RGB", cat.size)
    assert mean_abs_diff(image, cat) <= tolerance


@pytest.mark.parametrize("options", [{"lossless": True}, {"quality": 90}])
def test_decode_composites_webp_alpha_onto_white(cat, options):
    webp = encode(samples.half_clear(cat), "WEBP", **options)
    assert Image.open(io.BytesIO(webp)).mode == "RGBA"
    pixels = np.asarray(decode_image(webp, EFFICIENTNET)).astype(int)
    assert (pixels[:, 240:] >= 250).all()  # the clear right half is white
    opaque = np.asarray(cat).astype(int)[:, :200]
    assert np.abs(pixels[:, :200] - opaque).mean() < (0.5 if "lossless" in options else 6.0)


def test_decode_converts_a_webp_to_luma_for_an_l_model(cat):
    image = decode_image(encode(cat, "WEBP", lossless=True), DIGITS)
    assert image.mode == "L"
    np.testing.assert_array_equal(np.asarray(image), np.asarray(cat.convert("L")))


@pytest.mark.parametrize("cut", [20, 29, 1000, -1])
def test_decode_refuses_a_truncated_webp_naming_the_bytes_it_lacks(cat, cut):
    webp = encode(cat, "WEBP")
    short = webp[:cut]
    with pytest.raises(InvalidInputError, match=rf"^IMAGE\[0\] is a truncated WEBP: its RIFF "
                                                rf"header says {len(webp)} bytes, "
                                                rf"{len(short)} arrived$"):
        decode_image(short, EFFICIENTNET, "IMAGE[0]")


def test_decode_serves_a_webp_with_bytes_after_its_riff_chunk(cat):
    assert decode_image(encode(cat, "WEBP") + b"\x00" * 100, EFFICIENTNET).size == cat.size


def test_decode_refuses_a_webp_whose_chunks_are_corrupt(cat):
    webp = bytearray(encode(cat, "WEBP"))
    webp[20:30] = b"\x00" * 10  # the VP8 frame header
    with pytest.raises(InvalidInputError,
                       match=r"^IMAGE starts like a WEBP but its header is corrupt$"):
        decode_image(bytes(webp), EFFICIENTNET)


def test_decode_refuses_corrupt_webp_pixel_data_naming_what_libwebp_said(cat):
    webp = bytearray(encode(cat, "WEBP", lossless=True))
    webp[5000:5400] = b"\x00" * 400
    with pytest.raises(InvalidInputError,
                       match=r"^IMAGE could not be decoded as WEBP: OSError: failed to read next "
                             r"frame$"):
        decode_image(bytes(webp), EFFICIENTNET)


def test_webp_canvas_reads_vp8_vp8l_and_vp8x_headers(cat):
    small = cat.resize((100, 70))
    assert webp_canvas(encode(small, "WEBP")) == (100, 70)
    assert webp_canvas(encode(small, "WEBP", lossless=True)) == (100, 70)
    animated = samples.animated_webp([small, small.rotate(180)])
    assert animated[12:16] == b"VP8X" and webp_canvas(animated) == (100, 70)
    assert webp_canvas(animated[:29]) is None and webp_canvas(riff(b"WEBP")) is None


def with_canvas(webp: bytes, width: int, height: int) -> bytes:
    """A VP8X WebP with its canvas size rewritten."""
    edited = bytearray(webp)
    edited[24:30] = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return bytes(edited)


def test_decode_refuses_an_animation_whose_canvas_is_over_max_pixels_before_libwebp(
        cat, no_webp_decoder):
    animated = samples.animated_webp([cat, cat.rotate(180)])
    with pytest.raises(InvalidInputError, match=r"^IMAGE is 8000x8000 = 64000000 pixels, over "
                                                r"the limit of 40000000 pixels$"):
        decode_image(with_canvas(animated, 8000, 8000), EFFICIENTNET)


@pytest.mark.parametrize("options", [{"quality": 80}, {"lossless": True}])
def test_decode_refuses_a_still_webp_over_max_pixels_before_libwebp(cat, options,
                                                                     no_webp_decoder):
    with pytest.raises(InvalidInputError, match=r"^IMAGE is 451x300 = 135300 pixels, over the "
                                                r"limit of 135299 pixels$"):
        decode_image(encode(cat, "WEBP", **options), ImageSpec(max_pixels=451 * 300 - 1))


@pytest.mark.parametrize(("options", "tolerance"), [({"quality": 90}, 6.0),
                                                    ({"lossless": True}, 0.0)])
def test_an_animated_webp_is_served_as_its_first_frame(cat, options, tolerance):
    blue = Image.new("RGB", cat.size, (0, 0, 255))
    first = decode_image(samples.animated_webp([cat, blue], **options), EFFICIENTNET)
    assert (first.mode, first.size) == ("RGB", cat.size)
    assert mean_abs_diff(first, cat) <= tolerance
    assert mean_abs_diff(first, blue) > 50


def test_an_animated_webp_decodes_only_its_first_frame(cat):
    """The second frame's pixel data is garbage: decoding it fails (seek proves it), so an
    answer means it was never decoded."""
    animated = bytearray(samples.animated_webp([cat, cat.rotate(180)], lossless=True))
    second = samples.anmf_offsets(bytes(animated))[1]
    start = second + 8 + 16 + 8 + 5  # ANMF header, frame header, VP8L chunk header, VP8L header
    animated[start:start + 40] = bytes(range(7, 47))
    opened = Image.open(io.BytesIO(bytes(animated)))
    opened.seek(1)
    with pytest.raises(OSError, match="failed to read next frame"):
        opened.load()
    image = decode_image(bytes(animated), EFFICIENTNET)
    assert mean_abs_diff(image, cat) == 0.0


def test_an_animation_of_many_frames_costs_its_first_frame(cat):
    """200 distinct frames: the first frame's decode, not 200 (a generous 20x bound)."""
    import time

    small = cat.resize((160, 106))
    frames = [small.rotate(i * 1.7) for i in range(200)]
    animated, still = samples.animated_webp(frames), encode(frames[0], "WEBP")
    assert Image.open(io.BytesIO(animated)).n_frames == 200

    def cost(data: bytes) -> float:  # the fastest of 5: a busy host only slows some
        timings = []
        for _ in range(5):
            started = time.perf_counter()
            decode_image(data, EFFICIENTNET)
            timings.append(time.perf_counter() - started)
        return min(timings)

    assert cost(animated) < 20 * cost(still)


# --- data URLs and rows as sent ------------------------------------------------------------


def data_url(media: str, data: bytes) -> bytes:
    return f"data:{media};base64,".encode() + base64.b64encode(data)


@pytest.fixture(scope="module")
def photos(cat: Image.Image) -> dict[str, bytes]:
    return {"JPEG": encode(cat, "JPEG"), "PNG": encode(cat.resize((40, 30)), "PNG"),
            "WEBP": encode(cat, "WEBP")}


@pytest.mark.parametrize(("media", "fmt"), [
    ("image/jpeg", "JPEG"), ("image/jpg", "JPEG"), ("IMAGE/JPEG", "JPEG"), ("image/png", "PNG"),
    ("Image/WebP", "WEBP"), ("image/png;charset=utf-8", "PNG"), ("image/webp;name=a.webp", "WEBP"),
])
def test_data_url_bytes_returns_the_image_of_an_accepted_type(photos, media, fmt):
    assert data_url_bytes(data_url(media, photos[fmt]), EFFICIENTNET) == photos[fmt]


def test_data_url_bytes_reads_the_scheme_and_base64_flag_in_any_case(photos):
    text = b"DATA:image/png;BASE64," + base64.b64encode(photos["PNG"])
    assert is_data_url(text) and data_url_bytes(text, EFFICIENTNET) == photos["PNG"]


@pytest.mark.parametrize(("text", "message"), [
    (b"data:image/png,%89PNG", r"is a data URL without ';base64'; only base64 data URLs are "
                               r"accepted$"),
    (b"data:image/png;base64;charset=utf-8,aGk=", r"is a data URL without ';base64'"),
    (b"data:image/png;base64", r"is a data URL without the ',' before its data$"),
    (b"data:image/png;base64,", r"is a data URL with no data after the ','$"),
    (b"data:image/png;base64,iVBOR!!!", r"is a data URL whose data is not valid base64 \("),
    (b"data:image/png;base64,iVBO Rw==", r"is a data URL whose data is not valid base64"),
    (b"data:image/gif;base64,R0lGODlh", r"is a data URL declaring image/gif; only image/jpeg, "
                                        r"image/png or image/webp are accepted$"),
    (b"data:text/plain;base64,aGVsbG8=", r"is a data URL declaring text/plain; only "
                                         r"image/jpeg, image/png or image/webp are accepted$"),
    (b"data:;base64,aGVsbG8=", r"is a data URL declaring no media type; only"),
    (b"data:image/" + b"x" * 500 + b";base64,aGk=",
     r"is a data URL declaring image/x{58}\.\.\.; only"),
])
def test_data_url_bytes_refuses_a_malformed_data_url_naming_the_row(text, message):
    with pytest.raises(InvalidInputError, match=r"^IMAGE\[3\] " + message):
        data_url_bytes(text, EFFICIENTNET, "IMAGE[3]")


@pytest.mark.parametrize(("media", "fmt", "bytes_are"), [
    ("image/png", "JPEG", "a JPEG"), ("image/jpeg", "WEBP", "a WEBP"),
    ("image/webp", "PNG", "a PNG"),
])
def test_data_url_bytes_refuses_a_declared_type_that_disagrees_with_the_bytes(
        photos, media, fmt, bytes_are):
    with pytest.raises(InvalidInputError, match=rf"^IMAGE\[0\] is a data URL declaring {media}, "
                                                rf"but its bytes are {bytes_are}$"):
        data_url_bytes(data_url(media, photos[fmt]), EFFICIENTNET, "IMAGE[0]")


def test_data_url_bytes_names_what_the_bytes_are_when_not_the_declared_type(cat):
    with pytest.raises(InvalidInputError, match=r"declaring image/png, but its bytes are a GIF$"):
        data_url_bytes(data_url("image/png", encode(cat, "GIF")), EFFICIENTNET)
    with pytest.raises(InvalidInputError, match=r"declaring image/png, but its bytes are not a "
                                                r"PNG$"):
        data_url_bytes(data_url("image/png", b"\x00garbage"), EFFICIENTNET)


def test_data_url_bytes_accepts_only_the_specs_formats(photos):
    with pytest.raises(InvalidInputError, match=r"declaring image/jpeg; only image/png are "
                                                r"accepted$"):
        data_url_bytes(data_url("image/jpeg", photos["JPEG"]), ImageSpec(image_formats=("PNG",)))


def test_data_url_bytes_refuses_a_payload_too_long_for_the_byte_limit_before_decoding_it():
    payload = b"!" * 4000  # not base64 at all: decoding it would say so
    with pytest.raises(InvalidInputError, match=r"^IMAGE is a data URL of 4000 base64 "
                                                r"characters, at least 2998 bytes decoded, over "
                                                r"the limit of 2997 bytes$"):
        data_url_bytes(b"data:image/png;base64," + payload, ImageSpec(max_image_bytes=2997))


def test_data_url_bytes_lets_a_payload_at_the_byte_limit_through(photos):
    png = photos["PNG"]
    assert data_url_bytes(data_url("image/png", png), ImageSpec(max_image_bytes=len(png))) == png


@pytest.mark.parametrize(("length", "fewest"), [(0, 0), (4, 1), (8, 4), (12, 7), (1000, 748)])
def test_base64_min_size_is_never_above_what_valid_base64_decodes_to(length, fewest):
    assert base64_min_size(length) == fewest
    for pad in (0, 1, 2):
        if length > pad:
            decoded = base64.b64decode(b"A" * (length - pad) + b"=" * pad, validate=True)
            assert len(decoded) >= fewest


def test_image_bytes_passes_raw_bytes_and_decodes_base64_of_an_image(photos):
    for data in photos.values():
        assert image_bytes(data, EFFICIENTNET) == data
        assert image_bytes(base64.b64encode(data), EFFICIENTNET) == data
        assert image_bytes(base64.b64encode(data).decode(), EFFICIENTNET) == data  # a str row


def test_image_bytes_reads_a_data_url_row_naming_its_row_in_errors(photos):
    assert image_bytes(data_url("image/webp", photos["WEBP"]), EFFICIENTNET) == photos["WEBP"]
    with pytest.raises(InvalidInputError, match=r"^IMAGE\[1\] is a data URL declaring "
                                                r"image/png, but its bytes are a JPEG$"):
        image_bytes(data_url("image/png", photos["JPEG"]), EFFICIENTNET, "IMAGE[1]")


def test_image_bytes_always_reads_a_row_starting_data_as_a_data_url():
    with pytest.raises(InvalidInputError, match=r"^IMAGE is a data URL without the ','"):
        image_bytes(b"data: this is not base64 at all", EFFICIENTNET)


def test_image_bytes_leaves_text_that_is_not_base64_of_an_image_to_decode_image():
    garbage = base64.b64encode(b"\x00garbage" * 10)
    assert image_bytes(garbage, EFFICIENTNET) == garbage
    assert image_bytes(b"not base64!", EFFICIENTNET) == b"not base64!"


def test_image_bytes_does_not_decode_base64_too_long_for_the_byte_limit(photos):
    text = base64.b64encode(photos["JPEG"])
    spec = ImageSpec(max_image_bytes=base64_min_size(len(text)) - 1)
    assert image_bytes(text, spec) is text  # as sent: decode_image refuses it by its size
    with pytest.raises(InvalidInputError, match=rf"^IMAGE is {len(text)} bytes, over the limit"):
        decode_image(image_bytes(text, spec), spec)


# --- top-k ---------------------------------------------------------------------------------

LABELS = ["zero", "one", "two", "three"]


def test_top_k_returns_ids_labels_and_softmax_probabilities_best_first():
    logits = np.array([[1.0, 3.0, 0.0, 2.0]], np.float32)
    ids, labels, probs = top_k(logits, 3, LABELS)
    assert ids.tolist() == [[1, 3, 0]] and ids.dtype == np.int64
    assert labels.tolist() == [["one", "three", "zero"]]
    expected = np.exp([3.0, 2.0, 1.0]) / np.exp([1.0, 3.0, 0.0, 2.0]).sum()
    np.testing.assert_allclose(probs[0], expected, rtol=1e-6)
    assert probs.dtype == np.float32


def test_top_k_of_one_row_returns_one_dimensional_results():
    ids, labels, probs = top_k(np.array([0.0, 0.0, 5.0, 0.0]), 1, LABELS)
    assert ids.tolist() == [2] and labels.tolist() == ["two"] and probs.shape == (1,)


def test_top_k_is_stable_for_huge_logits():
    ids, _, probs = top_k(np.array([[1e4, 1e4 - 1, -1e4, 0.0]]), 2, LABELS)
    assert ids.tolist() == [[0, 1]]
    assert np.isfinite(probs).all()
    np.testing.assert_allclose(probs[0], [1 / (1 + np.exp(-1)), np.exp(-1) / (1 + np.exp(-1))],
                               rtol=1e-6)


def test_top_k_breaks_ties_by_the_lower_class_id():
    ids, _, probs = top_k(np.array([[2.0, 5.0, 5.0, 5.0], [1.0, 1.0, 1.0, 1.0]]), 3, LABELS)
    assert ids.tolist() == [[1, 2, 3], [0, 1, 2]]
    assert probs[1].tolist() == [0.25, 0.25, 0.25]


@pytest.mark.parametrize("k", [0, -1, 5, True, 2.0, "2", None])
def test_top_k_refuses_a_bad_k_with_invalid_input(k):
    with pytest.raises(InvalidInputError, match=r"^top_k must be an integer from 1 to 4, got "):
        top_k(np.zeros((1, 4)), k, LABELS)


def test_top_k_accepts_a_numpy_integer_k():
    assert top_k(np.zeros((1, 4)), np.int64(4), LABELS)[0].shape == (1, 4)


def test_top_k_refuses_labels_that_do_not_match_the_classes():
    with pytest.raises(ValueError, match=r"^3 labels for 4 classes$"):
        top_k(np.zeros((1, 4)), 1, LABELS[:3])


def test_top_k_reports_non_finite_logits_as_a_model_error_not_the_clients():
    with pytest.raises(ModelError, match="non-finite logits") as caught:
        top_k(np.array([[0.0, np.nan, 1.0, 2.0]]), 1, LABELS)
    assert not isinstance(caught.value, InvalidInputError)


def test_softmax_rows_sum_to_one():
    probs = softmax(np.random.default_rng(1).normal(size=(5, 1000)) * 30)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-12)
