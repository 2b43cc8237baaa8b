"""The peers' table over server/goodput.py's `LoadPoint`s: best of rounds, goodput under
the p99 objective, mirrored round orders, the markdown table (perf/peers, perf/targets)."""

from __future__ import annotations

from collections.abc import Sequence

from server.goodput import LoadPoint

NOISY_SHARE = 0.10  # a point during which other work used more of the cores is marked


def best_of(rounds: Sequence[Sequence[LoadPoint]]) -> list[LoadPoint]:
    """Per concurrency, the point (kept whole) of the round with the most answered requests/s."""
    best: dict[int, LoadPoint] = {}
    for points in rounds:
        for point in points:
            kept = best.get(point.concurrency)
            if kept is None or point.rps > kept.rps:
                best[point.concurrency] = point
    return [best[c] for c in sorted(best)]


def goodput(points: Sequence[LoadPoint], p99_budget_ms: float) -> LoadPoint | None:
    """The point of most requests/s with no errors and a p99 within budget, else None."""
    within = [p for p in points if p.errors == 0 and p.p99_ms <= p99_budget_ms]
    return max(within, key=lambda p: p.rps, default=None)


def round_orders(names: Sequence[str], rounds: int) -> list[list[str]]:
    """Each round's order of servers, mirrored: none always first on a warming machine."""
    return [list(names) if r % 2 == 0 else list(reversed(names)) for r in range(rounds)]


def at(points: Sequence[LoadPoint], concurrency: int) -> LoadPoint | None:
    """The point measured at `concurrency`, if any."""
    return next((p for p in points if p.concurrency == concurrency), None)


def cell(point: LoadPoint | None) -> str:
    """`rps / p99` for one table cell, with the errors if any, and `*` if it was noisy."""
    if point is None:
        return "-"
    text = f"{point.rps:.0f} / {point.p99_ms:.0f}"
    if point.errors:
        text += f" ({point.errors} err)"
    noisy = point.foreign_cpu is not None and point.foreign_cpu > NOISY_SHARE
    return text + " *" if noisy else text


def render_table(rows: Sequence[tuple[str, Sequence[LoadPoint]]], levels: Sequence[int],
                 p99_budget_ms: float) -> str:
    """A markdown table: per server, rps / p99 ms at each level, p50 at c1, p99/p50 at c16
    and the goodput under the p99 budget (with the concurrency that gave it)."""
    budget = f"{p99_budget_ms:g}"
    head = ["server", *(f"c{c}" for c in levels), "p50 c1 (ms)", "p99/p50 c16",
            f"goodput at p99 <= {budget} ms"]
    lines = ["| " + " | ".join(head) + " |",
             "| --- |" + " ---: |" * (len(head) - 1)]
    for label, points in rows:
        c1, c16, best = at(points, 1), at(points, 16), goodput(points, p99_budget_ms)
        cells = [label, *(cell(at(points, c)) for c in levels), f"{c1.p50_ms:.1f}" if c1 else "-",
                 f"{c16.p99_ms / c16.p50_ms:.1f}" if c16 and c16.p50_ms > 0 else "-",  # spread
                 f"{best.rps:.0f} (c{best.concurrency})" if best else "none"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
