"""`tmr serve`: the CPU dev server in the foreground, with a clean shutdown on Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from server.launcher import ServerStartError, TritonServer
from server.settings import Ports, ServerOptions
from server.watchdog import Watchdog

ENCODERS = ("minilm_onnx", "minilm_torchscript", "minilm_int8")
WATCHED_MODELS = ["embed", *ENCODERS]
WATCHDOG_PORT_OFFSET = 100  # metrics 8002 -> watchdog 8102


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    return ServerOptions(
        repository=args.repository.resolve(),
        ports=Ports(http=args.http_port, grpc=args.grpc_port, metrics=args.metrics_port),
        control_mode=args.control_mode,
        model_config_name=args.model_config_name,
        log_verbose=args.log_verbose,
        extra=tuple(args.extra),
    )


def missing_exports(repository: Path) -> list[str]:
    """Encoder models of the repository that have no version folder yet."""
    missing = []
    for name in ENCODERS:
        model_dir = repository / name
        if model_dir.is_dir() and not any(p.name.isdigit() for p in model_dir.iterdir()):
            missing.append(name)
    return missing


def tmr_command() -> str:
    """How to call `tmr` from the current directory (the venv need not be activated)."""
    script = Path(sys.executable).parent / "tmr"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def banner(server: TritonServer) -> str:
    return "\n".join([
        "Triton 2.51.0 is serving the CPU model repository",
        f"  repository  {server.opts.repository}",
        f"  HTTP        http://{server.http_url}   (KServe v2)",
        f"  gRPC        {server.grpc_url}",
        f"  metrics     {server.metrics_url}",
        f"  log         {server.log_path}",
        "Try it:",
        f"  {tmr_command()} embed --url {server.http_url} 'Triton serves sentence embeddings.'",
        f"  curl -s http://{server.http_url}/v2/models/embed/infer -d "
        "'{\"inputs\":[{\"name\":\"TEXT\",\"datatype\":\"BYTES\",\"shape\":[1,1],"
        "\"data\":[\"hello\"]}]}' | head -c 200",
        "Ctrl-C or SIGTERM stops it.",
    ])


def example_call(server: TritonServer) -> str:
    from client import EmbedClient

    with EmbedClient(server.http_url, protocol="http") as client:
        vector = client.embed(["Triton serves sentence embeddings."])[0]
    norm = float((vector**2).sum() ** 0.5)
    return f"embed answered: dim={vector.shape[0]} norm={norm:.4f} first={vector[:4].round(4)}"


def start_watchdog(server: TritonServer, args: argparse.Namespace) -> Watchdog | None:
    """The watchdog reloads through the load API, so it runs in explicit mode only."""
    if args.no_watchdog or server.opts.control_mode != "explicit":
        return None
    port = server.opts.ports.metrics + WATCHDOG_PORT_OFFSET
    watchdog = Watchdog(f"localhost:{server.opts.ports.http}", server.metrics_url,
                        WATCHED_MODELS, interval_s=5.0, metrics_port=port)
    watchdog.start()
    print(f"  watchdog    http://localhost:{port}/metrics  (reloads dead or stalled models)",
          flush=True)
    return watchdog


def serve(args: argparse.Namespace) -> int:
    opts = options_from_args(args)
    missing = missing_exports(opts.repository)
    if missing:
        print(f"error: no exported version for {', '.join(missing)}; run `tmr export minilm` "
              "(or `make setup`) first", file=sys.stderr)
        return 2
    server = TritonServer(opts)
    stopping = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server.start()
        server.wait_ready()
    except ServerStartError as err:
        server.stop()
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(banner(server), flush=True)
    if not args.no_check:
        print(example_call(server), flush=True)
    watchdog = start_watchdog(server, args)
    while not stopping and server.process is not None and server.process.poll() is None:
        time.sleep(0.2)
    if watchdog is not None:
        watchdog.stop()
    print("stopping tritonserver (waiting for in-flight requests)...", flush=True)
    code = server.stop()
    print(f"tritonserver exited with code {code}", flush=True)
    return 0 if stopping else 1
