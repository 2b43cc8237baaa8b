"""`make bench`'s rerank row (`python -m perf.rerank [SECONDS]`): one query with DOCUMENTS
documents of 64 to 256 tokens through the SDK (gRPC) at 1, 4 and 16 clients, against eager
`CrossEncoder.predict` of the same pairs in one process on the same host. The reranker is
the shipped text model with a seeded head (export/seeded_cross_encoder.py: no reranker
ships or installs offline), added with `tmr add` to a temporary repository."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tmr_client import NO_RETRY, AsyncClient

from core.families import TEXT_RANKING
from core.families.configs import parameters_of
from core.paths import DEFAULT_REPOSITORY
from core.versions import read_config
from export.pipeline import add_model
from export.seeded_cross_encoder import seeded_cross_encoder
from export.sources import resolve
from perf.subjects import text_model, texts
from perf.targets import ratio
from runtime.pairs import PairEncoder
from server.goodput import closed_loop, percentile, timed_call, unique_texts
from server.served_copy import free_port_server
from server.settings import admin_key

DOCUMENTS, CONCURRENCY, NAME = 32, (1, 4, 16), "bench_reranker"


def documents(encoder: PairEncoder, pool: list[str]) -> list[str]:
    """DOCUMENTS texts from 64 to 256 tokens, evenly spread: the pool's texts joined."""
    out, at = [], 0
    for n in range(DOCUMENTS):
        parts: list[str] = []
        while len(encoder.ids([" ".join(parts)])[0]) < 64 + n * 192 // (DOCUMENTS - 1):
            parts, at = [*parts, pool[at % len(pool)]], at + 1
        out.append(" ".join(parts))
    return out


def eager(folder: Path, pairs: list[tuple[str, str]], seconds: float) -> dict[str, float]:
    """Pairs/s and p99 ms of CrossEncoder.predict over the pairs, called in a loop."""
    from sentence_transformers import CrossEncoder

    model, took = CrossEncoder(str(folder), device="cpu"), []
    model.predict(pairs, batch_size=DOCUMENTS)  # warm
    while sum(took) < seconds * 1000:
        began = time.monotonic()
        model.predict(pairs, batch_size=DOCUMENTS)
        took.append((time.monotonic() - began) * 1000)
    return {"pairs_s": DOCUMENTS * len(took) / (sum(took) / 1000), "p99_ms": percentile(took, 99)}


async def served(url: str, query: str, docs: list[str], seconds: float) -> dict[int, Any]:
    """Pairs/s, p99 ms and refusals at each concurrency, a request the query's documents."""
    async with AsyncClient(url, protocol="grpc", retry=NO_RETRY, admin_key=admin_key()) as c:
        await c.rerank(query, docs, model=NAME)  # the first call's set-up is no request's
        found = {}
        for clients in CONCURRENCY:
            ended = await closed_loop(lambda q, p: timed_call(p, c.rerank(q, docs, model=NAME)),
                                      [(0, clients)], seconds, unique_texts([query]))
            ok = [o.latency_ms for o in ended if o.error is None]
            found[clients] = {"pairs_s": DOCUMENTS * len(ok) / seconds,
                              "p99_ms": percentile(ok, 99), "failed": len(ended) - len(ok)}
    return found


def run(out: Path, seconds: float = 10.0) -> dict[str, Any]:
    """The reranker made, added, served and measured, then its eager twin."""
    base = text_model()  # the cross-encoder is made from its source
    source = parameters_of(read_config(DEFAULT_REPOSITORY / base.encoder(base.primary)))
    with tempfile.TemporaryDirectory(prefix="tmr-rerank-") as tmp:
        folder = seeded_cross_encoder(resolve(source["source"]), Path(tmp) / "folder")
        (Path(tmp) / "repository").mkdir()
        add_model(Path(tmp) / "repository", NAME, TEXT_RANKING.name, str(folder))
        pool = texts()
        query, docs = pool[0], documents(PairEncoder(folder / "tokenizer.json"), pool[1:])
        with free_port_server(Path(tmp) / "repository", out / "triton-rerank.log",
                              load_all=False) as server:
            points = asyncio.run(served(server.grpc_url, query, docs, seconds))
        return {"served": points, "eager": eager(folder, [(query, d) for d in docs], seconds)}


def rows(result: dict[str, Any]) -> list[str]:
    """What was measured, and the markdown table of a run."""
    base = result["eager"]
    lines = [f"One query with {DOCUMENTS} documents of 64 to 256 tokens a request, through the "
             "SDK (gRPC), against eager `CrossEncoder.predict` of the same pairs in one process "
             "(all cores); the shipped text model with a seeded head. Refused: past the "
             "front's 2 s queue deadline.", "",
             "| clients | pairs/s | p99 ms | refused | pairs/s vs eager |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for clients, point in result["served"].items():
        against = ratio(point["pairs_s"], base["pairs_s"])
        lines.append(f"| {clients} | {point['pairs_s']:.0f} | {point['p99_ms']:.0f} | "
                     f"{point['failed']} | " + ("no baseline: eager measured 0 |"
                                                if against is None else f"{against:.2f}x |"))
    return [*lines, f"| eager `CrossEncoder.predict`, one process | {base['pairs_s']:.0f} | "
                    f"{base['p99_ms']:.0f} | - | 1.00x |"]


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    print("\n".join(rows(run(Path(tempfile.mkdtemp(prefix="tmr-rerank-out-")), seconds))))
