"""Mutated JPEGs, PNGs and WebPs: decode_image returns an image in the spec's mode or
raises InvalidInputError, and nothing else (no other exception, no crash, no hang)."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from runtime.errors import InvalidInputError
from runtime.image_inputs import image_bytes
from runtime.images import ImageSpec, decode_image, preprocess_into
from tests.image_samples import MUTATIONS, cat, fuzz_seeds, mutate

pytestmark = pytest.mark.timeout(600)

FUZZ = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
# Small limits keep a mutated header's huge sizes cheap to refuse (1 Mpixel, 256 KB).
SPECS = (ImageSpec(color_mode="RGB", resize=48, crop=32, max_pixels=2**20,
                   max_image_bytes=2**18),
         ImageSpec(color_mode="L", resize=28, crop=28, max_pixels=2**20,
                   max_image_bytes=2**18))
SEEDS = fuzz_seeds(cat().resize((60, 40)))
mutations = st.lists(st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 2**20),
                               st.integers(0, 2**32 - 1)), min_size=1, max_size=4)


def decodes_or_refuses(data: bytes, spec: ImageSpec) -> None:
    """The contract under fuzzing: an image in the spec's mode that preprocesses, or a 400."""
    try:
        image = decode_image(data, spec, "IMAGE[0]")
    except InvalidInputError as err:
        assert str(err).startswith("IMAGE[0] "), err
        return
    assert isinstance(image, Image.Image) and image.mode == spec.color_mode
    preprocess_into(image, spec, np.empty(spec.shape, np.float32))


def test_every_fuzz_seed_is_a_valid_image_of_its_format():
    for fmt, seeds in SEEDS.items():
        for seed in seeds:
            assert Image.open(io.BytesIO(seed)).format == fmt
            decodes_or_refuses(seed, SPECS[0])


@pytest.mark.parametrize("fmt", list(SEEDS))
@FUZZ
@given(data=st.data(), edits=mutations, spec=st.sampled_from(SPECS))
def test_a_mutated_image_decodes_or_is_refused_with_invalid_input(fmt, data, edits, spec):
    seed = data.draw(st.sampled_from(SEEDS[fmt]), label="seed")
    decodes_or_refuses(mutate(seed, edits), spec)


@pytest.mark.parametrize("fmt", list(SEEDS))
@FUZZ
@given(data=st.data(), edits=mutations)
def test_a_mutated_data_url_or_base64_row_decodes_or_is_refused(fmt, data, edits):
    seed = data.draw(st.sampled_from(SEEDS[fmt]), label="seed")
    media = data.draw(st.sampled_from(["image/jpeg", "image/png", "image/webp", "IMAGE/JPG",
                                       "image/gif", ""]), label="media")
    text = base64.b64encode(seed)
    row = data.draw(st.sampled_from([text, b"data:" + media.encode() + b";base64," + text]),
                    label="row")
    try:
        decodes_or_refuses(image_bytes(mutate(row, edits), SPECS[0], "IMAGE[0]"), SPECS[0])
    except InvalidInputError as err:
        assert str(err).startswith("IMAGE[0] "), err
