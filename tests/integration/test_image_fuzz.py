"""Mutated JPEGs, PNGs and WebPs sent to the real server: every answer is a 200 or a 400
with a JSON error naming the row, never a 5xx or a dead stub, and the server still serves.

The sample is fixed: 30 mutations per format from a seeded generator (the unit fuzz,
tests/unit/test_image_fuzz.py, explores further in-process). Each goes as a binary
tensor, and in JSON as base64 or as a data URL declaring the seed's format.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.image_samples import cat, encode, fuzz_seeds, mutate, random_mutations
from tests.integration.helpers import assert_serving, http_post
from tests.integration.test_image_serving import binary_body, data_url, json_body

pytestmark = pytest.mark.timeout(300)

PER_FORMAT = 30
MEDIA = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp"}


def mutated_sample() -> list[tuple[str, bytes]]:
    """(format, mutated image): PER_FORMAT per format, the same on every run."""
    rng = np.random.default_rng(20261203)
    sample = []
    for fmt, seeds in fuzz_seeds(cat().resize((120, 80))).items():
        for i in range(PER_FORMAT):
            sample.append((fmt, mutate(seeds[i % len(seeds)], random_mutations(rng))))
    return sample


def answer_of(http_url: str, model: str, body: bytes, headers: dict | None) -> tuple[int, dict]:
    status, raw = http_post(http_url, f"/v2/models/{model}/infer", body, headers)
    return status, json.loads(raw)


def test_mutated_images_get_a_200_or_a_400_naming_the_row(http_url):
    seen = {200: 0, 400: 0}
    for i, (fmt, image) in enumerate(mutated_sample()):
        model = ("efficientnet_lite0", "digits")[i % 2]
        row = data_url(MEDIA[fmt], image) if i % 3 == 0 else image
        for body, headers in (binary_body([image]), (json_body([row]), None)):
            status, answer = answer_of(http_url, model, body, headers)
            assert status in (200, 400), (fmt, i, status, answer)
            seen[status] += 1
            if status == 400:
                assert answer["error"].startswith("IMAGE[0] "), (fmt, i, answer)
            else:
                assert len(answer["outputs"][0]["data"]) > 0, (fmt, i, answer)
    assert seen[200] > 0 and seen[400] > 0, seen  # the sample holds both kinds
    assert_serving(http_url)
    status, answer = answer_of(http_url, "efficientnet_lite0",
                               *binary_body([encode(cat(), "WEBP")]))
    assert status == 200, answer  # and the image front still serves a real photo
