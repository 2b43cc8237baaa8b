"""Free TCP ports for servers started side by side (tests, benchmarks)."""

from __future__ import annotations

import socket
from contextlib import ExitStack


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports that are free right now on 127.0.0.1.

    Every socket stays bound until all are chosen, so the kernel cannot hand out the
    same port twice (asking one at a time can)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                 for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def free_port() -> int:
    """One free TCP port."""
    return free_ports(1)[0]
