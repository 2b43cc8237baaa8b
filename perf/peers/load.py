"""The one closed-loop HTTP load client that drives every server in the comparison.

`c` workers each send one request and wait for its answer before sending the next. Every
request carries a new text (a base text of the text family's perf inputs, with a unique
suffix), so no cache can answer it, and every answer is checked: status 200 and a 384-d
vector, else it counts as an error. An `Endpoint` says how one server is asked:

    point = asyncio.run(closed_loop(openai_endpoint("http://localhost:7997", model), 8, 6))
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from perf import subjects
from perf.peers.stats import LoadPoint, summarize

EMBEDDING_DIM = 384
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
    """KServe v2 JSON: TEXT as BYTES [1, 1] in, the EMBEDDING output's data out."""
    def body(text: str) -> dict[str, Any]:
        return {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1],
                            "data": [text]}]}

    def vector(answer: Any) -> Any:
        return next(o["data"] for o in answer["outputs"] if o["name"] == "EMBEDDING")

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


def base_texts() -> list[str]:
    """The texts of the text-embedding family's perf input data (perf/inputs)."""
    return subjects.texts()


def unique_texts(texts: Sequence[str], nonce: str) -> Iterator[str]:
    """The base texts in turn, each with a suffix no other request of any run carries."""
    for i in itertools.count():
        yield f"{texts[i % len(texts)]} ({nonce}-{i})"


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


async def closed_loop(endpoint: Endpoint, concurrency: int, seconds: float,
                      texts: Sequence[str] | None = None) -> LoadPoint:
    """`concurrency` workers, each one request at a time, starting new ones for `seconds`;
    the point spans until the last answer came back."""
    pool = unique_texts(texts or base_texts(), uuid.uuid4().hex[:8])
    latencies: list[float] = []
    errors: Counter[str] = Counter()

    async def worker(session: aiohttp.ClientSession, deadline: float) -> None:
        while time.perf_counter() < deadline:
            sent = time.perf_counter()
            error, _ = await ask(session, endpoint, next(pool))
            if error:
                errors[error] += 1
            else:
                latencies.append((time.perf_counter() - sent) * 1000)

    async with new_session(concurrency) as session:
        began = time.perf_counter()
        await asyncio.gather(*(worker(session, began + seconds) for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
    return summarize(concurrency, latencies, errors, elapsed)


async def embed_one(endpoint: Endpoint, text: str) -> list[float]:
    """The vector one server gives for `text`; raises ValueError with the error kind."""
    async with new_session(1) as session:
        error, raw = await ask(session, endpoint, text)
    if error:
        raise ValueError(f"{endpoint.url} answered {text!r} with {error}")
    return endpoint.vector(json.loads(raw))


def sweep(endpoint: Endpoint, levels: Sequence[int], seconds: float) -> list[LoadPoint]:
    """One closed-loop point per concurrency level, in the order given."""
    return [asyncio.run(closed_loop(endpoint, c, seconds)) for c in levels]
