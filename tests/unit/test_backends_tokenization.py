"""runtime.tokenization: limits, text decoding, the overlength policies (reject,
truncate, chunk), request options, windows and their pooling, padding, the encoder."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer

from core.params import ConfigError
from runtime.errors import InvalidInputError
from runtime.tokenization import (
    FittedText,
    Specials,
    TextEncoder,
    TextLimits,
    TextOptions,
    check_request_windows,
    decode_texts,
    fit_text,
    pad_batch,
    padding_id,
    pool_windows,
    request_options,
    row_digest,
    window_spans,
    windows_needed,
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
    assert TextLimits.from_config({}) == TextLimits(256, 131072, "reject", 32, 128, 256)


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
    ("overlength_policy", "drop", "must be one of reject, truncate, chunk"),
    ("chunk_overlap_tokens", "-1", "must be an integer >= 0"),
    ("max_windows_per_text", "0", "must be a positive integer"),
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


SPECIALS = Specials(1, 1)
REJECT, TRUNCATE, CHUNK = (TextOptions(p, 1) for p in ("reject", "truncate", "chunk"))


def fit(ids: list[int], limits: TextLimits, options: TextOptions = REJECT,
        index: int = 0) -> FittedText:
    return fit_text(ids, SPECIALS, limits, options, index)


def test_a_text_within_the_limit_is_one_row_whatever_the_policy():
    ids = [CLS_ID, 5, 6, SEP_ID]
    for options in (REJECT, TRUNCATE, CHUNK):
        assert fit(ids, TextLimits(max_tokens=4), options) == FittedText([ids], 4, 0)


def test_reject_names_the_text_its_length_and_what_to_send_instead():
    with pytest.raises(InvalidInputError, match=(
            r"^TEXT\[3\] is 5 tokens, over the limit of 4 tokens \(overlength_policy=reject; "
            r"send truncate=true to cut it or truncate=chunk to embed it in windows\)$")):
        fit([CLS_ID, 5, 6, 7, SEP_ID], TextLimits(max_tokens=4), REJECT, 3)


def test_truncate_keeps_the_special_tokens_and_counts_the_dropped_ones():
    fitted = fit([CLS_ID, 5, 6, 7, 8, SEP_ID], TextLimits(max_tokens=4), TRUNCATE)
    assert fitted == FittedText([[CLS_ID, 5, 6, SEP_ID]], tokens=6, truncated=2)
    assert fitted.encoded_tokens == 4


def test_truncate_keeps_every_special_token_of_a_tokenizer_with_two_at_each_end():
    two = Specials(2, 2)
    ids = [0, 1, 5, 6, 7, 8, 2, 3]
    fitted = fit_text(ids, two, TextLimits(max_tokens=6), TRUNCATE, 0)
    assert fitted.rows == [[0, 1, 5, 6, 2, 3]] and fitted.truncated == 2


def test_chunk_frames_each_overlapping_window_with_the_special_tokens():
    ids = [CLS_ID, *range(1, 11), SEP_ID]  # 10 tokens of text
    fitted = fit(ids, TextLimits(max_tokens=6), TextOptions("chunk", 1))  # windows of 4
    assert fitted.rows == [[CLS_ID, 1, 2, 3, 4, SEP_ID], [CLS_ID, 4, 5, 6, 7, SEP_ID],
                           [CLS_ID, 7, 8, 9, 10, SEP_ID]]
    assert (fitted.tokens, fitted.truncated, fitted.encoded_tokens) == (12, 0, 18)


def test_chunk_refuses_a_text_over_its_windows_limit_naming_the_count():
    limits = TextLimits(max_tokens=6, max_windows_per_text=2)
    with pytest.raises(InvalidInputError, match=(
            r"^TEXT\[1\] is 12 tokens: 3 windows of 4 text tokens overlapping by 1, over the "
            r"limit of 2 windows per text$")):
        fit([CLS_ID, *range(1, 11), SEP_ID], limits, TextOptions("chunk", 1), 1)


def test_a_request_over_its_windows_limit_is_refused():
    limits = TextLimits(max_windows_per_request=3)
    fitted = [FittedText([[1], [2]], 2), FittedText([[3], [4]], 2)]
    with pytest.raises(InvalidInputError, match=(
            r"^the request's 2 texts need 4 windows, over the limit of 3 windows per request")):
        check_request_windows(fitted, limits)
    check_request_windows(fitted[:1], limits)


@pytest.mark.parametrize("options", [REJECT, TRUNCATE, CHUNK])
def test_a_text_with_no_tokens_of_its_own_is_refused_whatever_the_policy(options):
    with pytest.raises(InvalidInputError, match=r"^TEXT\[2\] has no tokens once tokenized"):
        fit([CLS_ID, SEP_ID], TextLimits(), options, 2)


@pytest.mark.parametrize(("length", "width", "overlap", "spans"), [
    (3, 4, 1, [(0, 3)]),
    (4, 4, 1, [(0, 4)]),
    (5, 4, 1, [(0, 4), (3, 5)]),
    (10, 4, 0, [(0, 4), (4, 8), (8, 10)]),
    (10, 4, 3, [(0, 4), (1, 5), (2, 6), (3, 7), (4, 8), (5, 9), (6, 10)]),
])
def test_windows_cover_the_text_in_order_and_their_count_is_known_beforehand(
        length, width, overlap, spans):
    assert window_spans(length, width, overlap) == spans
    assert windows_needed(length, width, overlap) == len(spans)


def test_windows_cannot_overlap_by_their_whole_width():
    with pytest.raises(ValueError, match="cannot overlap by 4"):
        window_spans(10, 4, 4)


@pytest.mark.parametrize(("parameters", "policy", "overlap"), [
    (None, "reject", 32), ("", "reject", 32), ("{}", "reject", 32),
    ('{"truncate": true}', "truncate", 32), ('{"truncate": false}', "reject", 32),
    ('{"truncate": "chunk"}', "chunk", 32), ('{"truncate": "TRUNCATE"}', "truncate", 32),
    ('{"truncate": "false"}', "reject", 32), ('{"chunk_overlap": 0}', "reject", 0),
    ('{"top_k": 3, "rollout_key": "u"}', "reject", 32),
])
def test_request_options_read_truncate_and_chunk_overlap_else_the_models(parameters, policy,
                                                                         overlap):
    assert request_options(parameters, TextLimits(), SPECIALS) == TextOptions(policy, overlap)


@pytest.mark.parametrize(("parameters", "message"), [
    ('{"truncate": "cut"}', r"parameter 'truncate' must be true, false, or one of reject, "
                            r'truncate, chunk; got "cut"'),
    ('{"truncate": 1}', r"parameter 'truncate' must be .*; got 1$"),
    ('{"chunk_overlap": 254}', r"parameter 'chunk_overlap' must be an integer from 0 to 253 "
                               r"\(a window holds 254 tokens of text\); got 254"),
    ('{"chunk_overlap": -1}', r"got -1$"),
    ('{"chunk_overlap": true}', r"got true$"),
    ('{"chunk_overlap": "8"}', r'got "8"$'),
])
def test_bad_request_options_are_invalid_input_naming_the_parameter(parameters, message):
    with pytest.raises(InvalidInputError, match=message):
        request_options(parameters, TextLimits(), SPECIALS)


def test_pooled_windows_are_the_token_weighted_mean_normalised():
    vectors = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    pooled = pool_windows(vectors, [3, 1], normalize=True)
    assert pooled.dtype == np.float32
    np.testing.assert_allclose(pooled, np.array([3, 1]) / np.sqrt(10), rtol=1e-6)
    np.testing.assert_allclose(pool_windows(vectors, [3, 1], normalize=False), [0.75, 0.25])


def test_a_row_digest_names_its_ids_exactly():
    assert row_digest([101, 7, 102]) == row_digest((101, 7, 102))
    assert row_digest([101, 7, 102]) != row_digest([101, 7, 7, 102])


def test_the_shipped_tokenizer_frames_a_text_with_one_special_token_at_each_end():
    assert TextEncoder(TOKENIZER).specials == Specials(1, 1)


def test_pad_batch_pads_to_longest_row_with_int64_ids_and_mask():
    ids, mask = pad_batch([[1, 2, 3], [4], [5, 6]], pad_id=9)
    assert ids.shape == mask.shape == (3, 3)
    assert ids.dtype == mask.dtype == np.int64
    assert ids.tolist() == [[1, 2, 3], [4, 9, 9], [5, 6, 9]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]


def test_pad_batch_refuses_an_empty_batch():
    with pytest.raises(ValueError, match="cannot pad an empty batch"):
        pad_batch([])


def encode(encoder: TextEncoder, limits: TextLimits, texts: list[str],
           options: TextOptions | None = None) -> tuple:
    """What a text front model does with a batch: ids, the token limit, padding."""
    options = options or TextOptions(limits.overlength, limits.chunk_overlap)
    rows = [row for i, r in enumerate(encoder.token_ids(texts))
            for row in fit_text(r, encoder.specials, limits, options, i).rows]
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


@pytest.mark.parametrize("overlap", [0, 32, 200])
def test_chunk_windows_are_hugging_faces_own_sliding_window(overlap):
    """The windows of a long real text equal transformers' overflowing windows with
    stride = the overlap (export/chunk_reference.py builds its reference on them)."""
    from pathlib import Path

    from transformers import AutoTokenizer

    text = Path("/usr/share/common-licenses/GPL-3").read_text(encoding="utf-8")[:20000]
    encoder = TextEncoder(TOKENIZER)
    fitted = fit_text(encoder.token_ids([text])[0], encoder.specials, TextLimits(),
                      TextOptions("chunk", overlap), 0)
    hf = AutoTokenizer.from_pretrained(str(MINILM_SOURCE))(
        text, truncation=True, max_length=256, stride=overlap, return_overflowing_tokens=True)
    assert len(fitted.rows) > 10
    assert fitted.rows == [list(ids) for ids in hf["input_ids"]]
