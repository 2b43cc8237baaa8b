"""python_backends.tokenization: limits, text decoding, the token limit, padding, the encoder."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer

from core.params import ConfigError
from python_backends.errors import InvalidInputError
from python_backends.tokenization import (
    TextEncoder,
    TextLimits,
    apply_token_limit,
    decode_texts,
    pad_batch,
    padding_id,
)
from tests.conftest import MINILM_SOURCE

TOKENIZER = MINILM_SOURCE / "tokenizer.json"

CLS_ID, SEP_ID, PAD_ID = 101, 102, 0


def config(**params: str) -> dict:
    """A config dict shaped like Triton's JSON model config."""
    return {"parameters": {k: {"string_value": v} for k, v in params.items()}}


def texts_tensor(*items: bytes) -> np.ndarray:
    return np.array(list(items), dtype=np.object_).reshape(-1, 1)


@pytest.fixture(scope="module")
def shipped_tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(TOKENIZER))


def test_text_limits_from_config_without_parameters_uses_defaults():
    assert TextLimits.from_config({}) == TextLimits(256, 16384, "reject")


def test_text_limits_from_config_reads_string_values_of_parameters():
    limits = TextLimits.from_config(
        config(max_tokens="32", max_text_bytes="100", overlength_policy="truncate"))
    assert limits == TextLimits(max_tokens=32, max_text_bytes=100, overlength="truncate")


def test_text_limits_from_config_treats_empty_string_value_as_default():
    assert TextLimits.from_config(config(max_tokens="")).max_tokens == 256


@pytest.mark.parametrize(("key", "value", "why"), [
    ("max_tokens", "0", "must be a positive integer"),
    ("max_tokens", "-3", "must be a positive integer"),
    ("max_text_bytes", "lots", "invalid literal"),
    ("overlength_policy", "drop", "must be one of reject, truncate"),
])
def test_text_limits_from_config_rejects_invalid_value_naming_the_key(key, value, why):
    with pytest.raises(ConfigError, match=rf"parameter '{key}'='{value}' is invalid: .*{why}"):
        TextLimits.from_config(config(**{key: value}))


def test_decode_texts_returns_utf8_strings_in_order():
    raw = texts_tensor("héllo".encode(), b"world", "日本".encode())
    assert decode_texts(raw, TextLimits()) == ["héllo", "world", "日本"]


def test_decode_texts_rejects_invalid_utf8_naming_index_and_byte():
    with pytest.raises(InvalidInputError, match=r"TEXT\[1\] is not valid UTF-8: .* at byte 2$"):
        decode_texts(texts_tensor(b"fine", b"ab\xff"), TextLimits())


@pytest.mark.parametrize("blank", [b"", b"   ", b" \t\n "])
def test_decode_texts_rejects_empty_and_whitespace_only_text(blank):
    with pytest.raises(InvalidInputError,
                       match=r"^TEXT\[0\] is empty; send at least one non-space character$"):
        decode_texts(texts_tensor(blank, b"ok"), TextLimits())


def test_decode_texts_rejects_text_over_max_text_bytes_naming_size_and_limit():
    limits = TextLimits(max_text_bytes=10)
    assert decode_texts(texts_tensor(b"x" * 10), limits) == ["x" * 10]
    with pytest.raises(InvalidInputError,
                       match=r"^QUERY\[0\] is 11 bytes, over the limit of 10 bytes$"):
        decode_texts(texts_tensor(b"x" * 11), limits, name="QUERY")


def test_apply_token_limit_leaves_text_within_limit_unchanged():
    ids = [CLS_ID, 5, 6, SEP_ID]
    assert apply_token_limit(ids, TextLimits(max_tokens=4), 0) == ids


def test_apply_token_limit_rejects_text_over_limit_naming_index_and_length():
    with pytest.raises(InvalidInputError, match=(
            r"^TEXT\[3\] is 5 tokens, over the limit of 4 tokens \(overlength_policy=reject\)$")):
        apply_token_limit([CLS_ID, 5, 6, 7, SEP_ID], TextLimits(max_tokens=4), 3)


