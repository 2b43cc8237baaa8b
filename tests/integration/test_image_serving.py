"""The image-classification family served: real photos and MNIST digits through the front
models as JPEG, PNG and WebP (lossy, lossless, alpha, animated), base64 JSON, data URLs and
binary tensors, the SDK sync and async over HTTP and gRPC, and every hostile image the
issue lists, each with its 400 while the server stays healthy."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import struct
from collections.abc import Sequence

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image
from tmr_client import (
    NO_RETRY,
    AsyncClient,
    Client,
    InvalidInputError,
    RequestTooLargeError,
)

from runtime.images import ImageBatchBuffer, ImageSpec, softmax
from tests.conftest import REPOSITORY
from tests.image_samples import (
    animated_webp,
    bomb,
    cat,
    coffee,
    encode,
    half_clear,
    mnist_test_pngs,
    raw_png,
    rgba_png,
    sixteen_bit_rgb_png,
)
from tests.integration.helpers import assert_serving, http_post

pytestmark = pytest.mark.timeout(180)

CATS = {281, 282, 285}  # tabby, tiger cat, Egyptian cat
ESPRESSO = 967


def model_config(name: str) -> dict:
    from google.protobuf import text_format
    from google.protobuf.json_format import MessageToDict
    from tritonclient.grpc import model_config_pb2 as mc

    text = (REPOSITORY / name / "config.pbtxt").read_text(encoding="utf-8")
    return MessageToDict(text_format.Parse(text, mc.ModelConfig()),
                         preserving_proto_field_name=True)


def binary_body(images: Sequence[bytes], parameters: dict | None = None) -> tuple[bytes, dict]:
    """A binary-tensor request: each image a 4-byte little-endian length, then its bytes."""
    payload = b"".join(struct.pack("<I", len(i)) + i for i in images)
    header = {"inputs": [{"name": "IMAGE", "datatype": "BYTES", "shape": [len(images), 1],
                          "parameters": {"binary_data_size": len(payload)}}]}
    if parameters:
        header["parameters"] = parameters
    head = json.dumps(header).encode()
    return head + payload, {"Inference-Header-Content-Length": str(len(head))}


def json_row(image: bytes) -> str:
    """How JSON carries an image row: a data URL as its text, anything else as base64."""
    return image.decode() if image.startswith(b"data:") else base64.b64encode(image).decode()


def data_url(media: str, image: bytes) -> bytes:
    return f"data:{media};base64,".encode() + base64.b64encode(image)


def json_body(images: Sequence[bytes], parameters: dict | None = None) -> bytes:
    """A JSON request: base64 text per image (JSON cannot carry bytes), or a data URL."""
    body = {"inputs": [{"name": "IMAGE", "datatype": "BYTES", "shape": [len(images), 1],
                        "data": [json_row(i) for i in images]}]}
    if parameters:
        body["parameters"] = parameters
    return json.dumps(body).encode()


def post(url: str, model: str, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    status, answer = http_post(url, f"/v2/models/{model}/infer", body, headers)
    return status, json.loads(answer)


def outputs(answer: dict) -> dict[str, list]:
    return {o["name"]: o["data"] for o in answer["outputs"]}


def offline_probabilities(front: str, images: Sequence[bytes]) -> np.ndarray:
    """The same images preprocessed by the same code and run by onnxruntime on the
    exported FP32 ONNX: what the server must answer."""
    config = model_config(front)
    spec = ImageSpec.from_config(config)
    primary = config["parameters"]["primary_model"]["string_value"]
    inputs = ImageBatchBuffer(spec, len(images)).fill(list(images))
    session = ort.InferenceSession(str(REPOSITORY / primary / "1" / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    return softmax(session.run(None, {"pixel_values": inputs})[0])


# -- answers --------------------------------------------------------------------------------


def test_digits_classifies_the_first_200_mnist_test_images_as_the_export_does(http_url):
    pngs, labels = mnist_test_pngs(200)
    with Client(http_url, model="digits") as client:
        result = client.classify(pngs, top_k=3)
    assert result.model_name == "digits"
    assert set(result.served_by) == {"digits_onnx:1:fp32:L0"}
    top1 = [p[0].class_id for p in result.predictions]
    assert np.mean(np.array(top1) == np.array(labels)) >= 0.98  # the export measured 0.99
    expected = offline_probabilities("digits", pngs)
    for row, predictions in enumerate(result.predictions):
        assert [p.label for p in predictions] == [str(p.class_id) for p in predictions]
        got = [p.probability for p in predictions]
        assert got == sorted(got, reverse=True)
        np.testing.assert_allclose(got, np.sort(expected[row])[::-1][:3], atol=1e-4)


def test_efficientnet_finds_the_cat_and_the_espresso_over_grpc_async(grpc_url):
    photos = [encode(cat(), "JPEG", quality=90), encode(coffee(), "PNG")]

    async def classify() -> list:
        async with AsyncClient(grpc_url, protocol="grpc", model="efficientnet_lite0") as c:
            return (await c.classify(photos, priority=1)).predictions

    predictions = asyncio.run(classify())
    assert [len(p) for p in predictions] == [5, 5]  # the model's default top_k
    assert predictions[0][0].class_id in CATS and "cat" in predictions[0][0].label
    assert (predictions[1][0].class_id, predictions[1][0].label) == (ESPRESSO, "espresso")
    expected = offline_probabilities("efficientnet_lite0", photos)
    for row, ranked in enumerate(predictions):
        assert [p.class_id for p in ranked] == list(np.argsort(-expected[row])[:5])
        np.testing.assert_allclose([p.probability for p in ranked],
                                   np.sort(expected[row])[::-1][:5], atol=1e-4)


def test_base64_json_and_binary_tensors_get_the_same_answer(http_url):
    photo = encode(cat(), "JPEG", quality=85)
    status, as_json = post(http_url, "efficientnet_lite0", json_body([photo]))
    assert status == 200, as_json
    body, headers = binary_body([photo])
    status, as_binary = post(http_url, "efficientnet_lite0", body, headers)
    assert status == 200, as_binary
    assert outputs(as_json)["CLASS_IDS"] == outputs(as_binary)["CLASS_IDS"]
    assert outputs(as_json)["LABELS"][0] in ("tabby, tabby cat", "tiger cat", "Egyptian cat")
    np.testing.assert_allclose(outputs(as_json)["PROBABILITIES"],
                               outputs(as_binary)["PROBABILITIES"], atol=1e-6)


def assert_same_ranking(got: Sequence, expected: Sequence) -> None:
    """The same classes in the same order, with the same probabilities (to float noise)."""
    assert [p.class_id for p in got] == [p.class_id for p in expected]
    np.testing.assert_allclose([p.probability for p in got],
                               [p.probability for p in expected], atol=1e-6)


WEBPS = {
    "lossy WebP": lambda: encode(cat(), "WEBP", quality=85),
    "lossless WebP": lambda: encode(cat(), "WEBP", lossless=True),
    "WebP with alpha": lambda: encode(half_clear(cat()), "WEBP", quality=90),
}


@pytest.mark.parametrize("case", list(WEBPS))
def test_a_webp_cat_is_a_cat_over_http_and_grpc_as_the_export_says(http_url, grpc_url, case):
    webp = WEBPS[case]()
    expected = offline_probabilities("efficientnet_lite0", [webp])[0]
    for url, protocol in ((http_url, "http"), (grpc_url, "grpc")):
        with Client(url, protocol=protocol, model="efficientnet_lite0") as client:
            (ranked,) = client.classify([webp], top_k=5).predictions
        assert CATS & {p.class_id for p in ranked[:3]}, (protocol, ranked)
        assert [p.class_id for p in ranked] == list(np.argsort(-expected)[:5])
        np.testing.assert_allclose([p.probability for p in ranked],
                                   np.sort(expected)[::-1][:5], atol=1e-4)


def test_binary_base64_and_a_data_url_of_one_webp_get_the_same_answer(http_url):
    webp = encode(cat(), "WEBP", quality=85)
    body, headers = binary_body([webp])
    answers = [post(http_url, "efficientnet_lite0", body, headers),
               post(http_url, "efficientnet_lite0", json_body([webp])),
               post(http_url, "efficientnet_lite0", json_body([data_url("image/webp", webp)]))]
    assert [status for status, _ in answers] == [200, 200, 200], answers
    first = outputs(answers[0][1])
    assert first["LABELS"][0] in ("tabby, tabby cat", "tiger cat", "Egyptian cat")
    for _, answer in answers[1:]:
        assert outputs(answer)["CLASS_IDS"] == first["CLASS_IDS"]
        np.testing.assert_allclose(outputs(answer)["PROBABILITIES"], first["PROBABILITIES"],
                                   atol=1e-6)


def test_the_sdk_sends_data_url_strings_over_http_and_grpc(http_url, grpc_url):
    photo = encode(cat(), "JPEG", quality=90)
    rows = [data_url("image/webp", encode(cat(), "WEBP")).decode(),
            data_url("IMAGE/JPG", photo).decode(), photo]
    for url, protocol in ((http_url, "http"), (grpc_url, "grpc")):
        with Client(url, protocol=protocol, model="efficientnet_lite0") as client:
            result = client.classify(rows, top_k=3)
        assert [CATS & {p.class_id for p in r} != set() for r in result.predictions] == [
            True, True, True], (protocol, result.predictions)
        assert_same_ranking(result.predictions[1], result.predictions[2])  # one JPEG, 2 ways


def test_an_animated_webp_is_answered_for_its_first_frame(http_url):
    """Lossless frames: the first is the cat's exact pixels, so the answer is the cat
    PNG's, and not the second frame's espresso."""
    photo, cup = cat(), coffee().resize(cat().size)
    animated = animated_webp([photo, cup], lossless=True)
    with Client(http_url, model="efficientnet_lite0") as client:
        got, as_png, second = client.classify(
            [animated, encode(photo, "PNG"), encode(cup, "PNG")], top_k=5).predictions
    assert_same_ranking(got, as_png)
    assert got[0].class_id in CATS and second[0].class_id == ESPRESSO


def test_a_request_chooses_its_top_k(http_url):
    status, answer = post(http_url, "digits", json_body(mnist_test_pngs(2)[0], {"top_k": 10}))
    assert status == 200, answer
    assert len(outputs(answer)["CLASS_IDS"]) == 20  # [2, 10], flattened
    assert sorted(outputs(answer)["CLASS_IDS"][:10]) == list(range(10))
    assert abs(sum(outputs(answer)["PROBABILITIES"][:10]) - 1) < 1e-4


@pytest.mark.parametrize("top_k", [0, 11, "3", 2.5, True])
def test_a_bad_top_k_gets_a_400_naming_the_range(http_url, top_k):
    status, answer = post(http_url, "digits", json_body(mnist_test_pngs(1)[0], {"top_k": top_k}))
    assert status == 400, answer
    assert f"top_k must be an integer from 1 to 10, got {top_k!r}" in answer["error"]


def test_the_sdk_refuses_a_bad_top_k_before_sending(http_url):
    with Client(http_url, model="digits") as client, \
            pytest.raises(InvalidInputError, match="top_k must be an integer >= 1, got 0"):
        client.classify(mnist_test_pngs(1)[0], top_k=0)


ODD_BUT_VALID = {
    "CMYK JPEG": lambda: encode(cat().convert("CMYK"), "JPEG", quality=95),
    "RGBA PNG": lambda: rgba_png(cat()),
    "palette PNG": lambda: encode(cat().quantize(64), "PNG"),
    "grayscale JPEG": lambda: encode(cat().convert("L"), "JPEG"),
    "progressive JPEG": lambda: encode(cat(), "JPEG", progressive=True),
    "EXIF-rotated JPEG": lambda: rotated_jpeg(cat()),
}


def rotated_jpeg(image: Image.Image) -> bytes:
    """The photo stored sideways with EXIF orientation 6 (display rotated 90 degrees)."""
    exif = Image.Exif()
    exif[0x0112] = 6
    return encode(image.transpose(Image.Transpose.ROTATE_90), "JPEG", exif=exif.tobytes())


@pytest.mark.parametrize("case", list(ODD_BUT_VALID))
def test_odd_but_valid_photos_are_served_and_still_a_cat(http_url, case):
    with Client(http_url, model="efficientnet_lite0") as client:
        (ranked,) = client.classify([ODD_BUT_VALID[case]()], top_k=5).predictions
    assert CATS & {p.class_id for p in ranked}, ranked


@pytest.mark.parametrize("image", [sixteen_bit_rgb_png(), raw_png(8, 8, 1, 0, b"\x0f"),
                                   encode(Image.fromarray(np.full((30, 30), 40000, np.uint16)),
                                          "PNG")], ids=["16-bit RGB", "1-bit", "16-bit gray"])
def test_16_bit_and_1_bit_pngs_are_served(http_url, image):
    for model in ("digits", "efficientnet_lite0"):
        with Client(http_url, model=model) as client:
            (ranked,) = client.classify([image], top_k=1).predictions
        assert 0.0 < ranked[0].probability <= 1.0


def big_photo_jpeg(megabytes: float) -> bytes:
    """A noisy JPEG of about `megabytes` MB (a phone photo's size, hard to compress)."""
    rng = np.random.default_rng(1)
    height = int(megabytes * 1e6 / 1.12 / 2000)  # noise at q95: ~1.12 bytes a pixel
    pixels = rng.integers(0, 256, (height, 2000, 3), dtype=np.uint8)
    return encode(Image.fromarray(pixels), "JPEG", quality=95)


def test_images_bigger_than_an_http_request_go_over_grpc_and_calls_split_by_bytes(
        http_url, grpc_url):
    """Triton 2.51's HTTP server dies on a ~4 MiB body: the SDK never sends one. Over
    HTTP a call is cut into requests by bytes; an image too big for any HTTP request is
    refused before sending and is served over gRPC (efficientnet_lite0 takes 16 MiB)."""
    medium, big = big_photo_jpeg(1.5), big_photo_jpeg(6)
    assert 1e6 < len(medium) < 2e6 and len(big) > 4.2e6
    with Client(http_url, model="efficientnet_lite0") as client:
        result = client.classify([medium] * 5, top_k=1)
        assert len(result.predictions) == 5 and len(result.request_ids) == 3  # 2 + 2 + 1
        with pytest.raises(RequestTooLargeError, match=r"IMAGE\[0\] is \d+ bytes; one http "
                           r"request holds at most \d+ bytes of data \(gRPC takes larger"):
            client.classify([big])
    with Client(grpc_url, protocol="grpc", model="efficientnet_lite0") as client:
        (ranked,) = client.classify([big], top_k=1).predictions
    assert 0.0 < ranked[0].probability <= 1.0
    assert_serving(http_url)


# -- hostile images -------------------------------------------------------------------------


def truncated_jpeg() -> bytes:
    photo = encode(cat(), "JPEG", quality=90)
    return photo[: len(photo) // 2]


def noise_png(side: int) -> bytes:
    """Incompressible RGB noise: side x side x 3 bytes of PNG."""
    pixels = np.random.default_rng(0).integers(0, 256, (side, side, 3), dtype=np.uint8)
    return encode(Image.fromarray(pixels), "PNG", compress_level=0)


def truncated_webp() -> bytes:
    photo = encode(cat(), "WEBP")
    return photo[: len(photo) // 2]


def iso_bmff(major: bytes, *compatible: bytes) -> bytes:
    """The first bytes of a HEIC or AVIF file: an `ftyp` box, then a little of a `meta`."""
    payload = major + b"\x00\x00\x00\x00" + b"".join(compatible)
    return (struct.pack(">I", 8 + len(payload)) + b"ftyp" + payload
            + b"\x00\x00\x00\x21meta\x00\x00\x00\x00" + b"\x00" * 64)


HOSTILE = [
    ("not an image", "digits", lambda: b"name,label\nchelsea,cat\n",
     r"IMAGE\[0\] is not a JPEG, PNG or WEBP image \(Pillow: "),
    ("a PDF", "digits", lambda: b"%PDF-1.7 this is a pdf, not a photo",
     r"IMAGE\[0\] is a PDF document; only JPEG, PNG or WEBP are accepted"),
    ("a truncated JPEG", "efficientnet_lite0", truncated_jpeg,
     r"IMAGE\[0\] is a truncated JPEG"),
    ("a truncated WebP", "efficientnet_lite0", truncated_webp,
     r"IMAGE\[0\] is a truncated WEBP: its RIFF header says \d+ bytes, \d+ arrived"),
    ("zero bytes", "digits", lambda: b"",
     r"IMAGE\[0\] is empty \(0 bytes\); send an encoded JPEG, PNG or WEBP"),
    ("a 20000x20000 PNG bomb", "efficientnet_lite0", lambda: bomb(20000),
     r"IMAGE\[0\] is .*over the limit of 40000000 pixels"),
    ("an image over the byte limit", "digits", lambda: noise_png(620),
     r"IMAGE\[0\] is \d+ bytes, over the limit of 1048576 bytes"),
    ("a GIF", "digits", lambda: encode(cat(), "GIF"),
     r"IMAGE\[0\] is a GIF image; only JPEG, PNG or WEBP are accepted"),
    ("base64 of garbage", "digits", lambda: base64.b64encode(b"\x00garbage" * 10),
     r"IMAGE\[0\] is not a JPEG, PNG or WEBP image"),
    ("a RIFF WAV header", "efficientnet_lite0",
     lambda: b"RIFF\x24\x08\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x02\x00" + b"\x00" * 32,
     r"IMAGE\[0\] is a WAV audio file; only JPEG, PNG or WEBP are accepted"),
    ("a HEIC header", "efficientnet_lite0", lambda: iso_bmff(b"heic", b"mif1", b"heic"),
     r"IMAGE\[0\] is a HEIC image; only JPEG, PNG or WEBP are accepted"),
    ("an AVIF header", "efficientnet_lite0", lambda: iso_bmff(b"avif", b"mif1", b"miaf"),
     r"IMAGE\[0\] is an AVIF image; only JPEG, PNG or WEBP are accepted"),
    ("a data URL whose type disagrees with its bytes", "efficientnet_lite0",
     lambda: data_url("image/png", encode(cat(), "JPEG")),
     r"IMAGE\[0\] is a data URL declaring image/png, but its bytes are a JPEG"),
    ("a data URL without base64", "digits", lambda: b"data:image/png,%89PNG%0D%0A",
     r"IMAGE\[0\] is a data URL without ';base64'; only base64 data URLs are accepted"),
    ("a data URL of a GIF", "digits", lambda: data_url("image/gif", encode(cat(), "GIF")),
     r"IMAGE\[0\] is a data URL declaring image/gif; only image/jpeg, image/png or "
     r"image/webp are accepted"),
    ("a data URL of invalid base64", "digits", lambda: b"data:image/jpeg;base64,/9j/4AAQ!!",
     r"IMAGE\[0\] is a data URL whose data is not valid base64"),
    ("an empty data URL", "digits", lambda: b"data:image/webp;base64,",
     r"IMAGE\[0\] is a data URL with no data after the ','"),
]


@pytest.mark.parametrize(("case", "model", "make", "message"), HOSTILE,
                         ids=[c[0] for c in HOSTILE])
def test_a_hostile_image_gets_a_precise_400_binary_and_json(http_url, case, model, make,
                                                            message):
    image = make()
    body, headers = binary_body([image])
    for request in ((body, headers), (json_body([image]), None)):
        status, answer = post(http_url, model, *request)
        assert status == 400, answer
        assert re.search(message, answer["error"]), answer["error"]
    assert_serving(http_url)


def test_a_hostile_image_fails_its_own_request_not_its_batch_neighbours(grpc_url):
    """Good and bad requests at once: Triton batches them together; only the bad fail."""
    good, bad = mnist_test_pngs(1)[0][0], truncated_jpeg()

    async def run() -> list:
        async with AsyncClient(grpc_url, protocol="grpc", model="digits",
                                    retry=NO_RETRY) as client:
            return await asyncio.gather(*(client.classify([good if i % 2 else bad])
                                          for i in range(32)), return_exceptions=True)

    answers = asyncio.run(run())
    assert all(isinstance(a, InvalidInputError) for a in answers[0::2]), answers[0::2]
    assert all(a.predictions[0][0].class_id == 7 for a in answers[1::2]), answers[1::2]


def test_one_bad_image_in_a_request_names_its_row(http_url):
    pngs, _ = mnist_test_pngs(3)
    body, headers = binary_body([pngs[0], pngs[1], b"not an image", pngs[2]])
    status, answer = post(http_url, "digits", body, headers)
    assert status == 400, answer
    assert answer["error"].startswith("IMAGE[2] is not a JPEG, PNG or WEBP image")


def test_an_image_tensor_of_the_wrong_dtype_is_refused_by_triton(http_url):
    body = json.dumps({"inputs": [{"name": "IMAGE", "datatype": "FP32", "shape": [1, 1],
                                   "data": [1.0]}]}).encode()
    status, answer = post(http_url, "digits", body)
    assert status == 400
    assert "expects 'BYTES'" in answer["error"]


def test_the_sdk_refuses_images_that_are_not_bytes(http_url):
    with Client(http_url, model="digits") as client, \
            pytest.raises(InvalidInputError, match=r"bytes"):
        client.classify([io.BytesIO(b"x")])  # type: ignore[list-item]
