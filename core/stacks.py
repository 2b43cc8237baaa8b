"""The signal that asks a Python stub for every thread's stack.

The stub installs the handler (python_backends/diagnostics.py) and the server's tooling
sends the signal to stubs that hold up a stop (server/diagnostics.py); both read it here.
"""

from __future__ import annotations

import signal

DUMP_STACKS_SIGNAL = signal.SIGUSR1
