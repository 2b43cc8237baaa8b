"""What a text request may ask besides its texts (runtime.tokenization, the front's
cut, the SDK's options and results): a model's prompts, its Matryoshka sizes, counting
tokens without encoding, and one-request similarity calls."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from tmr_client.calls import Call
from tmr_client.contract import OVERLENGTH_POLICIES, policy_outcome
from tmr_client.errors import InvalidInputError as ClientInvalidInput
from tmr_client.model_info import ModelInfo
from tmr_client.options import CallOptions
from tmr_client.results import TokenCount, cosines

from core.settings import Prompts, TextFrontSettings, dims_list
from python_backends.embed import cut
from runtime.errors import InvalidInputError
from runtime.tokenization import (
    Specials,
    TextEncoder,
    TextLimits,
    TextModel,
    TextOptions,
    count_text,
    fit_text,
    request_options,
)
from tests.conftest import MINILM_SOURCE

SPECIALS = Specials(lead=1, trail=1)  # [CLS] ... [SEP], as MiniLM frames a text
PROMPTS = Prompts.parse(json.dumps({"query": "query: ", "passage": "passage: "}))
MODEL = TextModel("e5", PROMPTS, "", (384, 256, 128))


def options(model: TextModel = MODEL, **given: object) -> TextOptions:
    return request_options(json.dumps(given), TextLimits(), SPECIALS, model)


def test_a_named_prompt_or_the_models_default_is_put_before_the_text():
    assert options(prompt_name="query").prompt == "query: "
    assert options().prompt == ""
    with_default = TextModel("e5", PROMPTS, "passage", (384,))
    assert options(with_default).prompt == "passage: "
    assert options(with_default, prompt_name="query").prompt == "query: "


@pytest.mark.parametrize(("model", "given", "message"), [
    (MODEL, {"prompt_name": "doc"},
     "parameter 'prompt_name' names no prompt of model 'e5': got \"doc\"; its prompts: "
     "passage, query"),
    (MODEL, {"prompt_name": 7}, "got 7"),
    (TextModel("minilm", sizes=(384,)), {"prompt_name": "query"}, "it has no prompts"),
    (MODEL, {"dimensions": 100}, "must be one of model 'e5''s sizes: 384, 256, 128; got 100"),
    (MODEL, {"dimensions": "256"}, 'got "256"'),
    (MODEL, {"dimensions": True}, "got true"),
    (TextModel("minilm", sizes=(384,)), {"dimensions": 128},
     "384 (it declares no Matryoshka sizes"),
    (MODEL, {"count_only": "yes"}, "parameter 'count_only' must be true or false"),
])
def test_an_unknown_prompt_or_size_is_refused_naming_the_models_own(model, given, message):
    with pytest.raises(InvalidInputError) as caught:
        options(model, **given)
    assert message in str(caught.value)


def test_a_declared_size_is_asked_and_the_models_own_size_is_no_cut():
    assert options(dimensions=256).dimensions == 256
    assert options(dimensions=384).dimensions is None
    assert options(count_only=True).count_only is True


def test_settings_read_prompts_and_sizes_from_the_front_config():
    config = {"parameters": {"prompts": {"string_value": json.dumps({"q": "query: "})},
                             "default_prompt_name": {"string_value": "q"},
                             "matryoshka_dims": {"string_value": "128, 256"}}}
    settings = TextFrontSettings.from_parameters(config)
    assert settings.prompts.get("q") == "query: " and settings.default_prompt_name == "q"
    assert settings.matryoshka_dims == (256, 128) == dims_list("256,128,256")
    with pytest.raises(ValueError, match="JSON object"):
        Prompts.parse('["query: "]')


PREFIX = [7, 8]  # the prompt's own tokens
LIMITS = TextLimits(max_tokens=8, max_windows_per_text=4)


def framed(body: list[int]) -> list[int]:
    return [101, *body, 102]


def test_every_window_of_a_chunked_text_starts_with_the_prompt():
    ids = framed([*PREFIX, *range(10, 20)])  # 14 tokens: 2 prompt + 10 text
    fitted = fit_text(ids, SPECIALS, LIMITS, TextOptions("chunk", 1), 0, prefix=2)
    # each window: [CLS] prompt (2) + 4 text tokens [SEP] = 8 tokens
    assert [row[1:3] for row in fitted.rows] == [PREFIX] * len(fitted.rows)
    assert all(len(row) <= LIMITS.max_tokens for row in fitted.rows)
    texts = [row[3:-1] for row in fitted.rows]
    assert texts[0][0] == 10 and texts[-1][-1] == 19  # the text covered, in order
    assert all(a[-1] == b[0] for a, b in itertools.pairwise(texts))  # overlapping by 1


def test_the_prompt_counts_toward_the_limit_and_truncation_keeps_it():
    ids = framed([*PREFIX, *range(10, 16)])  # 10 tokens, over 8
    with pytest.raises(InvalidInputError, match="10 tokens, over the limit of 8"):
        fit_text(ids, SPECIALS, LIMITS, TextOptions("reject", 0), 3, prefix=2)
    cut_text = fit_text(ids, SPECIALS, LIMITS, TextOptions("truncate", 0), 0, prefix=2)
    assert cut_text.rows == [[101, *PREFIX, 10, 11, 12, 13, 102]] and cut_text.truncated == 2


def test_a_prompt_that_fills_the_model_leaves_no_room_and_says_so():
    ids = framed([1, 2, 3, 4, 5, 6, 7, 9])
    with pytest.raises(InvalidInputError, match="the prompt is 6 tokens, which leaves no room"):
        fit_text(ids, SPECIALS, LIMITS, TextOptions("chunk", 0), 0, prefix=6)
    with pytest.raises(InvalidInputError, match="no tokens once tokenized"):
        fit_text(framed(PREFIX), SPECIALS, LIMITS, TextOptions("chunk", 0), 0, prefix=2)


@pytest.mark.parametrize("length", [1, 4, 6, 7, 12, 17, 40])
@pytest.mark.parametrize("overlap", [0, 2])
def test_a_count_says_what_each_policy_does_exactly_as_fitting_does(length, overlap):
    ids = framed([*PREFIX, *range(100, 100 + length)])
    count = count_text(ids, SPECIALS, LIMITS, TextOptions("chunk", overlap), 0, prefix=2)
    assert count.tokens == len(ids)
    for policy in OVERLENGTH_POLICIES:
        try:
            fitted = fit_text(ids, SPECIALS, LIMITS, TextOptions(policy, overlap), 0,
                              prefix=2)
        except InvalidInputError:
            assert policy_outcome(policy, count.truncated, count.windows) == "refused"
            continue
        outcome = policy_outcome(policy, count.truncated, count.windows)
        if len(fitted.rows) > 1:
            assert outcome == "chunked" and len(fitted.rows) == count.windows
        elif fitted.truncated:
            assert outcome == "truncated" and fitted.truncated == count.truncated
        else:
            assert outcome == "fits"


def test_prompted_ids_are_the_tokens_of_prompt_and_text_as_one_string():
    encoder = TextEncoder(MINILM_SOURCE / "tokenizer.json")
    ids, prefix = encoder.prompted_ids(["a cat"], "query: ")
    assert ids == encoder.token_ids(["query: a cat"]) and prefix == 2  # "query", ":"
    bare, none = encoder.prompted_ids(["a cat"], "")
    assert (bare, none) == (encoder.token_ids(["a cat"]), 0)


def test_a_cut_keeps_the_first_values_and_normalises_again_where_the_model_does():
    vectors = np.arange(1, 13, dtype=np.float32).reshape(2, 6)
    kept = cut(vectors.copy(), 4, normalize=True)
    assert kept.shape == (2, 4)
    assert np.allclose(np.linalg.norm(kept, axis=1), 1.0)
    assert np.allclose(kept * np.linalg.norm(vectors[:, :4], axis=1, keepdims=True),
                       vectors[:, :4])
    assert np.array_equal(cut(vectors.copy(), 4, normalize=False), vectors[:, :4])
    assert cut(vectors, None, normalize=True) is vectors


def test_the_sdk_sends_the_prompt_the_size_and_count_only_as_request_parameters():
    sent = CallOptions(prompt_name="query", dimensions=256, count_only=True)
    assert sent.request_parameters() == {"prompt_name": "query", "dimensions": 256,
                                         "count_only": True}
    assert CallOptions().request_parameters() == {}
    for bad in ({"prompt_name": ""}, {"prompt_name": 3}, {"dimensions": 0},
                {"dimensions": 2.5}):
        with pytest.raises(ClientInvalidInput):
            CallOptions(**bad)


def test_a_token_count_says_what_each_policy_does():
    fits, long = TokenCount(5, 0, 1), TokenCount(300, 44, 2)
    assert fits.fits and [fits.outcome(p) for p in OVERLENGTH_POLICIES] == ["fits"] * 3
    assert [long.outcome(p) for p in OVERLENGTH_POLICIES] == ["refused", "truncated",
                                                               "chunked"]
    assert TokenCount(9000, 8744, 0).outcome("chunk") == "refused"  # over the windows limit


def rows(n: int) -> np.ndarray:
    return np.array([b"t"] * n, dtype=np.object_).reshape(-1, 1)


def test_a_similarity_call_is_one_request_within_the_models_batch():
    info = ModelInfo(max_batch=4, outputs=(), in_flight=1, request_rows=2)
    call = Call("embed", rows(4), "TEXT", (), one_request=True)
    assert [piece for piece, _ in call.chunks(info)] == [slice(0, 4)]
    with pytest.raises(ClientInvalidInput, match="over model 'embed''s max_batch_size of 4 "
                                                 r"\(a similarity call takes at most 3 texts"):
        Call("embed", rows(5), "TEXT", (), one_request=True).chunks(info)
    unknown = ModelInfo(1, (), 1, 1, max_batch_known=False)  # the server decides
    assert len(Call("embed", rows(5), "TEXT", (), one_request=True).chunks(unknown)) == 1


def test_cosines_of_each_row_with_the_source():
    source = np.array([1.0, 0.0])
    got = cosines(source, np.array([[2.0, 0.0], [0.0, 3.0], [1.0, 1.0], [0.0, 0.0]]))
    assert np.allclose(got, [1.0, 0.0, 2 ** -0.5, 0.0])
