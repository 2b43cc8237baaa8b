"""tmr_client.failure: what a client does after a failed request, as a value, and both
clients' send loops carrying it out the same way (over a fake transport)."""

from __future__ import annotations

import asyncio
import gc
import random
import time
import weakref
from typing import Any

import numpy as np
import pytest
from tmr_client import AsyncClient, Client
from tmr_client.calls import Call
from tmr_client.core import ClientBase
from tmr_client.deadlines import Deadline
from tmr_client.errors import (
    DeadlineExceededError,
    InvalidInputError,
    ModelNotReadyError,
    QueueFullError,
    RateLimitedError,
    ServerError,
    ServerUnreachableError,
    TritonClientError,
    UnavailableError,
)
from tmr_client.failure import Raise, Reroute, Retry, Why, decide
from tmr_client.model_info import ModelInfo
from tmr_client.options import CallOptions
from tmr_client.retry import NO_RETRY, RetryPolicy
from tritonclient.utils import InferenceServerException

POLICY = RetryPolicy(attempts=3, base_delay_s=0.05, max_delay_s=1.0, max_retry_after_s=30.0)
NOW = 100.0
ROWS = np.array([[b"a"]], dtype=np.object_)


def call(model: str = "embed", timeout: float | None = None, priority: int | None = None) -> Call:
    return Call(model, ROWS, "TEXT", ("EMBEDDING",), CallOptions(priority=priority),
                Deadline.after(timeout, now=NOW))


def with_retry_after(err: TritonClientError, seconds: float | None) -> TritonClientError:
    err.retry_after_s = seconds
    return err


def decided(err: TritonClientError, attempt: int = 1, the_call: Call | None = None,
            now: float = NOW) -> Any:
    return decide(the_call or call(timeout=10.0), err, attempt, POLICY, random.Random(0), now)


@pytest.mark.parametrize("err", [
    QueueFullError("Exceeds maximum queue size", "503"),
    UnavailableError("Service Unavailable", "503"),
    RateLimitedError("rate limit exceeded", "429"),
])
def test_a_retriable_error_is_retried_after_at_least_its_retry_after(err):
    assert decided(with_retry_after(err, 2.0)) == Retry(2.0, Why.RETRIABLE)


@pytest.mark.parametrize("err", [
    QueueFullError("Exceeds maximum queue size", "StatusCode.UNAVAILABLE"),
    ModelNotReadyError("Request for unknown model: 'embed' is not ready"),
    ServerUnreachableError("ConnectionRefusedError: refused"),
])
def test_a_retriable_error_without_retry_after_backs_off_by_the_policy(err):
    decision = decided(err)
    assert isinstance(decision, Retry) and 0 <= decision.delay_s <= POLICY.base_delay_s


def test_a_retry_after_past_the_deadline_raises_the_error_itself_at_once():
    err = with_retry_after(QueueFullError("Exceeds maximum queue size", "503"), 2.0)
    assert decided(err, the_call=call(timeout=1.0)) == Raise(err, Why.GIVE_UP)


def test_a_retry_after_over_the_policys_cap_raises_at_once():
    err = with_retry_after(RateLimitedError("rate limit exceeded", "429"), 60.0)
    assert decided(err) == Raise(err, Why.GIVE_UP)


@pytest.mark.parametrize("err", [
    InvalidInputError("TEXT[0] is empty", "400"),
    ServerError("internal", "500"),
    DeadlineExceededError("Request timeout expired", "StatusCode.DEADLINE_EXCEEDED"),
])
def test_a_non_retriable_error_is_raised_as_it_is(err):
    assert decided(err) == Raise(err, Why.GIVE_UP)


def test_a_retriable_error_is_raised_once_the_tries_are_spent():
    err = QueueFullError("Exceeds maximum queue size", "503")
    assert isinstance(decided(err, attempt=POLICY.attempts - 1), Retry)
    assert decided(err, attempt=POLICY.attempts) == Raise(err, Why.GIVE_UP)


def test_a_full_lane_reroutes_to_its_front_at_once_whatever_the_policy():
    full = QueueFullError("Exceeds maximum queue size", "503")
    lane = call("embed_interactive", timeout=10.0, priority=1)
    assert decide(lane, full, 1, NO_RETRY, random.Random(0), NOW) == Reroute("embed")
    assert decide(lane, full, 5, POLICY, random.Random(0), NOW) == Reroute("embed")


