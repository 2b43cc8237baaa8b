"""Resident memory of a whole CPU server once ready: Triton and every Python stub, by model.

    python -m perf.memory                    # the repository as `make serve` starts it
    python -m perf.memory --all              # every model loaded, as before the start rule

It starts the server on a copy of the repository, calls every front model once (so each
one has run a real request through its encoders), then reads VmRSS and Pss of Triton and
of each stub from /proc. RSS counts pages shared between processes once per process (the
figure a container limit and `ps` show); PSS shares them out. Report:
perf/results/memory-*/memory.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from core.paths import DEFAULT_REPOSITORY
from perf import harness
from server.memory import server_memory
from server.serve import example_calls

SETTLE_S = 3.0  # after the calls, for lazy allocations to land before the reading


def report(table: dict[str, dict[str, float]], what: str) -> str:
    total_rss = sum(r["rss_mib"] for r in table.values())
    total_pss = sum(r["pss_mib"] for r in table.values())
    lines = [f"## Server memory once ready: {what}", "",
             "| process | count | RSS MiB | PSS MiB |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {name} | {r['processes']:.0f} | {r['rss_mib']:.0f} | {r['pss_mib']:.0f} |"
              for name, r in sorted(table.items(), key=lambda kv: -kv[1]["rss_mib"])]
    lines.append(f"| **total** | {sum(r['processes'] for r in table.values()):.0f} | "
                 f"**{total_rss:.0f}** | {total_pss:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    parser.add_argument("--all", action="store_true",
                        help="load every model of the repository at start")
    args = parser.parse_args(argv)
    out = harness.run_dir("memory")
    with harness.served_copy(out / "tritonserver.log", sources=(args.repository,),
                             load_all=args.all) as server:
        calls = example_calls(server)
        time.sleep(SETTLE_S)
        assert server.process is not None  # started by served_copy
        table = server_memory(server.process.pid)
    what = "every model loaded" if args.all else "the models loaded at start"
    markdown = report(table, what) + "\n\n" + "\n".join(f"- {c}" for c in calls)
    harness.write_report(out, "memory", markdown, {"what": what, "table": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
