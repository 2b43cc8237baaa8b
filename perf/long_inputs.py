"""Long and repeated inputs, measured in one run (docs/serving.md, "Long inputs"):

    python -m perf.long_inputs [--seconds 8] [--rounds 2] [--levels 4 16]

1. **Chunk fidelity**: real long texts (a licence every Debian machine ships, this
   project's docs) embedded with `truncate="chunk"` by the served `embed`, against the
   eager PyTorch reference of export/chunk_reference.py (Hugging Face's own sliding window,
   mean pooling, the token-weighted mean of the windows); and, for scale, against the
   truncated text's vector.
2. **Chunk cost**: one document of about 10,000 tokens, chunked by the server, against
   the encoder's own compute for its windows (Triton's statistics) and against the same
   windows sent straight to the encoder (`minilm_onnx`) in calls of its rows. Medians of
   `--repeats`.
3. **Token-aware batching**: `max_batch_tokens` variants on a length mix (70% short
   queries, 30% passages of about 200 tokens, one text a request) in mirrored rounds:
   requests/s and p99 per level; then the chunked document `--repeats` times on each (its
   latency), and the encoder stubs' RSS after it (what one long batch holds).
4. **Duplicates**: `dedupe_rows` on and off, on one-text requests drawn from 24 texts
   (repeats within a dynamic batch, as popular queries make them), and on bulk requests
   of 64 passages of about 200 tokens, a quarter of them repeats of others in the same
   request (an indexing job over documents that share boilerplate), sent whole as a
   client that fills max_batch_size does.

Every variant is its own server on the text model alone (perf.subjects.build_repository),
all up at once, idle but the one measured. Results: perf/results/long-inputs-<time>/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from tmr_client import Client

from core.config_edit import set_parameter
from core.hardware import host_cpu
from core.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from core.versions import read_config, read_config_json
from export.chunk_reference import ChunkReference, cosine
from perf import harness
from perf.load import closed_loop
from perf.memory import server_memory
from perf.peers.load import endpoint_sender, triton_endpoint
from perf.stats import LoadPoint, load_point, round_orders
from perf.subjects import build_repository, text_model, texts, tokenizer
from python_backends.tokenization import (
    TextEncoder,
    TextLimits,
    TextOptions,
    fit_text,
    pad_batch,
)
from server.admin_client import AdminClient
from server.launcher import TritonServer
from server.settings import admin_key

LICENCE = Path("/usr/share/common-licenses/GPL-3")
DOCS = ("README.md", "docs/serving.md", "docs/reliability.md", "docs/benchmarks.md")
PASSAGE_TOKENS = 200
PASSAGE_SHARE = 0.3
TOKEN_BOUNDS = (0, 1024, 2048, 4096)  # max_batch_tokens variants; 0: today's buckets
POOL = 24  # distinct texts of the duplicates run
BULK_ROWS, BULK_REPEAT, BULK_REQUESTS = 64, 0.25, 4


@dataclass(frozen=True)
class Served:
    """One variant's server and how to ask it."""

    name: str
    server: TritonServer

    @property
    def url(self) -> str:
        return self.server.http_url


def long_texts() -> dict[str, str]:
    texts = {"GPL-3 (/usr/share/common-licenses)": LICENCE.read_text(encoding="utf-8")}
    for name in DOCS:
        texts[name] = (PROJECT_ROOT / name).read_text(encoding="utf-8")
    return texts


def start(name: str, root: Path, stack: ExitStack, **parameters: str) -> Served:
    """The text model with `embed`'s parameters changed, served until the stack closes."""
    front = text_model().front
    edits = [(front, set_parameter(k, v)) for k, v in parameters.items()]
    repo = build_repository(root / name, edits, text_only=True)
    server = stack.enter_context(harness.server(repo, root / f"{name}.log", load_all=False))
    # warm: one long and a few short
    with Client(server.http_url, admin_key=admin_key()) as client:
        client.embed(["warm up " * 50, "warm up"] * 4)
    return Served(name, server)


# -- 1. fidelity ----------------------------------------------------------------------------


def fidelity(served: Served) -> list[dict]:
    limits = front_limits()
    reference = ChunkReference(model_source(), limits.max_tokens)
    rows = []
    with Client(served.url, admin_key=admin_key()) as client:
        for name, text in long_texts().items():
            if len(text.encode()) > limits.max_text_bytes:
                text = text.encode()[:limits.max_text_bytes].decode(errors="ignore")
                name += f" (first {limits.max_text_bytes} bytes)"
            chunked = client.embed_with_info([text], truncate="chunk")
            cut = client.embed([text], truncate=True)[0]
            expected = reference.chunked(text, limits.chunk_overlap)
            rows.append({"text": name, "tokens": int(chunked.tokens[0]),
                         "windows": int(chunked.windows[0]),
                         "reference_windows": len(expected.tokens),
                         "cosine_vs_eager": cosine(chunked.embeddings[0], expected.vector),
                         "cosine_vs_truncated": cosine(chunked.embeddings[0], cut)})
    return rows


