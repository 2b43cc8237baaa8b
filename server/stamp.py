"""Where a generated table or plot comes from: the date, the host's CPU and cores, the commit;
and the stamped report of one run in its results folder.

Every writer of a generated doc stamps its output with one `Stamp`: `make bench` the top of
docs/benchmarks.md's generated part, `write_report` every report (`tmr perf sweep` and the
benchmarks), and `save_figure` every plot (bench, sweep, soak, scenarios) in its footer. A
figure without its host and commit cannot be compared with another.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.files import write_atomically
from core.hardware import host_cpu
from core.paths import PROJECT_ROOT, results_dir


@dataclass(frozen=True)
class Stamp:
    """When, where and from which code a figure was measured."""

    date: str  # YYYY-MM-DD, UTC
    cpu: str  # /proc/cpuinfo's model name
    cores: int
    commit: str  # short hash, "-dirty" when the work tree had changes

    def line(self) -> str:
        return f"{self.date}, {self.cpu}, {self.cores} cores, commit {self.commit}"

    def markdown(self) -> str:
        """The line under a generated table."""
        return f"_Measured {self.line()}._"

    def on_figure(self, fig: Any) -> None:
        """A small grey footer on a matplotlib figure, bottom right."""
        fig.text(0.995, 0.005, self.line(), ha="right", va="bottom", fontsize=7,
                 color="grey")


def git_commit(root: Path = PROJECT_ROOT) -> str:
    """The work tree's commit, `-dirty` when it has changes; "unknown" outside git."""
    try:
        done = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=10"],
                              cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown"


def current_stamp(now: datetime | None = None, cpu: dict[str, object] | None = None,
          commit: str | None = None) -> Stamp:
    """This host's stamp now; each part can be given (tests, a stamp re-read)."""
    cpu = cpu if cpu is not None else host_cpu()
    now = now or datetime.now(UTC)
    return Stamp(now.strftime("%Y-%m-%d"), str(cpu["model"]), int(cpu["cores"]),
                 commit if commit is not None else git_commit())


def subplots(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """matplotlib's `plt.subplots` on the Agg backend (no display): where every plot starts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


def save_figure(fig: Any, path: Path, dpi: int = 100, stamp: Stamp | None = None) -> None:
    """Every generated plot is saved here: laid out, stamped (this host, now, unless given),
    then written."""
    fig.tight_layout()
    (stamp or current_stamp()).on_figure(fig)
    fig.savefig(path, dpi=dpi)


def run_dir(kind: str) -> Path:
    """A new perf/results/<kind>-<timestamp>/ (git-ignored)."""
    out = results_dir(kind, time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_report(out: Path, name: str, markdown: str, data: Any = None) -> str:
    """`<name>.md`, stamped, and, with `data`, `<name>.json` in `out`; the markdown and
    where the results are, for the caller to show."""
    markdown = f"{markdown}\n\n{current_stamp().markdown()}"
    write_atomically(out / f"{name}.md", markdown + "\n")
    if data is not None:
        write_atomically(out / f"{name}.json", json.dumps(data, indent=1, default=float) + "\n")
    return f"{markdown}\n\nresults in {out}"
