"""tmr_client.shaping.image_tensor: a classify call's rows (encoded bytes, or data URL text)."""

from __future__ import annotations

import numpy as np
import pytest
from tmr_client.errors import InvalidInputError
from tmr_client.shaping import image_tensor

PNG = b"\x89PNG\r\n\x1a\n..."
DATA_URL = "data:image/webp;base64,UklGRg=="


def test_image_tensor_is_an_n_by_1_object_array_of_the_bytes_as_given():
    tensor = image_tensor([PNG, bytearray(b"\xff\xd8\xff"), memoryview(b"RIFF")])
    assert (tensor.shape, tensor.dtype) == ((3, 1), np.object_)
    assert tensor[:, 0].tolist() == [PNG, b"\xff\xd8\xff", b"RIFF"]


def test_image_tensor_sends_a_data_url_str_as_its_utf8_bytes():
    tensor = image_tensor([DATA_URL, "DATA:image/png;base64,iVBORw==", PNG])
    assert tensor[:, 0].tolist() == [DATA_URL.encode(), b"DATA:image/png;base64,iVBORw==", PNG]


@pytest.mark.parametrize("item", ["iVBORw0KGgo=", "cat.jpg", ""])
def test_image_tensor_refuses_a_str_that_is_not_a_data_url(item):
    with pytest.raises(InvalidInputError, match=r"^images\[1\] is str, not bytes \(an encoded "
                                                r"JPEG, PNG or WEBP\) or a data: URL str$"):
        image_tensor([PNG, item])


def test_image_tensor_refuses_a_single_data_url_not_in_a_sequence():
    with pytest.raises(InvalidInputError, match=r"^images must be a sequence of encoded images "
                                                r"\(bytes, or data URLs\), not a single string$"):
        image_tensor(DATA_URL)  # type: ignore[arg-type]
