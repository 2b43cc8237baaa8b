"""A stub's hang diagnostics: every thread's Python stack on demand.

A stub that does not finalize keeps its model live, and Triton waits for it until the
exit timeout ("Found 1 live models"). After `install`, `kill -USR1 <stub pid>` makes the
stub write the stack of each of its threads to its stderr, which is the server's log; the
stub goes on. faulthandler writes from the signal handler itself, so a stub blocked in C
code (an IPC wait, a runtime call) still answers. server/diagnostics.py sends the signal.
"""

from __future__ import annotations

import faulthandler
import sys

from core.stacks import DUMP_STACKS_SIGNAL


def install() -> None:
    """Write every thread's stack to stderr when DUMP_STACKS_SIGNAL arrives."""
    faulthandler.register(DUMP_STACKS_SIGNAL, file=sys.stderr, all_threads=True)
