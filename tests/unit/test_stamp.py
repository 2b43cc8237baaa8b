"""server/stamp.py: every generated table and plot says when, where and from which commit, and
a run's report is written as stamped markdown and JSON in its folder."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from server.stamp import Stamp, current_stamp, git_commit, save_figure, write_report

pytestmark = pytest.mark.unit

CPU = {"model": "AMD EPYC 7B13", "cores": 2}
WHEN = datetime(2026, 12, 4, 23, 59, tzinfo=UTC)


def test_a_stamp_names_the_date_the_cpu_its_cores_and_the_commit():
    stamp = current_stamp(now=WHEN, cpu=CPU, commit="abc1234567")
    assert stamp == Stamp("2026-12-04", "AMD EPYC 7B13", 2, "abc1234567")
    assert stamp.markdown() == "_Measured 2026-12-04, AMD EPYC 7B13, 2 cores, commit abc1234567._"


def test_this_hosts_stamp_reads_the_cpu_and_the_work_trees_commit():
    stamp = current_stamp()
    assert stamp.cpu and stamp.cpu != "unknown" and stamp.cores >= 1
    assert stamp.commit == git_commit() != "unknown"


def test_outside_git_the_commit_is_unknown(tmp_path: Path):
    assert git_commit(tmp_path) == "unknown"


def test_a_saved_figure_carries_the_stamp_in_its_footer(tmp_path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    stamp = current_stamp(now=WHEN, cpu=CPU, commit="abc1234567")
    save_figure(fig, tmp_path / "plot.png", 50, stamp)
    assert [t.get_text() for t in fig.texts] == [stamp.line()]
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"
    plt.close(fig)


def test_every_plot_is_saved_through_the_stamp():
    """No writer in perf/ or server/ saves a figure around the stamp."""
    from core.paths import PROJECT_ROOT

    bare = [p.relative_to(PROJECT_ROOT)
            for folder in ("perf", "server") for p in (PROJECT_ROOT / folder).rglob("*.py")
            if p != PROJECT_ROOT / "server" / "stamp.py"
            and ".savefig(" in p.read_text(encoding="utf-8")]
    assert bare == []


def test_a_report_is_written_as_markdown_and_json_and_returned(tmp_path: Path) -> None:
    shown = write_report(tmp_path, "run", "| a |", {"rps": 1.5})
    table, stamp = (tmp_path / "run.md").read_text().split("\n\n")
    assert table == "| a |" and stamp.startswith("_Measured ")
    assert json.loads((tmp_path / "run.json").read_text()) == {"rps": 1.5}
    assert shown.startswith("| a |") and shown.endswith(f"results in {tmp_path}")
