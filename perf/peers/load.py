"""The HTTP JSON client that drives every server in the comparison through perf.load's
closed loop: an `Endpoint` says how one server is asked, and every answer is checked
(status 200 and a 384-d vector, else it counts as an error by kind):

    point = asyncio.run(closed_loop_point(openai_endpoint("http://localhost:7997", m), 8, 6))
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from core.families import TEXT_EMBEDDING
from perf.load import unique_texts
from server.goodput import LoadPoint, Outcome, Send, closed_loop, load_point

TEXT_IN = TEXT_EMBEDDING.contract.front_inputs[0].name
VECTOR_OUT = TEXT_EMBEDDING.contract.front_outputs[0].name
EMBEDDING_DIM = 384  # the served model's (all-MiniLM-L6-v2)
REQUEST_TIMEOUT_S = 30.0

Body = Callable[[str], dict[str, Any]]
Vector = Callable[[Any], Any]


@dataclass(frozen=True)
class Endpoint:
    """One server's embedding route: the URL to POST, the JSON body for one text, and
    where the vector sits in the answer (raising KeyError/IndexError/TypeError if absent);
    headers to send (an API key)."""

    url: str
    body: Body
    vector: Vector
    headers: Mapping[str, str] = field(default_factory=dict)


def triton_endpoint(base_url: str, model: str,
                    headers: Mapping[str, str] | None = None) -> Endpoint:
    """KServe v2 JSON: the family's text input as BYTES [1, 1] in, its vector output's
    data out."""
    def body(text: str) -> dict[str, Any]:
        return {"inputs": [{"name": TEXT_IN, "datatype": "BYTES", "shape": [1, 1],
                            "data": [text]}]}

    def vector(answer: Any) -> Any:
        return next(o["data"] for o in answer["outputs"] if o["name"] == VECTOR_OUT)

    return Endpoint(f"{base_url}/v2/models/{model}/infer", body, vector, headers or {})


def openai_endpoint(base_url: str, model: str, path: str = "/embeddings",
                    headers: Mapping[str, str] | None = None) -> Endpoint:
    """OpenAI embeddings shape (infinity-emb, the front door's /v1, any compatible server),
    floats in JSON."""
    return Endpoint(f"{base_url}{path}", lambda text: {"model": model, "input": [text]},
                    lambda answer: answer["data"][0]["embedding"], headers or {})


def infer_endpoint(base_url: str, path: str = "/infer") -> Endpoint:
    """The seeds' route: {"text": ...} in, {"result": [...]} out (both FastAPI peers)."""
    return Endpoint(f"{base_url}{path}", lambda text: {"text": text},
                    lambda answer: answer["result"])


def is_embedding(vector: Any, dim: int = EMBEDDING_DIM) -> bool:
    """A list of `dim` finite numbers."""
    return (isinstance(vector, list) and len(vector) == dim
            and all(isinstance(x, int | float) and math.isfinite(x) for x in vector))


def check_answer(endpoint: Endpoint, status: int, raw: bytes) -> str | None:
    """None for a good answer, else the kind of error it counts as."""
    if status != 200:
        return f"HTTP {status}"
    try:
        vector = endpoint.vector(json.loads(raw))
    except (ValueError, KeyError, IndexError, TypeError, StopIteration):
        return "malformed answer"
    return None if is_embedding(vector) else "not a 384-d vector"


async def ask(session: aiohttp.ClientSession, endpoint: Endpoint,
              text: str) -> tuple[str | None, bytes]:
    """POST one text; (the error kind or None, the raw answer)."""
    try:
        async with session.post(endpoint.url, json=endpoint.body(text),
                                headers=dict(endpoint.headers)) as response:
            raw = await response.read()
            return check_answer(endpoint, response.status, raw), raw
    except TimeoutError:
        return "timeout", b""
    except aiohttp.ClientError as err:
        return type(err).__name__, b""


def new_session(concurrency: int) -> aiohttp.ClientSession:
    """Keep-alive connections, one a worker, and a per-request time limit."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency),
        timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S))


@asynccontextmanager
async def endpoint_sender(endpoint: Endpoint, concurrency: int) -> AsyncIterator[Send]:
    """perf.load's Send over one keep-alive session; the priority goes in no request (the
    peers have none; Triton then uses the model's default)."""
    async with new_session(concurrency) as session:
        async def send(text: str, priority: int) -> Outcome:
            sent = time.monotonic()
            error, _ = await ask(session, endpoint, text)
            return Outcome(sent, priority, (time.monotonic() - sent) * 1000, error)

        yield send


async def closed_loop_point(endpoint: Endpoint, concurrency: int, seconds: float,
                            texts: Sequence[str] | None = None) -> LoadPoint:
    """perf.load's closed loop with `concurrency` clients for `seconds`, each request a new
    text (the text family's perf inputs by default); the point spans until the last answer
    came back."""
    pool = unique_texts(texts)
    async with endpoint_sender(endpoint, concurrency) as send:
        began = time.monotonic()
        outcomes = await closed_loop(send, [(0, concurrency)], seconds, pool)
        elapsed = time.monotonic() - began
    return load_point(concurrency, outcomes, elapsed)


async def embed_one(endpoint: Endpoint, text: str) -> list[float]:
    """The vector one server gives for `text`; raises ValueError with the error kind."""
    async with new_session(1) as session:
        error, raw = await ask(session, endpoint, text)
    if error:
        raise ValueError(f"{endpoint.url} answered {text!r} with {error}")
    return endpoint.vector(json.loads(raw))