def test_only_a_full_queue_on_a_lane_reroutes():
    busy = UnavailableError("Service Unavailable", "503")
    assert isinstance(decided(busy, the_call=call("embed_interactive", 10.0)), Retry)
    full = QueueFullError("Exceeds maximum queue size", "503")
    assert isinstance(decided(full, the_call=call("embed", 10.0)), Retry)


def test_past_the_deadline_every_failure_raises_deadline_exceeded_naming_the_call():
    for err in (QueueFullError("Exceeds maximum queue size", "503"),
                InvalidInputError("bad", "400")):
        decision = decided(err, the_call=call("embed_interactive", 2.0), now=NOW + 2.0)
        assert isinstance(decision, Raise) and decision.why is Why.DEADLINE
        assert isinstance(decision.error, DeadlineExceededError)
        assert str(decision.error) == ("deadline exceeded: the call to 'embed_interactive' "
                                       "took more than its timeout of 2 s")


def test_without_a_deadline_only_the_policy_decides():
    err = QueueFullError("Exceeds maximum queue size", "503")
    assert isinstance(decided(err, the_call=call(), now=NOW + 1e6), Retry)


def test_the_clients_on_failure_uses_their_retry_policy_and_the_clock():
    err = QueueFullError("Exceeds maximum queue size", "503")
    with Client("localhost:8000", retry=NO_RETRY) as c:
        assert c.on_failure(call(), err, 1) == Raise(err, Why.GIVE_UP)
    with Client("localhost:8000", seed=1) as c:
        assert isinstance(c.on_failure(call(), err, 1), Retry)
        assert c.on_failure(call(timeout=1.0), err, 1, now=NOW + 1.0).why is Why.DEADLINE


def test_next_try_carries_the_decision_out_without_io():
    full = QueueFullError("Exceeds maximum queue size", "503")
    bad = InvalidInputError("bad", "400")
    with Client("localhost:8000", retry=NO_RETRY) as c:
        rerouted, delay = c._next_try(call("embed_interactive", priority=1), full, 1)
        assert (rerouted.model, delay) == ("embed", 0.0)
        with pytest.raises(InvalidInputError) as raised:
            c._next_try(call(), bad, 1)
        assert raised.value is bad
        with pytest.raises(DeadlineExceededError, match=r"timeout of 0\.001 s") as late:
            c._next_try(Call("embed", ROWS, "TEXT", (), deadline=Deadline(0.001, 0.0)), bad, 1)
        assert late.value.__cause__ is bad


class Answer:
    """An InferResult of one row."""

    def __init__(self, model: str) -> None:
        self.model = model

    def as_numpy(self, name: str) -> np.ndarray | None:
        return np.ones((1, 2), np.float32) if name == "EMBEDDING" else None

    def get_response(self) -> dict[str, str]:
        return {"model_name": self.model, "model_version": "1"}


class Transport:
    """tritonclient's infer, failing with `failures` first; records the models asked."""

    def __init__(self, failures: list[InferenceServerException]) -> None:
        self.failures, self.models = list(failures), []

    def answer(self, model: str) -> Answer:
        self.models.append(model)
        if self.failures:
            raise self.failures.pop(0)
        return Answer(model)

    def retry_after(self) -> float | None:
        return 0.01  # what the last answer said

    def infer(self, model: str, inputs: Any, **kwargs: Any) -> Answer:
        return self.answer(model)

    def close(self) -> None:
        pass


class AsyncTransport(Transport):
    async def infer(self, model: str, inputs: Any, **kwargs: Any) -> Answer:
        return self.answer(model)

    async def close(self) -> None:
        pass


FULL = InferenceServerException("Exceeds maximum queue size", status="503")
BUSY = InferenceServerException("Service Unavailable", status="503")
INFO = ModelInfo(max_batch=8, outputs=("EMBEDDING",), in_flight=1, request_rows=8)


