"""`tmr`: the project's one command line. `python -m cli` is the same command.

Each command module keeps its heavy imports inside the command, so `tmr embed` does not
pay for torch. cli/options.py builds the options every command shares.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cli import (
    classify,
    embed,
    export,
    operate,
    perf,
    release,
    rollout,
    serve,
    tune,
    watchdog,
)
from cli.options import ENVIRONMENT_HELP, SUMMARIES

GROUPS = {  # how `tmr --help` lists the commands
    "serve": ["serve", "tune", "watchdog"],
    "models & releases": ["export", "add", "versions", "gate", "promote", "rollback", "rollout",
                          "degrade", "health"],
    "calls": ["embed", "classify"],
    "perf": ["perf"],
}
MODULES = (serve, tune, watchdog, export, release, rollout, operate, embed, classify, perf)


def grouped_commands() -> str:
    """The commands by group, one line each, for `tmr --help`."""
    lines = []
    for group, names in GROUPS.items():
        lines.append(f"{group}:")
        lines += [f"  {name:<10} {SUMMARIES[name]}" for name in names]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tmr", usage="tmr [-h] [--log-json] COMMAND ...",
                                     epilog=ENVIRONMENT_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log-json", action="store_true",
                        help="log JSON lines (also: TMR_LOG_JSON=1); see docs/observability.md")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help=argparse.SUPPRESS, prog="tmr")
    for module in MODULES:
        module.register(sub)
    parser.description = (f"The Triton model repository's command line.\n\n"
                          f"{grouped_commands()}\n\n`tmr COMMAND --help` for one command.")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from server.log_format import configure_logging, json_requested

    args = build_parser().parse_args(argv)
    configure_logging(json_requested(args.log_json))
    return args.run(args.make(args))


if __name__ == "__main__":
    sys.exit(main())
