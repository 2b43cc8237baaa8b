"""tmr_client.options.CallOptions: the one options object every verb of both clients builds,
and what both clients share without I/O (the call they start, wait_ready's error)."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect

import numpy as np
import pytest
from tmr_client import (
    AsyncClient,
    Client,
    DeadlineExceededError,
    InvalidInputError,
    ServerUnreachableError,
)
from tmr_client.calls import Call
from tmr_client.deadlines import Deadline
from tmr_client.model_info import ModelInfo
from tmr_client.options import CallOptions


def test_call_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        CallOptions().priority = 1  # type: ignore[misc]


def test_call_options_send_their_request_parameters_with_the_callers_own_last():
    options = CallOptions(rollout_key=42, truncate="chunk", chunk_overlap=np.int64(8),
                          top_k=3, parameters={"top_k": 5, "extra": "x"})
    assert options.request_parameters() == {"rollout_key": "42", "truncate": "chunk",
                                            "chunk_overlap": 8, "top_k": 5, "extra": "x"}
    assert type(options.request_parameters()["chunk_overlap"]) is int
    assert CallOptions(truncate=False).request_parameters() == {"truncate": False}
    assert CallOptions().request_parameters() == {}


@pytest.mark.parametrize(("options", "message"), [
    ({"truncate": "cut"}, "truncate must be True, False, None or one of reject, truncate, "
                          "chunk; got 'cut'"),
    ({"truncate": 1}, "truncate must be True, False, None or one of"),
    ({"chunk_overlap": -1}, "chunk_overlap must be an integer >= 0, got -1"),
    ({"chunk_overlap": 1.5}, "chunk_overlap must be an integer >= 0, got 1.5"),
    ({"top_k": 0}, "top_k must be an integer >= 1, got 0"),
    ({"top_k": True}, "top_k must be an integer >= 1, got True"),
    ({"timeout": -2}, "timeout must be a number of seconds > 0, got -2"),
])
def test_call_options_refuse_what_the_front_would_refuse(options, message):
    with pytest.raises(InvalidInputError, match=message.replace("(", r"\(")):
        CallOptions(**options)


@pytest.mark.parametrize(("truncate", "policy_chunks", "chunked"), [
    ("chunk", False, True), (None, True, True), (None, False, False), (True, True, False),
    ("reject", True, False),
])
def test_texts_are_cut_into_windows_when_the_call_or_else_the_model_says(
        truncate, policy_chunks, chunked):
    assert CallOptions(truncate=truncate).chunks_texts(policy_chunks) is chunked


def test_a_chunked_call_sends_fewer_rows_per_request():
    info = ModelInfo(64, ("EMBEDDING",), 1, request_rows=8, chunk_rows=2)
    rows = np.array([[b"t"]] * 8, dtype=np.object_)
    plain = Call("embed", rows, "TEXT", (), CallOptions())
    chunked = Call("embed", rows, "TEXT", (), CallOptions(truncate="chunk"))
    assert [s for s, _ in plain.chunks(info)] == [slice(0, 8)]
    assert [s for s, _ in chunked.chunks(info)] == [slice(0, 2), slice(2, 4), slice(4, 6),
                                                     slice(6, 8)]


def test_a_call_takes_the_clients_timeout_and_model_unless_it_names_its_own():
    with Client("localhost:8000", model="front", timeout=5) as c:
        plain = c._infer_call(np.array([[b"a"]], dtype=np.object_), "TEXT", (), CallOptions())
        own = c._embed_call(["a"], CallOptions(model="other", timeout=1.5))
    assert (plain.model, plain.options.timeout, plain.deadline.timeout) == ("front", 5.0, 5.0)
    assert (own.model, own.options.timeout, own.deadline.timeout) == ("other", 1.5, 1.5)
    assert plain.deadline.at is not None


def test_a_verb_refuses_a_bad_option_before_sending():
    with Client("localhost:8000") as c:
        with pytest.raises(InvalidInputError, match="truncate must be"):
            c.embed(["a"], truncate="cut")
        with pytest.raises(InvalidInputError, match="top_k must be an integer >= 1"):
            c.classify([b"\x89PNG"], top_k=0)
        with pytest.raises(InvalidInputError, match="priority must be an integer >= 0"):
            c.infer(np.array([[b"a"]], dtype=np.object_), "TEXT", ["EMBEDDING"], priority=-1)


def test_a_call_reports_its_progress_in_rows_after_each_chunk():
    seen: list[tuple[int, int]] = []
    call = Call("embed", np.array([[b"a"]] * 5, dtype=np.object_), "TEXT", (),
                CallOptions(on_progress=lambda done, total: seen.append((done, total))))
    report = call.reporter()
    for rows in (slice(2, 4), slice(0, 2), slice(4, 5)):  # in any order (asyncio)
        report(rows)
    assert seen == [(2, 5), (4, 5), (5, 5)]


def test_the_deadline_reads_its_clock_as_given():
    deadline = Deadline.after(2.0, now=10.0)
    assert (deadline.left(11.5), deadline.left(13.0)) == (0.5, 0.0)
    assert not deadline.expired(11.9) and deadline.expired(12.0)
    assert deadline.grpc("embed", now=11.0) == pytest.approx(11.0)  # 1 s + the grace
    assert deadline.queue_timeout_us("embed", now=11.5) == 500_000
    with pytest.raises(DeadlineExceededError, match="deadline exceeded"):
        deadline.remaining("embed", now=12.0)
    assert Deadline().left() is None and not Deadline().expired()


@pytest.mark.parametrize(("model", "target"), [("embed", "model 'embed'"), (None, "server")])
def test_both_clients_wait_ready_errors_name_the_model_when_one_was_asked_for(model, target):
    message = f"{target} at localhost:8000 not ready after 0 s"
    with Client("localhost:8000") as c, pytest.raises(ServerUnreachableError, match=message):
        c.wait_ready(timeout_s=0, model=model)

    async def wait() -> None:
        async with AsyncClient("localhost:8000") as c:
            await c.wait_ready(timeout_s=0, model=model)

    with pytest.raises(ServerUnreachableError, match=message):
        asyncio.run(wait())


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(fn) for name, fn in inspect.getmembers(cls, callable)
            if not name.startswith("_")}


def test_both_clients_offer_the_same_verbs_with_the_same_keywords():
    """What the twins still share is their public surface; the asyncio client's verbs are
    coroutines with the sync client's parameters and defaults."""
    sync, aio = public_methods(Client), public_methods(AsyncClient)
    assert sync.keys() == aio.keys()
    assert {n: list(s.parameters.values()) for n, s in sync.items()} == \
        {n: list(s.parameters.values()) for n, s in aio.items()}
    assert all(inspect.iscoroutinefunction(getattr(AsyncClient, name)) for name in aio
               if name != "on_failure")
