"""`tmr watchdog`: the watchdog of `tmr serve` as a process of its own, beside any Triton.

In compose and on Kubernetes Triton runs in its own container, so the watchdog thread
(`server.watchdog.Watchdog`) runs here instead, against the server's HTTP and metrics
endpoints, until SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import threading
from dataclasses import dataclass
from types import FrameType

from cli.options import add_command, add_models, add_server, models_of, resolve_url
from server.serve import WATCHDOG_PORT_OFFSET
from server.settings import Ports

WATCHDOG_INTERVAL_S = 5.0


@dataclass(frozen=True)
class WatchdogOptions:
    """Which server to watch, where to serve the watchdog's own metrics, how often."""

    url: str
    metrics_url: str
    port: int
    interval_s: float
    models: list[str] | None


def register(sub: argparse._SubParsersAction) -> None:
    defaults = Ports()
    parser = add_command(
        sub, "watchdog", "reload models whose stub died or whose queue stalled",
        watchdog_command,
        lambda a: WatchdogOptions(resolve_url(a.url), a.metrics_url, a.port, a.interval_s,
                                  models_of(a)))
    add_models(parser, help="only these (default: every family model the server loads)")
    add_server(parser)
    parser.add_argument("--metrics-url", default=f"http://localhost:{defaults.metrics}/metrics",
                        help="the server's Prometheus metrics (the queue stall signal)")
    parser.add_argument("--port", type=int, default=defaults.metrics + WATCHDOG_PORT_OFFSET,
                        help="where the watchdog serves its own /metrics")
    parser.add_argument("--interval-s", type=float, default=WATCHDOG_INTERVAL_S,
                        help="seconds between two probes")


def watchdog_command(opts: WatchdogOptions) -> int:
    """Run until SIGTERM/SIGINT (exit 0); exit 1 if the watchdog thread dies on its own."""
    from server.watchdog import Watchdog

    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    watchdog = Watchdog(opts.url, opts.metrics_url, opts.models,
                        interval_s=opts.interval_s, metrics_port=opts.port)
    watchdog.start()
    watched = ", ".join(opts.models or ["every family model"])
    print(f"watchdog: probing {watched} on {opts.url} every "
          f"{opts.interval_s:g} s; reloads counted on http://0.0.0.0:{opts.port}/metrics",
          flush=True)
    while not stopping.wait(0.5) and watchdog.is_alive():
        pass
    watchdog.stop()
    watchdog.join(timeout=opts.interval_s + 30)
    return 0 if stopping.is_set() else 1
