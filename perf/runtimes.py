"""Every exported format of every family, in-process, in one run: which runtime is fastest
on this host, and how faithful each is to onnxruntime FP32.

    python -m perf.runtimes            # also a `make bench` stage

Text: seq/s at the issue's shapes (batch x tokens: 1x16, 8x24, 32x24, 16x64, real token
ids from the corpus cut to the length), each relative to onnxruntime FP32, and the minimum
row cosine against it over the four shapes. Images: images/s at batch 1 and 8 per format,
relative to onnxruntime FP32, and top-1 agreement with it. Every runner gets THREADS
intra-op threads and the rounds interleave the formats (export/primary_choice.measure).
Where the host computes bf16 natively, OpenVINO also runs at bf16 (a row of its own). The
host's CPU model and flags head the report.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from core.families.catalog import FamilyModel, catalog
from core.hardware import BF16, FP32, host_cpu
from core.paths import DEFAULT_REPOSITORY
from export.primary_choice import measure, served_runner
from perf import harness
from python_backends.runners import Runner

THREADS = 2
TEXT_SHAPES = ((1, 16), (8, 24), (32, 24), (16, 64))
IMAGE_BATCHES = (1, 8)
BASELINE = "onnx"


def runners(repository: Path, model: FamilyModel, precisions: tuple[str, ...]) -> dict[str, Runner]:
    """Format (and precision, for a host-precision format) -> its served version's runner."""
    runs: dict[str, Runner] = {}
    for fmt in model.family.formats:
        if fmt.name not in model.encoders:
            continue
        for precision in (precisions if fmt.host_precision else (FP32,)):
            name = f"{fmt.name} {precision}" if fmt.host_precision else fmt.name
            runs[name] = served_runner(repository, model, fmt.name, THREADS, precision)
    return runs


def text_feeds(repository: Path, model: FamilyModel, rows: int, length: int) -> dict:
    """Real token ids: corpus texts tokenized by the front's tokenizer, cut or repeated to
    `length` tokens, [CLS] first and [SEP] last as the tokenizer puts them."""
    from tokenizers import Tokenizer

    from export.corpus import build_corpus

    tok = Tokenizer.from_file(str(repository / str(model.front) / "1" / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    ids = []
    for text in build_corpus()[:rows]:
        body = tok.encode(text).ids
        inner = (body[1:-1] * (length // max(1, len(body) - 2) + 1))[:length - 2]
        ids.append([body[0], *inner, body[-1]])
    array = np.array(ids, dtype=np.int64)
    return {"input_ids": array, "attention_mask": np.ones_like(array)}


def image_feeds(repository: Path, model: FamilyModel, rows: int) -> dict:
    """Normalised pixels of the family's bundled photos (the export's evaluation set)."""
    from core.families.configs import encoder_spec
    from core.versions import read_config
    from export.pipeline import recipe_for

    spec = encoder_spec(read_config(repository / model.encoder(BASELINE)))
    recipe = recipe_for(model.family, spec.source, THREADS, repository)
    batches = recipe.gate_batches()
    return {k: np.ascontiguousarray(np.concatenate([b[k] for b in batches])[:rows])
            for k in batches[0]}


def text_table(runs: Mapping[str, Runner], repository: Path, model: FamilyModel) -> dict:
    out = model.family.encoder_output.name
    cells: dict[str, dict[str, float]] = {name: {} for name in runs}
    cosines: dict[str, float] = {name: 1.0 for name in runs}
    for rows, length in TEXT_SHAPES:
        feeds = text_feeds(repository, model, rows, length)
        rates = measure(runs, feeds, [rows])
        reference = runs[BASELINE](feeds)[out]
        for name, run in runs.items():
            cells[name][f"{rows}x{length}"] = rates[name][rows]
            got = run(feeds)[out]
            cos = (got * reference).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(
                reference, axis=1)
            cosines[name] = min(cosines[name], float(cos.min()))
    return {"rates": cells, "min_cosine": cosines}


def image_table(runs: Mapping[str, Runner], repository: Path, model: FamilyModel) -> dict:
    out = model.family.encoder_output.name
    feeds = image_feeds(repository, model, max(IMAGE_BATCHES) * 4)
    rates = measure(runs, {k: v[:max(IMAGE_BATCHES)] for k, v in feeds.items()},
                    list(IMAGE_BATCHES))
    reference = runs[BASELINE](feeds)[out].argmax(1)
    agreement = {name: float((run(feeds)[out].argmax(1) == reference).mean())
                 for name, run in runs.items()}
    return {"rates": {name: {f"batch {b}": rates[name][b] for b in IMAGE_BATCHES}
                      for name in runs}, "top1_agreement": agreement, "n": len(reference)}


def run(repository: Path = DEFAULT_REPOSITORY) -> dict[str, Any]:
    cpu = host_cpu()
    precisions = (FP32, BF16) if cpu["precision"] == BF16 else (FP32,)
    tables = {}
    for model in catalog(repository):
        runs = runners(repository, model, precisions)
        if model.family.name == "text_embedding":
            tables[model.base] = {"kind": "text", **text_table(runs, repository, model)}
        else:
            tables[model.base] = {"kind": "image", **image_table(runs, repository, model)}
    return {"cpu": cpu, "threads": THREADS, "tables": tables}


def report(result: Mapping[str, Any]) -> str:
    cpu = result["cpu"]
    lines = [f"In-process, {result['threads']} intra-op threads, one run on {cpu['model']} "
             f"({cpu['cores']} cores; flags {', '.join(cpu['flags']) or 'none of note'}; "
             f"host precision {cpu['precision']}). Each cell is rows/s for onnxruntime "
             "FP32, and a ratio to it for the others.", ""]
    for base, t in result["tables"].items():
        shapes = list(next(iter(t["rates"].values())))
        quality = "min cos vs onnx" if t["kind"] == "text" else f"top-1 agreement (n={t['n']})"
        lines += [f"**{base}**", "", "| format | " + " | ".join(shapes) + f" | {quality} |",
                  "| --- |" + " ---: |" * (len(shapes) + 1)]
        base_rates = t["rates"][BASELINE]
        for name, rates in t["rates"].items():
            cells = [f"{rates[s]:.0f}/s" if name == BASELINE else f"{rates[s] / base_rates[s]:.2f}x"
                     for s in shapes]
            q = t["min_cosine"][name] if t["kind"] == "text" else t["top1_agreement"][name]
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {q:.5f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    out = harness.run_dir("runtimes")
    result = run()
    harness.write_report(out, "runtimes", report(result), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
