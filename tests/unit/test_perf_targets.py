"""perf.targets: the benchmark's targets judged from measured points."""

from __future__ import annotations

from perf.targets import Target, allowed_rate, route_targets, serving_targets, table
from server.goodput import LoadPoint


def point(c: int, rps: float, p50: float, p99: float, errors: int = 0) -> LoadPoint:
    return LoadPoint(c, 6.0, int(rps * 6), errors, rps, p50, p50 * 1.2, p99)


EMBED = [point(1, 90, 10, 17), point(4, 185, 20, 40), point(16, 246, 60, 134)]
PEERS = {"embed": EMBED,
         "infinity": [point(1, 79, 12, 17), point(4, 154, 25, 41), point(16, 193, 80, 102)],
         "batcher": [point(1, 110, 8, 21), point(4, 134, 28, 58)],
         "naive": [point(1, 118, 7.9, 17)]}


def test_allowed_rate_is_the_best_batch_whose_time_fits_the_objective():
    rates = {1: 276.0, 4: 358.0, 8: 377.0, 16: 383.0, 32: 355.0}
    # one process runs batch 8 at 188.5/s: 42 ms; batch 16 at 191.5/s: 84 ms
    assert allowed_rate(rates, cores=2, budget_ms=60) == (377.0, 8)
    assert allowed_rate(rates, cores=2, budget_ms=1) == (0.0, 0)


def test_serving_targets_are_ratios_to_the_peers_of_the_same_run():
    targets = {t.name: t for t in serving_targets(PEERS, in_process=377.0, budget_ms=60)}
    assert targets["goodput vs infinity-emb"].measured == 185 / 154
    assert not targets["goodput vs infinity-emb"].met
    assert targets["goodput vs the seeds' batcher"].measured == 185 / 134
    assert targets["p50 at c1 vs naive FastAPI's"].measured == 10 / 7.9
    assert targets["p99/p50 at c16"].measured == 134 / 60
    assert targets["goodput vs in-process at the allowed batches"].measured == 185 / 377


def test_the_floor_is_judged_by_the_same_targets_against_the_same_peers():
    bare = [point(1, 100, 8, 15), point(4, 200, 18, 45), point(16, 250, 55, 90)]
    targets = {t.name: t for t in serving_targets({**PEERS, "bare": bare}, 377.0, 60,
                                                  subject="bare")}
    assert targets["goodput vs infinity-emb"].measured == 200 / 154
    assert targets["p50 at c1 vs naive FastAPI's"].measured == 8 / 7.9
    assert targets["p99/p50 at c16"].measured == 90 / 55


def test_the_bench_report_judges_the_floor_only_when_it_was_measured():
    from perf.bench import floor_section

    assert floor_section(PEERS, 377.0) == []
    bare = [point(1, 100, 8, 15), point(4, 200, 18, 45), point(16, 250, 55, 90)]
    text = "\n".join(floor_section({**PEERS, "bare": bare}, 377.0))
    assert "`embed_bare`" in text
    assert f"| goodput vs infinity-emb | {200 / 154:.2f} | >= 1.5 | MISSED |" in text


def test_a_missing_peer_or_point_is_not_measured_and_not_met():
    targets = {t.name: t for t in serving_targets({"embed": EMBED[:1]}, 377.0, 60)}
    assert targets["goodput vs infinity-emb"].measured is None
    assert not targets["goodput vs infinity-emb"].met
    assert targets["p99/p50 at c16"].measured is None


def test_at_most_targets_pass_at_or_under_the_goal():
    assert Target("tail", 1.5, 1.5, at_least=False).met
    assert not Target("tail", 1.51, 1.5, at_least=False).met
    assert Target("rate", 1.5, 1.5).met


def test_route_targets_and_the_table():
    targets = route_targets({"throughput": 0.95, "p99": 1.12, "p50": 1.0})
    assert [t.met for t in targets] == [True, False]
    text = table(targets)
    assert "| OpenAI route throughput vs KServe (c16) | 0.95 | >= 0.9 | met |" in text
    assert "| OpenAI route p99 vs KServe (c16) | 1.12 | <= 1.1 | MISSED |" in text
    assert "not measured" in table(route_targets(None))
