"""`tmr`: the project's one command line. `python -m cli` is the same command.

Each command module keeps its heavy imports inside the command, so `tmr embed` does not
pay for torch. cli/options.py builds the options every command shares.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from cli import (
    classify,
    embed,
    export,
    operate,
    perf,
    release,
    rerank,
    rollout,
    serve,
    tokens,
    tune,
    watchdog,
)
from cli.errors import EXIT_CODES_HELP, Tried, report
from cli.options import ENVIRONMENT_HELP, SUMMARIES

GROUPS = {  # how `tmr --help` lists the commands
    "serve": ["serve", "tune", "watchdog"],
    "models & releases": ["export", "add", "versions", "gate", "promote", "rollback", "rollout",
                          "degrade", "health"],
    "calls": ["embed", "tokens", "classify", "rerank"],
    "perf": ["perf"],
}
MODULES = (serve, tune, watchdog, export, release, rollout, operate, embed, tokens, classify,
           rerank, perf)


def grouped_commands() -> str:
    """The commands by group, one line each, for `tmr --help`."""
    lines = []
    for group, names in GROUPS.items():
        lines.append(f"{group}:")
        lines += [f"  {name:<10} {SUMMARIES[name]}" for name in names]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tmr",
                                     usage="tmr [-h] [--log-json] [--debug] COMMAND ...",
                                     epilog=f"{ENVIRONMENT_HELP}\n\n{EXIT_CODES_HELP}",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log-json", action="store_true",
                        help="log JSON lines (also: TMR_LOG_JSON=1); see docs/observability.md")
    parser.add_argument("--debug", action="store_true",
                        help="on an error, show the full traceback instead of one line")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help=argparse.SUPPRESS, prog="tmr")
    for module in MODULES:
        module.register(sub)
    parser.description = (f"The Triton model repository's command line.\n\n"
                          f"{grouped_commands()}\n\n`tmr COMMAND --help` for one command.")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from server.log_format import configure_logging, json_requested

    args = build_parser().parse_args(rollout.with_verb(sys.argv[1:] if argv is None else argv))
    configure_logging(json_requested(args.log_json))
    return run(args)


def run(args: argparse.Namespace) -> int:
    """The one error boundary: any error is one line on stderr and an exit code
    (cli/errors.py), unless --debug asks for the traceback."""
    opts = None
    try:
        opts = args.make(args)
        return args.run(opts)
    except KeyboardInterrupt:
        print(f"tmr {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `tmr ... | head`: the reader left; nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error
        return 141
    except Exception as err:
        if args.debug:
            raise
        return report(err, Tried.of(args, opts))


if __name__ == "__main__":
    sys.exit(main())
