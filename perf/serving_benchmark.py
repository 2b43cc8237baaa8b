"""Measure the serving path on this machine, all in one run (docs/serving.md has the figures).

1. The in-process ceiling: onnxruntime (2 intra-op threads) on the exported minilm_onnx at
   batch 1..64, with and without tokenization.
2. The served path with perf_analyzer over gRPC, for each config variant below: `embed`
   (BLS) at several concurrencies, the ensemble alternative, and the bare single-model embed,
   with the average executed batch size read from Triton's statistics.

    .venv/bin/python -m perf.serving_benchmark [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

from client.auth import key_headers
from perf import perf_analyzer
from python_backends.tensor_model import onnx_session
from python_backends.tokenization import TextEncoder, TextLimits, default_tokenizer_path
from server.launcher import TritonServer, free_port
from server.repository import copy_repository, edit_config, set_parameter
from server.settings import DEFAULT_REPOSITORY, PROJECT_ROOT, Ports, ServerOptions

FIXTURES = PROJECT_ROOT / "perf" / "fixtures"
INPUTS = PROJECT_ROOT / "perf" / "inputs" / "embed.json"
RESULTS = PROJECT_ROOT / "perf" / "results"
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)

# name -> (model, regex, replacement) edits applied to a temporary copy of the repository.
VARIANTS: dict[str, list[tuple[str, str, str]]] = {
    "as-configured": [],
    "onnx-1x2threads": [
        ("minilm_onnx", r"count: 2 kind: KIND_CPU", "count: 1 kind: KIND_CPU"),
        ("minilm_onnx", 'string_value: "1"', 'string_value: "2"'),
    ],
    "embed-delay-1ms": [
        ("embed", "max_queue_delay_microseconds: 0", "max_queue_delay_microseconds: 1000"),
    ],
    "embed-no-priorities": [
        ("embed", r"dynamic_batching \{.*?\n\}\n", "dynamic_batching { }\n"),
    ],
    "embed-2-instances": [
        ("embed", r"count: 3 kind: KIND_CPU", "count: 2 kind: KIND_CPU"),
    ],
    "embed-1-instance": [
        ("embed", r"count: 3 kind: KIND_CPU", "count: 1 kind: KIND_CPU"),
    ],
}


def texts() -> list[str]:
    return [d["TEXT"]["content"][0] for d in json.loads(INPUTS.read_text())["data"]]


def latest_onnx(repository: Path) -> Path:
    versions = sorted(int(p.name) for p in (repository / "minilm_onnx").iterdir()
                      if p.name.isdigit())
    return repository / "minilm_onnx" / str(versions[-1]) / "model.onnx"


def inprocess_curve(onnx_path: Path, threads: int = 2, seconds: float = 1.5) -> list[dict]:
    """Latency and throughput of tokenize+ORT and ORT alone, per batch size."""
    session = onnx_session(str(onnx_path), threads)
    encoder = TextEncoder(default_tokenizer_path(), TextLimits())
    pool = texts()
    rows = []
    for batch in BATCH_SIZES:
        sample = [pool[i % len(pool)] for i in range(batch)]
        ids, mask = encoder.encode(sample)
        feeds = {"input_ids": ids, "attention_mask": mask}
        session.run(None, feeds)
        model_ms, full_ms = [], []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or len(model_ms) < 3:
            t0 = time.perf_counter()
            ids, mask = encoder.encode(sample)
            t1 = time.perf_counter()
            session.run(None, {"input_ids": ids, "attention_mask": mask})
            t2 = time.perf_counter()
            model_ms.append((t2 - t1) * 1000)
            full_ms.append((t2 - t0) * 1000)
        ms, fms = statistics.median(model_ms), statistics.median(full_ms)
        rows.append({"batch": batch, "ort_ms": round(ms, 2), "ort_seq_s": round(batch / ms * 1000),
                     "tok_ort_ms": round(fms, 2), "tok_ort_seq_s": round(batch / fms * 1000)})
    return rows


def build_repository(root: Path, edits: list[tuple[str, str, str]]) -> Path:
    """model_repository + fixtures in `root`, with the variant's config edits applied."""
    repo = copy_repository([DEFAULT_REPOSITORY, FIXTURES], root / "repository")
    set_parameter(repo, "embed_bare", "onnx_path", str(latest_onnx(DEFAULT_REPOSITORY)))
    for model, pattern, replacement in edits:
        edit_config(repo, model, pattern, replacement)
    return repo


def counts(http_url: str, model: str) -> tuple[int, int]:
    request = urllib.request.Request(f"http://{http_url}/v2/models/{model}/stats",
                                     headers=key_headers(admin=True))
    with urllib.request.urlopen(request, timeout=10) as r:
        stats = json.loads(r.read())["model_stats"]
    return (sum(int(s["inference_count"]) for s in stats),
            sum(int(s["execution_count"]) for s in stats))


def measure(server: TritonServer, model: str, concurrency: int, out: Path,
            batch_model: str) -> dict:
    before = counts(server.http_url, batch_model)
    row = perf_analyzer.run(model, server.grpc_url, concurrency, INPUTS,
                            out / f"{model}-c{concurrency}.csv")
    after = counts(server.http_url, batch_model)
    executions = max(after[1] - before[1], 1)
    return {"model": model, **asdict(row),
            "avg_batch": round((after[0] - before[0]) / executions, 1),
            "batch_measured_at": batch_model}


def served_runs(variant: str, quick: bool) -> list[tuple[str, int, str]]:
    if variant == "as-configured":
        levels = (16,) if quick else (1, 4, 8, 16, 32)
        return ([("embed", c, "minilm_onnx") for c in levels]
                + [("embed_ensemble", 16, "minilm_onnx"), ("embed_bare", 16, "embed_bare")])
    return [("embed", 16, "minilm_onnx")]


def run_variant(variant: str, out: Path, quick: bool) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_repository(Path(tmp), VARIANTS[variant])
        ports = Ports(free_port(), free_port(), free_port())
        with TritonServer(ServerOptions(repository=repo, ports=ports),
                          log_path=out / f"triton-{variant}.log") as server:
            return [{"variant": variant, **measure(server, m, c, out, b)}
                    for m, c, b in served_runs(variant, quick)]


def markdown(curve: list[dict], served: list[dict]) -> str:
    lines = ["| batch | ORT ms | ORT seq/s | tokenize+ORT ms | tokenize+ORT seq/s |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['batch']} | {r['ort_ms']} | {r['ort_seq_s']} | {r['tok_ort_ms']} | "
              f"{r['tok_ort_seq_s']} |" for r in curve]
    ceiling = max(r["tok_ort_seq_s"] for r in curve)
    lines += ["", "| variant | model | c | infer/s | x ceiling | p50 ms | p99 ms | avg batch |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['variant']} | {r['model']} | {r['concurrency']} | {r['throughput']:.0f} | "
              f"{r['throughput'] / ceiling:.2f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
              f"{r['avg_batch']} |" for r in served]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer levels and variants")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    args = parser.parse_args(argv)
    out = RESULTS / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True)
    curve = inprocess_curve(latest_onnx(DEFAULT_REPOSITORY))
    served = [row for v in args.variants for row in run_variant(v, out, args.quick)]
    report = markdown(curve, served)
    (out / "serving.json").write_text(json.dumps({"inprocess": curve, "served": served}, indent=1))
    (out / "serving.md").write_text(report + "\n")
    print(report)
    print(f"\nresults in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
