"""perf.image_inputs: a model's own perf images come from its source, not from perf code."""

from __future__ import annotations

import io

from PIL import Image

from core.paths import DEFAULT_REPOSITORY
from perf.image_inputs import model_images


def test_only_sources_that_define_perf_images_get_a_file_of_their_own() -> None:
    found = model_images(DEFAULT_REPOSITORY, count=3)
    assert set(found) == {"digits"}  # efficientnet_lite0's source defines none
    images = [Image.open(io.BytesIO(b)) for b in found["digits"]]
    assert [(i.format, i.mode, i.size) for i in images] == [("PNG", "L", (28, 28))] * 3
