"""Bulk embedding through the SDK: the sync client against the async one, on an idle server.

A corpus of short unique texts at the default priority, over HTTP and gRPC: the sync
client (chunks one after another) and the async client (at most `max_in_flight` chunks
at once, one per `embed` instance) each embed it once, while the router's degradation
level is sampled every 0.1 s. Reports texts/s, the call's wall time and the highest level.

    .venv/bin/python -m perf.bulk [--sync-texts 3000] [--async-texts 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass

from client import AsyncEmbedClient, EmbedClient
from perf import harness
from perf.load import LevelSampler
from server.launcher import TritonServer


@dataclass(frozen=True)
class BulkRun:
    client: str
    protocol: str
    texts: int
    seconds: float
    max_level: float

    @property
    def texts_per_s(self) -> float:
        return self.texts / self.seconds


def corpus(n: int, tag: str) -> list[str]:
    return [f"{tag} {i}: a short sentence of a corpus being embedded" for i in range(n)]


def timed(server: TritonServer, name: str, protocol: str, n: int, call) -> BulkRun:
    with LevelSampler(server.metrics_url, period_s=0.1) as sampler:
        began = time.monotonic()
        call()
        seconds = time.monotonic() - began
    top = max((level for _, level in sampler.samples), default=0.0)
    return BulkRun(name, protocol, n, seconds, top)


def run(server: TritonServer, sync_texts: int, async_texts: int) -> list[BulkRun]:
    runs = []
    for protocol in ("http", "grpc"):
        url = server.http_url if protocol == "http" else server.grpc_url

        def sync_call(url: str = url, protocol: str = protocol) -> None:
            with EmbedClient(url, protocol=protocol) as client:
                client.embed(corpus(sync_texts, f"sync {protocol}"))

        async def async_call(url: str = url, protocol: str = protocol) -> None:
            async with AsyncEmbedClient(url, protocol=protocol) as client:
                await client.embed(corpus(async_texts, f"async {protocol}"))

        runs.append(timed(server, "sync", protocol, sync_texts, sync_call))
        runs.append(timed(server, "async", protocol, async_texts,
                          lambda f=async_call: asyncio.run(f())))
    return runs


def markdown(runs: list[BulkRun]) -> str:
    lines = ["| client | protocol | texts | seconds | texts/s | highest level |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r.client} | {r.protocol} | {r.texts} | {r.seconds:.1f} | "
              f"{r.texts_per_s:.0f} | {r.max_level:.0f} |" for r in runs]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sync-texts", type=int, default=3000)
    parser.add_argument("--async-texts", type=int, default=10000)
    args = parser.parse_args(argv)
    out = harness.run_dir("bulk")
    with harness.served_copy(out / "tritonserver.log") as server:
        runs = run(server, args.sync_texts, args.async_texts)
    harness.write_report(out, "bulk", markdown(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
