"""Every thread's Python stack on demand, from a running Python stub.

A stub that does not finalize keeps its model live, and Triton waits for it until the
exit timeout ("Found 1 live models"). `kill -USR1 <stub pid>` makes a stub write the
stack of each of its threads to its stderr, which is the server's log; the stub goes on.
BaseModel installs the handler in every stub at initialize, and TritonServer.stop sends
the signal to the stubs still alive shortly before Triton's exit timeout runs out.
faulthandler writes from the signal handler itself, so a stub blocked in C code (an IPC
wait, a runtime call) still answers.
"""

from __future__ import annotations

import faulthandler
import signal
import sys

DUMP_STACKS_SIGNAL = signal.SIGUSR1


def dump_stacks_on_signal() -> None:
    """Write every thread's stack to stderr when DUMP_STACKS_SIGNAL arrives."""
    faulthandler.register(DUMP_STACKS_SIGNAL, file=sys.stderr, all_threads=True)
