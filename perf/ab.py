"""A/B of serving configurations, in one run: each variant is the repository with config
edits, served on its own server, driven by the closed-loop HTTP client of perf/peers.

    python -m perf.ab --variant base --variant "one~embed~count: 3~count: 1" \\
        [--levels 1 4 8 16] [--seconds 6] [--rounds 2] [--model embed_bare]

A variant is `NAME` (the repository as it is) or `NAME~MODEL~REGEX~REPLACEMENT[;...]`,
edits of `MODEL/config.pbtxt` (perf.subjects.build_repository), `~` because configs are
full of colons. Every variant's server is
started once, then the rounds visit them in mirrored order (perf.stats.round_orders),
a new text per request; each point keeps the best round. The table gives requests/s and
p99 per level, p50 at c1, p99/p50 at c16 and the goodput under the p99 objective (core.paths), and
every variant's ratio of goodput to the first's. Results: perf/results/ab-<timestamp>/.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from core.config_edit import Change
from core.families.configs import render
from core.paths import P99_OBJECTIVE_MS
from perf import harness
from perf.peers.load import closed_loop_point, triton_endpoint
from perf.peers.run import new_progress, sweep_rounds
from perf.peers.servers import Running
from perf.stats import best_of, goodput, render_table
from perf.subjects import build_repository, text_model
from server.goodput import LoadPoint


@dataclass(frozen=True)
class Variant:
    name: str
    edits: list[tuple[str, Change]]


def regex_change(regex: str, replacement: str) -> Change:
    """A config change written as a regex over the config's text as the repository lays
    it out (core.families.configs.render); a regex that matches nothing is an error."""
    def change(config: ModelConfig) -> None:
        text = render(config, "")
        edited = re.sub(regex, replacement, text)
        if edited == text:
            raise ValueError(f"{regex!r} matches nothing in {config.name}'s config")
        config.Clear()
        text_format.Parse(edited, config)
    return change


def parse_variant(spec: str) -> Variant:
    """`NAME` or `NAME~MODEL~REGEX~REPLACEMENT[;MODEL~REGEX~REPLACEMENT...]`."""
    name, _, rest = spec.partition("~")
    edits = []
    for part in filter(None, rest.split(";")):
        model, regex, replacement = part.split("~", 2)
        edits.append((model, regex_change(regex, replacement.replace("\\n", "\n"))))
    if not name:
        raise ValueError(f"variant {spec!r} has no name")
    return Variant(name, edits)


def start(variant: Variant, root: Path, stack: ExitStack, model: str | None = None) -> Running:
    """Serve the variant (the text model, and `model` if it is a fixture) and warm it up,
    asked through `model`, by default the text model's front."""
    front = text_model().front
    model = model or front
    fixtures = [model] if model != front else []
    repo = build_repository(root / variant.name, variant.edits, text_only=True,
                            fixtures=fixtures)
    server = stack.enter_context(harness.server(repo, root / f"{variant.name}.log"))
    endpoint = triton_endpoint(f"http://{server.http_url}", model)
    asyncio.run(closed_loop_point(endpoint, 8, 3.0))  # warm up
    return Running(variant.name, variant.name, endpoint, {})


def run(variants: Sequence[Variant], levels: Sequence[int], seconds: float,
        rounds: int, model: str | None = None) -> dict[str, list[LoadPoint]]:
    """Best point per level for each variant, all servers up at once (idle but one), in
    the peers' mirrored rounds."""
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp, new_progress() as bar:
        task = bar.add_task("starting", total=len(variants))
        running = {}
        for v in variants:
            bar.update(task, description=f"starting {v.name}")
            running[v.name] = start(v, Path(tmp), stack, model)
            bar.advance(task)
        measured = sweep_rounds(running, levels, seconds, rounds, bar, task)
    return {name: best_of(rounds_) for name, rounds_ in measured.items()}


def report(best: dict[str, list[LoadPoint]], levels: Sequence[int]) -> str:
    lines = [render_table(list(best.items()), levels, P99_OBJECTIVE_MS), ""]
    first = next(iter(best))
    base = goodput(best[first], P99_OBJECTIVE_MS)
    for name, points in best.items():
        g = goodput(points, P99_OBJECTIVE_MS)
        share = f"{g.rps / base.rps:.2f}x" if g and base else "-"
        lines.append(f"- {name}: goodput {share} the first variant's ({first})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.ab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", action="append", required=True, type=parse_variant)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model", help="the model to drive: the text model's front (the "
                        "default) or a fixture of perf/fixtures, e.g. embed_bare")
    args = parser.parse_args(argv)
    best = run(args.variant, args.levels, args.seconds, args.rounds, args.model)
    harness.write_report(harness.run_dir("ab"), "ab", report(best, args.levels),
                         {k: [asdict(p) for p in v] for k, v in best.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
