"""`python -m perf.peers [--seconds 6] [--concurrency 1 4 8 16 32] [--servers ...]`"""

from __future__ import annotations

import argparse
from pathlib import Path

from core.paths import P99_OBJECTIVE_MS
from perf.peers import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.peers", description="Triton `embed` "
                                     "beside infinity-emb, two FastAPI servers and the "
                                     "single-stub floor `embed_bare`, one client.")
    parser.add_argument("--seconds", type=float, default=run.SECONDS,
                        help="length of each concurrency point")
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(run.LEVELS))
    parser.add_argument("--servers", nargs="+", choices=run.SERVERS, default=list(run.SERVERS))
    parser.add_argument("--rounds", type=int, default=run.ROUNDS)
    parser.add_argument("--p99-budget-ms", type=float, default=P99_OBJECTIVE_MS)
    parser.add_argument("--peers-dir", type=Path, default=run.PEERS_DIR,
                        help="where `make peers` put the venvs")
    args = parser.parse_args(argv)
    run.run_peers(args.servers, args.concurrency, args.seconds, args.rounds,
                  args.p99_budget_ms, args.peers_dir)  # prints the report and where it is
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