def test_apply_token_limit_truncate_keeps_first_max_minus_one_ids_and_the_final_id():
    ids = [CLS_ID, 5, 6, 7, 8, SEP_ID]
    kept = apply_token_limit(ids, TextLimits(max_tokens=4, overlength="truncate"), 0)
    assert kept == [CLS_ID, 5, 6, SEP_ID]


def test_pad_batch_pads_to_longest_row_with_int64_ids_and_mask():
    ids, mask = pad_batch([[1, 2, 3], [4], [5, 6]], pad_id=9)
    assert ids.shape == mask.shape == (3, 3)
    assert ids.dtype == mask.dtype == np.int64
    assert ids.tolist() == [[1, 2, 3], [4, 9, 9], [5, 6, 9]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]


def test_pad_batch_refuses_an_empty_batch():
    with pytest.raises(ValueError, match="cannot pad an empty batch"):
        pad_batch([])


def encode(encoder: TextEncoder, limits: TextLimits, texts: list[str]) -> tuple:
    """What a text front model does with a batch: ids, the token limit, padding."""
    rows = [apply_token_limit(r, limits, i) for i, r in enumerate(encoder.token_ids(texts))]
    return pad_batch(rows, encoder.pad_id)


def test_a_batch_is_padded_to_its_longest_text_not_to_128():
    encoder = TextEncoder(TOKENIZER)
    ids, mask = encode(encoder, TextLimits(), ["hi", "Triton serves sentence embeddings."])
    longest = len(encoder.token_ids(["Triton serves sentence embeddings."])[0])
    assert ids.shape == mask.shape == (2, longest)
    assert longest < 128
    assert ids[0, :3].tolist() == encoder.token_ids(["hi"])[0]
    assert (ids[0, 3:] == PAD_ID).all()
    assert mask.sum(axis=1).tolist() == [3, longest]


def test_text_encoder_ids_of_one_text_equal_the_tokenizers_own_encoding(shipped_tokenizer):
    text = "A versioned Triton model repository for sentence embeddings."
    own = shipped_tokenizer.encode(text)
    own_ids = own.ids[: sum(own.attention_mask)]  # tokenizer.json pads to a fixed 128
    ids, mask = encode(TextEncoder(TOKENIZER), TextLimits(), [text])
    assert ids[0].tolist() == own_ids
    assert mask[0].tolist() == [1] * len(own_ids)


def test_texts_longer_than_128_tokens_are_kept_within_max_tokens():
    ids, _ = encode(TextEncoder(TOKENIZER), TextLimits(), ["word " * 200])
    assert ids.shape == (1, 202)


def test_truncate_policy_caps_at_max_tokens_and_ends_with_sep():
    limits = TextLimits(max_tokens=16, overlength="truncate")
    encoder = TextEncoder(TOKENIZER)
    full = encoder.token_ids(["many words " * 20])[0]
    ids, mask = encode(encoder, limits, ["many words " * 20, "short"])
    assert ids.shape == (2, 16)
    assert ids[0].tolist() == [*full[:15], SEP_ID]
    assert mask[0].all()


def test_reject_policy_names_the_overlong_text():
    with pytest.raises(InvalidInputError, match=r"^TEXT\[1\] is \d+ tokens, over the limit of 8"):
        encode(TextEncoder(TOKENIZER), TextLimits(max_tokens=8),
               ["ok", "a text that is clearly longer than eight tokens in total"])


@pytest.mark.parametrize(("tokenizer_json", "pad"), [
    ({"padding": {"pad_id": 1, "pad_token": "<pad>"}}, 1),
    ({"added_tokens": [{"id": 0, "content": "[PAD]"}]}, 0),
    ({"added_tokens": [{"id": 3, "content": "<unk>"}, {"id": 1, "content": "<pad>"}]}, 1),
    ({}, 0),
])
def test_the_pad_id_is_the_one_the_tokenizer_declares(tokenizer_json, pad):
    assert padding_id(tokenizer_json) == pad