def prepared(client: ClientBase, transport: Transport) -> None:
    """The client on `transport`, its models' info and the lane known (no I/O)."""
    client._client = transport
    client._infos.update({"embed": INFO, "embed_interactive": INFO})
    client._lanes["embed_interactive"] = True


def sync_embed(failures: list[InferenceServerException], **kwargs: Any) -> list[str]:
    transport = Transport(failures)
    real = Client("localhost:8000", seed=0)
    real._client.close()
    with real as c:
        prepared(c, transport)
        result = c.embed_with_info(["a"], **kwargs)
    assert result.model_name == transport.models[-1]
    return transport.models


def async_embed(failures: list[InferenceServerException], **kwargs: Any) -> list[str]:
    transport = AsyncTransport(failures)

    async def run() -> None:
        c = AsyncClient("localhost:8000", seed=0)
        await c._client.close()
        prepared(c, transport)
        async with c:
            await c.embed_with_info(["a"], **kwargs)

    asyncio.run(run())
    return transport.models


@pytest.mark.parametrize("embed", [sync_embed, async_embed], ids=["sync", "asyncio"])
def test_both_clients_send_a_full_lanes_request_to_its_front_then_retry_by_the_policy(embed):
    assert embed([FULL], priority=1) == ["embed_interactive", "embed"]
    assert embed([FULL, BUSY], priority=1) == ["embed_interactive", "embed", "embed"]
    assert embed([BUSY, BUSY], priority=2) == ["embed"] * 3


@pytest.mark.parametrize("embed", [sync_embed, async_embed], ids=["sync", "asyncio"])
def test_both_clients_raise_what_on_failure_decides(embed):
    with pytest.raises(UnavailableError, match="Service Unavailable") as raised:
        embed([BUSY] * 3)
    assert raised.value.retry_after_s == 0.01
    with pytest.raises(InvalidInputError, match="bad text"):
        embed([InferenceServerException("bad text", status="400")])


class Pending:
    """tritonclient's pending HTTP request: only its own frames refer to it."""

    def __init__(self, transport: Transport, model: str, wait_s: float) -> None:
        self.transport, self.model, self.wait_s = transport, model, wait_s

    def get_result(self, timeout: float | None = None) -> Answer:
        time.sleep(self.wait_s)
        return self.transport.answer(self.model)


class HoldingTransport(Transport):
    """Fails after `wait_s`, from a pending request's frame, as tritonclient's does."""

    def __init__(self, failure: tuple[str, str], wait_s: float = 0.0) -> None:
        super().__init__([])
        self.failure, self.wait_s = failure, wait_s
        self.pending: list[weakref.ref] = []

    def async_infer(self, model: str, inputs: Any, **kwargs: Any) -> Pending:
        pending = Pending(self, model, self.wait_s)
        self.pending.append(weakref.ref(pending))
        return pending

    def infer(self, model: str, inputs: Any, **kwargs: Any) -> Answer:
        return self.async_infer(model, inputs).get_result()

    def answer(self, model: str) -> Answer:
        message, status = self.failure  # a new error: a shared one would keep its traceback
        raise InferenceServerException(message, status=status)


def failed_with(client: Client, timeout: float | None) -> type[BaseException] | None:
    """The type of the error an embed call raises (the error itself is let go)."""
    try:
        client.embed(["a"], timeout=timeout)
    except TritonClientError as err:
        return type(err)
    return None


@pytest.mark.parametrize(("failure", "timeout", "raised"), [
    (("bad text", "400"), None, InvalidInputError),
    (("Service Unavailable", "503"), 0.05, DeadlineExceededError),
])
def test_a_failed_call_lets_go_of_the_request_it_abandoned(failure, timeout, raised):
    """No reference cycle through the raised error's traceback: without the garbage
    collector, the abandoned request is freed as soon as the caller drops the error (a sync
    HTTP request kept alive holds the connection the next call waits for)."""
    transport = HoldingTransport(failure, wait_s=0.0 if timeout is None else 0.06)
    gc.disable()
    try:
        with Client("localhost:8000", retry=NO_RETRY) as c:
            prepared(c, transport)
            assert failed_with(c, timeout) is raised  # and dropped: pytest.raises keeps it
            assert [ref() for ref in transport.pending] == [None]
    finally:
        gc.enable()
