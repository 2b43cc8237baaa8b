"""The verbs of both clients: each takes exactly its keyword set (the TypedDict its
`**keywords` unpack, tmr_client.options) or one `options=CallOptions(...)`, never both,
and refuses anything else as Python refuses an unknown keyword. No server: each client's
`_send` is replaced by one that raises the call it was given."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import typing
from typing import Any

import numpy as np
import pytest
from tmr_client import AsyncClient, CallOptions, Client, InvalidInputError
from tmr_client.calls import Call
from tmr_client.options import (
    ClassifyKeywords,
    CountKeywords,
    EmbedKeywords,
    InferKeywords,
    RerankKeywords,
    SimilarityKeywords,
    verb_keywords,
)

from core.paths import PROJECT_ROOT

COMMON = {"model", "priority", "timeout_ms", "timeout"}
# Each verb's keywords as its signature listed them before they became TypedDicts.
KEYWORDS = {
    "embed": COMMON | {"model_version", "rollout_key", "truncate", "chunk_overlap",
                       "prompt_name", "dimensions", "on_progress"},
    "embed_with_info": COMMON | {"model_version", "rollout_key", "truncate", "chunk_overlap",
                                 "prompt_name", "dimensions", "on_progress"},
    "count_tokens": COMMON | {"prompt_name", "chunk_overlap"},
    "similarity": COMMON | {"prompt_name", "dimensions", "truncate"},
    "classify": COMMON | {"top_k", "model_version", "rollout_key", "on_progress"},
    "infer": COMMON | {"model_version", "parameters", "on_progress"},
    "rerank": COMMON | {"model_version", "rollout_key", "truncate", "chunk_overlap",
                        "raw_scores", "on_progress"},
    "rerank_with_info": COMMON | {"model_version", "rollout_key", "truncate", "chunk_overlap",
                                  "raw_scores", "on_progress"},
}
TYPED = {"embed": EmbedKeywords, "embed_with_info": EmbedKeywords,
         "count_tokens": CountKeywords, "similarity": SimilarityKeywords,
         "classify": ClassifyKeywords, "infer": InferKeywords,
         "rerank": RerankKeywords, "rerank_with_info": RerankKeywords}
ROWS = {  # each verb's positional arguments
    "embed": (["a"],), "embed_with_info": (["a"],), "count_tokens": (["a"],),
    "similarity": ("a", ["b"]), "classify": ([b"\x89PNG"],),
    "infer": (np.array([[b"a"]], dtype=np.object_), "TEXT", ["EMBEDDING"]),
    "rerank": ("q", ["a"]), "rerank_with_info": ("q", ["a"]),
}


def progress(done: int, total: int) -> None:
    pass


VALID = {  # a value each option accepts
    "model": "front", "priority": 1, "timeout_ms": 250, "timeout": 2.0, "model_version": 3,
    "rollout_key": "user-42", "truncate": "chunk", "chunk_overlap": 8, "prompt_name": "query",
    "dimensions": 256, "top_k": 3, "parameters": {"extra": "x"}, "on_progress": progress,
    "count_only": True, "raw_scores": True,
}
CLIENTS = [Client, AsyncClient]


class Plain:
    """A verb as Python itself checks its keywords."""

    def embed(self, texts: list[str], *, model: str | None = None) -> None:
        pass


class Sent(Exception):
    """Raised by the test's `_send`: the call the verb would have sent."""

    def __init__(self, call: Call) -> None:
        super().__init__(call.model)
        self.call = call


def stop(call: Call) -> None:
    """The sync client's `_send` in these tests."""
    raise Sent(call)


async def stop_async(call: Call) -> None:
    """The asyncio client's `_send` in these tests."""
    raise Sent(call)


def raised(client: type, verb: str, *args: Any, **kwargs: Any) -> BaseException:
    """What `verb` of a new `client` raises when called with `args` (its rows when none)
    and `kwargs`: Sent with the call it started, or its error."""
    args = args or ROWS[verb]

    async def run_async() -> None:
        async with AsyncClient("localhost:8000") as c:
            c._send = stop_async  # type: ignore[method-assign]
            await getattr(c, verb)(*args, **kwargs)

    with pytest.raises(Exception) as err:  # the caller checks which
        if client is Client:
            with Client("localhost:8000") as c:
                c._send = stop  # type: ignore[method-assign]
                getattr(c, verb)(*args, **kwargs)
        else:
            asyncio.run(run_async())
    return err.value


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("verb", KEYWORDS)
def test_each_verb_takes_the_keywords_it_took_before_as_its_typeddict(client, verb):
    method = getattr(client, verb)
    hint = typing.get_type_hints(method)["keywords"]
    assert hint == typing.Unpack[TYPED[verb]]
    assert set(TYPED[verb].__annotations__) == KEYWORDS[verb] == verb_keywords(method)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("verb", KEYWORDS)
def test_each_verb_builds_its_options_from_all_its_keywords(client, verb):
    keywords = {name: VALID[name] for name in KEYWORDS[verb]}
    sent = raised(client, verb, **keywords)
    assert isinstance(sent, Sent)
    expected = CallOptions(**keywords, count_only=True if verb == "count_tokens" else None)
    assert sent.call.options == expected
    assert sent.call.model == "front"


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("verb", KEYWORDS)
def test_each_verb_refuses_every_other_option_as_python_refuses_an_unknown_keyword(
        client, verb):
    for name in {f.name for f in dataclasses.fields(CallOptions)} - KEYWORDS[verb]:
        err = raised(client, verb, **{name: VALID[name]})
        assert type(err) is TypeError
        assert str(err) == f"{client.__name__}.{verb}() got an unexpected keyword argument " \
                           f"{name!r}"


