"""perf_analyzer 2.51's CSV (a real file from this machine) parses into typed rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.perf_analyzer import parse_csv

DATA = Path(__file__).parent / "data" / "perf_analyzer_embed_c1.csv"


def test_parse_csv_reads_throughput_and_latencies_in_milliseconds() -> None:
    (row,) = parse_csv(DATA.read_text())
    assert row.concurrency == 1
    assert row.throughput == pytest.approx(82.6507)
    assert (row.p50_ms, row.p95_ms, row.p99_ms) == pytest.approx((11.671, 15.758, 18.967))
    assert row.queue_ms == pytest.approx(1.119)
    assert row.compute_ms == pytest.approx((33 + 10244 + 185) / 1000)
    assert row.p90_ms == pytest.approx(14.783)
    assert row.overhead_ms == pytest.approx((9 + 482 + 4) / 1000)


def test_parse_csv_of_a_header_only_file_is_empty() -> None:
    assert parse_csv(DATA.read_text().splitlines()[0]) == []


def test_an_unstable_level_is_measured_once_more_with_twice_the_tolerance(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from server import perf_analyzer

    # A stand-in binary: exit 2 (no stable windows) within 20%, the real CSV within 40%.
    script = tmp_path / "perf_analyzer"
    script.write_text(f"""#!/bin/sh
case "$*" in *--stability-percentage=20*) exit 2;; esac
for a in "$@"; do [ "$prev" = "-f" ] && cp {DATA} "$a"; prev="$a"; done
""")
    script.chmod(0o755)
    monkeypatch.setattr(perf_analyzer, "binary", lambda: script)
    row = perf_analyzer.run("embed", "localhost:1", 1, "in.json", tmp_path / "out.csv")
    assert row.throughput == pytest.approx(82.6507)
    assert "unstable within 20%; measuring again within 40%" in capsys.readouterr().err
