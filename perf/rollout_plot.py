"""Traffic per version over time during one rollout, drawn from what the controller wrote.

    python -m perf.rollout_plot model_repository/minilm_onnx [--rollout ID] [--out PNG]

Reads the model folder's `rollout_trace.csv` (the rows each version took, cumulative, at
every look of the controller: server/rollout.py) and `rollout_log.jsonl` (its decisions),
and plots the rows per second each version answered and the rows shadowed to the
candidate, with a line at every decision. Default: the last rollout of the model.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from perf.stamp import current_stamp, save_figure
from server.rollout import LOG_FILE, TRACE_FILE


def series(trace: Path, rollout: str) -> dict[str, list[tuple[float, float]]]:
    """(time, rows/s) per "v<version> <path>" between consecutive looks."""
    looks: dict[str, list[tuple[float, float]]] = defaultdict(list)
    with trace.open(encoding="utf-8") as f:
        for rid, at, _step, version, path, rows in csv.reader(f):
            if rid == rollout and path in ("served", "shadow"):
                looks[f"v{version} {path}"].append((float(at), float(rows)))
    rates: dict[str, list[tuple[float, float]]] = {}
    for name, points in looks.items():
        rates[name] = [(t1, max(n1 - n0, 0.0) / (t1 - t0))
                       for (t0, n0), (t1, n1) in pairwise(points) if t1 > t0]
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--rollout", default=None, help="its id (default: the last)")
    parser.add_argument("--out", type=Path, default=Path("rollout.png"))
    args = parser.parse_args()
    decisions = [json.loads(line) for line in
                 (args.model_dir / LOG_FILE).read_text(encoding="utf-8").splitlines() if line]
    rollout = args.rollout or decisions[-1]["rollout"]
    decisions = [d for d in decisions if d["rollout"] == rollout]
    rates = series(args.model_dir / TRACE_FILE, rollout)
    start = min(t for points in rates.values() for t, _ in points)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    for name, points in sorted(rates.items()):
        ax.plot([t - start for t, _ in points], [r for _, r in points], label=name,
                linestyle="--" if name.endswith("shadow") else "-")
    for d in decisions:
        at = datetime.fromisoformat(d["at"]).timestamp() - start
        ax.axvline(at, color="grey", linewidth=0.8)
        ax.text(at, ax.get_ylim()[1] * 0.95, f" {d['event']}", rotation=90, fontsize=7,
                va="top")
    ax.set_xlabel("seconds")
    ax.set_ylabel("rows per second")
    ax.set_title(f"{args.model_dir.name}: rollout of v{decisions[0]['version']} "
                 f"beside v{decisions[0]['stable']} ({decisions[-1]['event']})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    began = datetime.fromisoformat(decisions[0]["at"])
    save_figure(fig, args.out, 110, current_stamp(now=began))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