@pytest.mark.parametrize("client", CLIENTS)
def test_an_unknown_keyword_is_refused_in_the_words_python_uses(client):
    with pytest.raises(TypeError) as python:
        Plain().embed(["a"], top_k=3)  # type: ignore[call-arg]
    ours = raised(client, "embed", top_k=3)
    assert str(ours) == str(python.value).replace("Plain.", f"{client.__name__}.")
    assert str(raised(client, "embed", bogus=1)).endswith("unexpected keyword argument 'bogus'")


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("verb", KEYWORDS)
def test_each_verb_sends_the_options_it_is_given_as_they_are(client, verb):
    options = CallOptions(**{name: VALID[name] for name in KEYWORDS[verb]})
    sent = raised(client, verb, options=options)
    assert isinstance(sent, Sent)
    assert sent.call.options == (dataclasses.replace(options, count_only=True)
                                 if verb == "count_tokens" else options)


@pytest.mark.parametrize("client", CLIENTS)
def test_options_and_keywords_together_are_refused_before_anything_is_sent(client):
    err = raised(client, "embed", options=CallOptions(priority=1), timeout=2.0, priority=2)
    assert type(err) is TypeError
    assert str(err) == (f"{client.__name__}.embed() takes options= or keywords, not both; "
                        "got options= and timeout=, priority=")


@pytest.mark.parametrize("client", CLIENTS)
def test_options_the_verb_does_not_take_are_refused_inside_options_too(client):
    err = raised(client, "count_tokens", options=CallOptions(top_k=3))
    assert type(err) is TypeError
    assert str(err) == f"{client.__name__}.count_tokens() does not take 'top_k' (set in options=)"
    err = raised(client, "classify", options={"top_k": 3})
    assert type(err) is TypeError
    assert str(err) == f"{client.__name__}.classify() options= must be a CallOptions, not dict"


@pytest.mark.parametrize("client", CLIENTS)
def test_a_bad_keyword_value_is_still_refused_by_call_options(client):
    err = raised(client, "embed", truncate="cut")
    assert isinstance(err, InvalidInputError)
    assert str(err).startswith("truncate must be True, False, None or one of")


@pytest.mark.parametrize("client", CLIENTS)
def test_a_call_without_options_takes_the_clients_model_and_no_option(client):
    sent = raised(client, "embed", options=None)
    assert isinstance(sent, Sent)
    assert (sent.call.model, sent.call.options) == ("embed", CallOptions())


def test_both_clients_verbs_take_the_same_keyword_sets():
    for verb in KEYWORDS:
        assert verb_keywords(getattr(Client, verb)) == verb_keywords(getattr(AsyncClient, verb))


def test_every_keyword_is_a_call_options_field_of_the_same_type():
    fields = typing.get_type_hints(CallOptions)
    for typed in set(TYPED.values()):
        for name, hint in typing.get_type_hints(typed).items():
            assert fields[name] == hint, (typed.__name__, name)


def test_the_sdk_doc_lists_each_verbs_keywords_as_its_typeddict():
    doc = (PROJECT_ROOT / "docs" / "sdk.md").read_text(encoding="utf-8")
    header = "| verb | its other keywords | their TypedDict (`client/options.py`) |"
    rows = doc.split(header, 1)[1].split("\n\n", 1)[0].strip().splitlines()[1:]
    listed = {}
    for row in rows:
        verbs, keywords, typed = (re.findall(r"`(\w+)", cell) for cell in row.split("|")[1:4])
        listed.update({verb: (set(keywords) | COMMON, typed[0]) for verb in verbs})
    assert listed == {verb: (KEYWORDS[verb], TYPED[verb].__name__) for verb in KEYWORDS}


def test_a_subclass_overriding_a_verb_still_gets_the_clients_keyword_check():
    class Logged(Client):
        def embed(self, texts, **kw):  # type: ignore[override]
            return super().embed(texts, **kw)

    with Logged("localhost:8000") as c:
        c._send = stop  # type: ignore[method-assign]
        with pytest.raises(Sent):
            c.embed(["a"], priority=1)
        with pytest.raises(TypeError, match=r"^Client\.embed\(\) got an unexpected keyword "):
            c.embed(["a"], top_k=1)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("args", "keywords", "error", "message"), [
    (("q", ["a"]), {"model": "r", "top_n": 0}, InvalidInputError,
     "top_n must be an integer >= 1 or None, got 0"),
    (("", ["a"]), {"model": "r"}, InvalidInputError, "query is empty"),
    (("q", ["a", 3]), {"model": "r"}, InvalidInputError, r"documents\[1\] is int"),
    (("q", []), {"model": "r"}, InvalidInputError, "documents is empty"),
    (("q", ["a"]), {}, TypeError, "rerank needs model=, a text_ranking front"),
    (("q", ["a"]), {"model": ""}, TypeError, "rerank needs model="),
    (("q", ["a"]), {"options": CallOptions(priority=1)}, TypeError, "rerank needs model="),
])
def test_rerank_refuses_bad_arguments_before_anything_is_sent(client, args, keywords, error,
                                                              message):
    err = raised(client, "rerank", *args, **keywords)
    assert type(err) is error
    assert re.match(message, str(err))


@pytest.mark.parametrize("client", CLIENTS)
def test_rerank_takes_its_model_from_options_and_top_n_beside_them(client):
    sent = raised(client, "rerank_with_info", "q", ["a", "b"], top_n=1,
                  options=CallOptions(model="r", raw_scores=True))
    assert isinstance(sent, Sent)
    assert (sent.call.model, sent.call.input_names) == ("r", ("QUERY", "DOCUMENT"))
    assert sent.call.rows.tolist() == [[b"q", b"a"], [b"q", b"b"]]
