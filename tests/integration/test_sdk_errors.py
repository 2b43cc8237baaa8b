"""Every typed SDK error leaves its client usable (issue 56): on both protocols, sync and
asyncio, whether the caller keeps the error (and so its traceback and the frames of the
transport) or drops it, the next call on the same client object succeeds.

Each error is provoked on the session's server as a user would meet it: a client-side
deadline cut in flight, a refused input (a prompt the model lacks, a text over its length
with truncation off) and a model that does not exist. The errors of the server's side (a
server error, a full queue's refusal, an unavailable model) are test_error_path.py's."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tmr_client import (
    AsyncClient,
    Client,
    DeadlineExceededError,
    InvalidInputError,
    ModelNotFoundError,
    TritonClientError,
)

from tests.integration.test_sdk_install import LONG_TEXTS

pytestmark = pytest.mark.timeout(120)

# name -> (the call's keywords, the error it must raise)
CASES: dict[str, tuple[dict[str, Any], type[TritonClientError]]] = {
    "client deadline": ({"texts": LONG_TEXTS, "truncate": True, "timeout": 0.002},
                        DeadlineExceededError),
    "invalid input": ({"texts": ["x" * 10], "prompt_name": "no-such-prompt"},
                      InvalidInputError),
    "too long, refused": ({"texts": ["many words " * 400], "truncate": False},
                          InvalidInputError),
    "unknown model": ({"texts": ["x"], "model": "no_such_model"}, ModelNotFoundError),
}
KEPT: list[BaseException] = []  # errors a caller keeps, with their tracebacks


@pytest.fixture(scope="module", autouse=True)
def _let_go() -> Iterator[None]:
    """The kept errors go with the module, not at the interpreter's exit (where a gRPC
    channel they hold can no longer close cleanly)."""
    yield
    KEPT.clear()
    gc.collect()


def url_of(protocol: str, http_url: str, grpc_url: str) -> str:
    return f"{protocol}://{http_url if protocol == 'http' else grpc_url}"


def call(embed: Callable[..., Any], keywords: dict[str, Any]) -> Any:
    texts = keywords.pop("texts")
    return embed(texts, **keywords)


@pytest.mark.parametrize("kept", [True, False], ids=["kept", "dropped"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_sync_client_serves_after_each_error(protocol, case, kept, http_url, grpc_url):
    keywords, error = CASES[case]
    with Client(url_of(protocol, http_url, grpc_url), max_batch_size=8) as client:
        assert client.embed(["before"]).shape == (1, 384)
        for _ in range(3):  # three in a row, as a retrying caller meets them
            with pytest.raises(error) as caught:
                call(client.embed, dict(keywords))
            if kept:
                KEPT.append(caught.value)
        del caught
        gc.collect()
        assert client.embed(["after the error"]).shape == (1, 384)
        assert client.embed(["and again"] * 3).shape == (3, 384)


@pytest.mark.parametrize("kept", [True, False], ids=["kept", "dropped"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_asyncio_client_serves_after_each_error(protocol, case, kept, http_url, grpc_url):
    keywords, error = CASES[case]

    async def run() -> None:
        async with AsyncClient(url_of(protocol, http_url, grpc_url), max_batch_size=8) as c:
            assert (await c.embed(["before"])).shape == (1, 384)
            for _ in range(3):
                try:
                    await call(c.embed, dict(keywords))
                except error as err:
                    if kept:
                        KEPT.append(err)
                else:
                    pytest.fail(f"{case}: no {error.__name__}")
            gc.collect()
            assert (await c.embed(["after the error"])).shape == (1, 384)
            assert (await c.embed(["and again"] * 3)).shape == (3, 384)

    asyncio.run(run())
