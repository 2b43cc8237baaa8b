"""`tmr watchdog`: the watchdog of `tmr serve` as a process of its own, beside any Triton.

In compose and on Kubernetes Triton runs in its own container, so the watchdog thread
(`server.watchdog.Watchdog`) runs here instead, against the server's HTTP and metrics
endpoints, until SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import threading
from types import FrameType

from server.serve import WATCHDOG_PORT_OFFSET
from server.settings import Ports

WATCHDOG_INTERVAL_S = 5.0


def add_parser(sub: argparse._SubParsersAction) -> None:
    defaults = Ports()
    parser = sub.add_parser("watchdog", help="reload models whose stub died or queue stalled")
    parser.add_argument("--url", default=f"localhost:{defaults.http}",
                        help="Triton's HTTP host:port")
    parser.add_argument("--metrics-url", default=f"http://localhost:{defaults.metrics}/metrics")
    parser.add_argument("--port", type=int, default=defaults.metrics + WATCHDOG_PORT_OFFSET,
                        help="where the watchdog serves its own /metrics")
    parser.add_argument("--interval-s", type=float, default=WATCHDOG_INTERVAL_S)
    parser.add_argument("--models", nargs="+", default=None,
                        help="only these (default: every family model the server loads)")
    parser.set_defaults(func=watchdog_command)


def watchdog_command(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT (exit 0); exit 1 if the watchdog thread dies on its own."""
    from server.watchdog import Watchdog

    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    watchdog = Watchdog(args.url, args.metrics_url, args.models,
                        interval_s=args.interval_s, metrics_port=args.port)
    watchdog.start()
    watched = ", ".join(args.models or ["every family model"])
    print(f"watchdog: probing {watched} on {args.url} every "
          f"{args.interval_s:g} s; reloads counted on http://0.0.0.0:{args.port}/metrics",
          flush=True)
    while not stopping.wait(0.5) and watchdog.is_alive():
        pass
    watchdog.stop()
    watchdog.join(timeout=args.interval_s + 30)
    return 0 if stopping.is_set() else 1