def front_limits() -> TextLimits:
    """The served front's input limits, from its config (the limits `tmr add` wrote for
    the model, not TextLimits' defaults)."""
    return TextLimits.from_config(read_config_json(DEFAULT_REPOSITORY / text_model().front))


def model_source() -> Path:
    """The text model's weights and tokenizer (its encoders' `source`)."""
    from export.sources import resolve

    model = text_model()
    config = read_config(DEFAULT_REPOSITORY / model.encoder(model.primary))
    return resolve(config.parameters["source"].string_value)


def front_tokenizer() -> TextEncoder:
    return tokenizer(DEFAULT_REPOSITORY, text_model().front)


# -- 2. cost ---------------------------------------------------------------------------------


def ten_thousand_tokens() -> str:
    """About 10,000 tokens of real text: docs/serving.md from its start."""
    readme = (PROJECT_ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    ids = front_tokenizer().tokenizer.encode(readme, add_special_tokens=False)
    return readme[:ids.offsets[min(9998, len(ids.offsets) - 1)][1]]


def compute_ms(served: Served, model: str) -> float:
    """Milliseconds of compute (`compute_infer`) Triton counted for `model` so far."""
    import urllib.request

    from tmr_client.auth import key_headers

    request = urllib.request.Request(f"http://{served.url}/v2/models/{model}/stats",
                                     headers=key_headers(admin=True, admin_key=admin_key()))
    with urllib.request.urlopen(request, timeout=10) as r:
        stats = json.loads(r.read())["model_stats"]
    return sum(int(s["inference_stats"]["compute_infer"]["ns"]) for s in stats) / 1e6


def chunk_cost(served: Served, repeats: int) -> dict:
    """Medians: the document chunked by the front, against the encoder's own compute for
    it, and against its windows straight to the encoder in calls of the encoder's rows."""
    model = text_model()
    document = ten_thousand_tokens()
    encoder = front_tokenizer()
    limits = front_limits()
    fitted = fit_text(encoder.token_ids([document])[0], encoder.specials, limits,
                      TextOptions("chunk", limits.chunk_overlap), 0)
    rows = fitted.rows
    primary = model.encoder(model.primary)
    chunked, direct, compute = [], [], []
    with Client(served.url, admin_key=admin_key()) as client, AdminClient(served.url) as admin:
        for _ in range(repeats):
            before = compute_ms(served, primary)
            began = time.perf_counter()
            answer = client.embed_with_info([document], truncate="chunk")
            chunked.append(time.perf_counter() - began)
            time.sleep(0.2)  # Triton counts an execution just after it answers
            compute.append((compute_ms(served, primary) - before) / 1000)
            began = time.perf_counter()
            for start in range(0, len(rows), 64):
                ids, mask = pad_batch(rows[start:start + 64], encoder.pad_id)
                admin.infer(primary, {"input_ids": ids, "attention_mask": mask}, ["embedding"])
            direct.append(time.perf_counter() - began)
    assert answer.windows[0] == len(rows)
    return {"tokens": fitted.tokens, "windows": len(rows),
            "chunked_ms": statistics.median(chunked) * 1000,
            "encoder_compute_ms": statistics.median(compute) * 1000,
            "encoder_alone_ms": statistics.median(direct) * 1000,
            "ratio": statistics.median(chunked) / statistics.median(direct),
            "compute_ratio": statistics.median(chunked) / statistics.median(compute)}


def long_batches(served: Served, repeats: int) -> dict:
    """The chunked document `repeats` times (median latency), then the encoder's RSS."""
    document = ten_thousand_tokens()
    took = []
    with Client(served.url, admin_key=admin_key()) as client:
        for _ in range(repeats):
            began = time.perf_counter()
            client.embed([document], truncate="chunk")
            took.append(time.perf_counter() - began)
    return {"document_ms": statistics.median(took) * 1000, "encoder_rss_mib": encoder_rss(served)}


# -- 3. and 4. load -------------------------------------------------------------------------


def passages() -> list[str]:
    """Passages of about PASSAGE_TOKENS tokens: the licence and the docs cut at words."""
    encoder = front_tokenizer()
    out = []
    for text in long_texts().values():
        words = text.split()
        step = 130  # words: about 200 tokens of English
        for i in range(0, len(words) - step, step):
            piece = " ".join(words[i:i + step])
            if abs(len(encoder.token_ids([piece])[0]) - PASSAGE_TOKENS) <= 40:
                out.append(piece)
    return out


def length_mix(seed: int) -> Iterator[str]:
    """Short queries (the perf inputs) and passages, each text new (a nonce)."""
    rng = random.Random(seed)
    short, long = texts(), passages()
    nonce = uuid.uuid4().hex[:6]
    i = 0
    while True:
        i += 1
        pool = long if rng.random() < PASSAGE_SHARE else short
        yield f"{rng.choice(pool)} ({nonce}-{i})"


def repeats(seed: int) -> Iterator[str]:
    """Texts drawn from a pool of POOL (no nonce: the same text again and again)."""
    rng = random.Random(seed)
    pool = texts()[:POOL]
    while True:
        yield rng.choice(pool)


def closed_point(served: Served, concurrency: int, seconds: float,
                 pool: Iterator[str]) -> LoadPoint:
    endpoint = triton_endpoint(f"http://{served.url}", text_model().front)

    async def run() -> LoadPoint:
        async with endpoint_sender(endpoint, concurrency) as send:
            began = time.monotonic()
            outcomes = await closed_loop(send, [(0, concurrency)], seconds, pool)
            return load_point(concurrency, outcomes, time.monotonic() - began)

    return asyncio.run(run())


def bulk_point(served: Served, requests: int, seed: int) -> dict:
    """`requests` requests from each of 3 clients (one per front instance), one at a time,
    each of BULK_ROWS passages of which a quarter repeat others, sent whole (max_batch_size
    rows a request): rows/s over the whole run and the median request."""
    rng = random.Random(seed)
    base = passages()
    took: list[float] = []
    began = time.monotonic()

    async def client_loop() -> int:
        from tmr_client import AsyncClient

        done = 0
        async with AsyncClient(served.url, max_batch_size=BULK_ROWS) as client:
            for _ in range(requests):
                unique = [f"{rng.choice(base)} {uuid.uuid4().hex[:6]}"
                          for _ in range(int(BULK_ROWS * (1 - BULK_REPEAT)))]
                batch = unique + [rng.choice(unique)
                                  for _ in range(BULK_ROWS - len(unique))]
                rng.shuffle(batch)
                sent = time.perf_counter()
                await client.embed(batch)
                took.append(time.perf_counter() - sent)
                done += len(batch)
        return done

    async def run() -> int:
        return sum(await asyncio.gather(*(client_loop() for _ in range(3))))

    rows = asyncio.run(run())
    return {"rows_per_s": rows / (time.monotonic() - began),
            "request_ms": statistics.median(took) * 1000}


def best_bulk(variants: dict[str, Served], requests: int, rounds: int) -> dict[str, dict]:
    """bulk_point per variant, the best of mirrored rounds."""
    best: dict[str, dict] = {}
    for r, order in enumerate(round_orders(list(variants), rounds)):
        for name in order:
            point = bulk_point(variants[name], requests, r)
            print(f"{time.strftime('%H:%M:%S')} round {r + 1} {name:>10} bulk "
                  f"{point['rows_per_s']:6.0f} rows/s", flush=True)
            if name not in best or point["rows_per_s"] > best[name]["rows_per_s"]:
                best[name] = point
    return best


def rounds_of(variants: dict[str, Served], levels: Sequence[int], seconds: float,
              rounds: int, pool: Callable[[int], Iterator[str]]) -> dict[str, list[LoadPoint]]:
    """Best point per level of each variant over mirrored rounds."""
    best: dict[str, dict[int, LoadPoint]] = {name: {} for name in variants}
    for r, order in enumerate(round_orders(list(variants), rounds)):
        for name in order:
            for c in levels:
                point = closed_point(variants[name], c, seconds, pool(r * 100 + c))
                print(f"{time.strftime('%H:%M:%S')} round {r + 1} {name:>10} c{c:<3} "
                      f"{point.rps:6.1f} req/s  p99 {point.p99_ms:6.1f} ms"
                      + (f"  errors {point.error_kinds}" if point.errors else ""), flush=True)
                kept = best[name].get(c)
                if kept is None or point.rps > kept.rps:
                    best[name][c] = point
    return {name: [points[c] for c in levels] for name, points in best.items()}


def encoder_rss(served: Served) -> float:
    table = server_memory(served.server.process.pid)
    primary = text_model().encoder(text_model().primary)
    return table.get(primary, {}).get("rss_mib", float("nan"))


# -- the report ------------------------------------------------------------------------------


def load_table(best: dict[str, list[LoadPoint]], levels: Sequence[int], base: str) -> str:
    head = ["variant", *(f"c{c} req/s" for c in levels), *(f"c{c} p99 ms" for c in levels),
            *(f"c{c} vs {base} (req/s / p99)" for c in levels)]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for name, points in best.items():
        cells = [f"{p.rps:.1f}" for p in points] + [f"{p.p99_ms:.1f}" for p in points]
        cells += [f"{p.rps / b.rps:.2f}x / {p.p99_ms / b.p99_ms:.2f}x"
                  for p, b in zip(points, best[base])]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(results: dict, levels: Sequence[int]) -> str:
    cpu = results["cpu"]
    lines = [f"# Long and repeated inputs ({results['when']})", "",
             f"Host: {cpu}; `python -m perf.long_inputs {results['argv']}`", "",
             "## 1. Chunked texts against eager PyTorch", "",
             "| text | tokens | windows (reference) | cosine vs eager | cosine vs truncated |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for row in results["fidelity"]:
        lines.append(f"| {row['text']} | {row['tokens']} | {row['windows']} "
                     f"({row['reference_windows']}) | {row['cosine_vs_eager']:.6f} | "
                     f"{row['cosine_vs_truncated']:.4f} |")
    cost = results["cost"]
    lines += ["", "## 2. What a long document costs", "",
              f"{cost['tokens']} tokens in {cost['windows']} windows, medians of "
              f"{results['repeats']}: chunked by the server {cost['chunked_ms']:.0f} ms; "
              f"the encoder's own compute for it (Triton's compute_infer) "
              f"{cost['encoder_compute_ms']:.0f} ms (**{cost['compute_ratio']:.2f}x**); the "
              f"same windows sent straight to the encoder, 64 rows a call, "
              f"{cost['encoder_alone_ms']:.0f} ms (**{cost['ratio']:.2f}x**).", "",
              "## 3. Token-aware batching on a length mix", "",
              f"{int(PASSAGE_SHARE * 100)}% passages of about {PASSAGE_TOKENS} tokens, the "
              "rest short queries, one text a request; best of the rounds.", "",
              load_table(results["tokens"], levels, "buckets"), "",
              f"Then the {cost['windows']}-window document {results['repeats']} times on "
              "each (one request of long rows), and the encoder stubs' RSS after it:", "",
              "| variant | document ms | vs buckets | encoder RSS MiB |",
              "| --- | ---: | ---: | ---: |",
              *(f"| {n} | {r['document_ms']:.0f} | "
                f"{r['document_ms'] / results['tokens_long']['buckets']['document_ms']:.2f}x | "
                f"{r['encoder_rss_mib']:.0f} |" for n, r in results["tokens_long"].items()),
              "",
              "## 4. Duplicates", "",
              f"Single-text requests drawn from {POOL} texts:", "",
              load_table(results["dedupe"], levels, "dedupe-on"), "",
              f"Bulk requests of {BULK_ROWS} passages of about {PASSAGE_TOKENS} tokens, "
              f"{int(BULK_REPEAT * 100)}% repeats within the request, 3 clients of "
              f"{BULK_REQUESTS} requests each (best of the rounds):", "",
              "| variant | rows/s | median request ms | vs dedupe-on |",
              "| --- | ---: | ---: | ---: |",
              *(f"| {name} | {r['rows_per_s']:.0f} | {r['request_ms']:.0f} | "
                f"{r['rows_per_s'] / results['bulk']['dedupe-on']['rows_per_s']:.2f}x |"
                for name, r in results["bulk"].items())]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.long_inputs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--levels", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    out = harness.run_dir("long-inputs")
    facts = host_cpu()
    results: dict = {"when": time.strftime("%Y-%m-%d %H:%M"), "cpu": facts,
                     "argv": " ".join(argv or []), "python": platform.python_version(),
                     "repeats": args.repeats, "seconds": args.seconds}
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shipped = start("shipped", root, stack)
        results["fidelity"] = fidelity(shipped)
        results["cost"] = chunk_cost(shipped, args.repeats)
        token_variants = {("buckets" if n == 0 else f"tokens-{n}"):
                          start("buckets" if n == 0 else f"tokens-{n}", root, stack,
                                max_batch_tokens=str(n)) for n in TOKEN_BOUNDS}
        results["tokens"] = rounds_of(token_variants, args.levels, args.seconds, args.rounds,
                                      length_mix)
        results["tokens_long"] = {n: long_batches(s, args.repeats)
                                  for n, s in token_variants.items()}
        dedupe = {"dedupe-on": token_variants["buckets"],
                  "dedupe-off": start("dedupe-off", root, stack, dedupe_rows="false")}
        results["dedupe"] = rounds_of(dedupe, args.levels, args.seconds, args.rounds, repeats)
        results["bulk"] = best_bulk(dedupe, BULK_REQUESTS, args.rounds)
    markdown = report(results, args.levels)
    plain = json.loads(json.dumps(results, default=lambda o: asdict(o) if hasattr(
        o, "__dataclass_fields__") else str(o)))
    harness.write_report(out, "long_inputs", markdown, plain)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
