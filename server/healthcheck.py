"""Deep health for container probes: one real inference through the `health` model.

`/v2/health/ready` stays 200 on 2.51 while a dead Python stub fails every request, so the
compose healthcheck and the Kubernetes readiness probe run this instead. The `health`
model sends a real request to every loaded front and encoder (BLS) and answers a JSON
report; an encoder loaded on demand and not loaded now is listed, not failed.

Standard library only: it runs under the Triton image's own python3, where neither
tritonclient nor this project is installed (the Dockerfile copies this one file).

    python3 healthcheck.py --url localhost:8000      # exit 0 healthy, 1 not (reason printed)

A drain file (written by the Kubernetes preStop hook) fails the check at once, so the pod
leaves the Service's endpoints before Triton gets SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

HEALTH_MODEL = "health"
# Triton's HTTP port (tmr_client.contract.HTTP_PORT), written out because this file runs
# without the project; tests/unit/test_compose.py keeps the two equal.
DEFAULT_URL = "localhost:8000"
DRAIN_FILE = Path("/tmp/tmr-draining")
REQUEST = {"inputs": [{"name": "QUERY", "datatype": "BYTES", "shape": [1], "data": ["probe"]}]}


def verdict(body: bytes) -> tuple[bool, str]:
    """(healthy, reason) from the `health` model's HTTP/JSON answer."""
    try:
        outputs = {o["name"]: o for o in json.loads(body)["outputs"]}
        report = json.loads(outputs["REPORT"]["data"][0])
    except (ValueError, KeyError, IndexError, TypeError) as err:
        return False, f"unreadable health report ({err!r}): {body[:200]!r}"
    failed = {name: m.get("error", "") for name, m in report.get("models", {}).items()
              if not m.get("ok")}
    if report.get("healthy") is True and not failed:
        models = report.get("models", {})
        idle = sorted(n for n, m in models.items() if m.get("loaded") is False)
        served = sorted(set(models) - set(idle))
        return True, "healthy: " + ", ".join(served) + (
            f"; not loaded (on demand): {', '.join(idle)}" if idle else "")
    return False, "unhealthy: " + "; ".join(f"{n}: {e}" for n, e in sorted(failed.items()))


def check(url: str, timeout_s: float = 5.0, drain_file: Path = DRAIN_FILE) -> tuple[bool, str]:
    """Ask the server at host:port `url`; a present drain file fails without asking."""
    if drain_file.exists():
        return False, f"draining ({drain_file} exists)"
    request = urllib.request.Request(
        f"http://{url}/v2/models/{HEALTH_MODEL}/infer", data=json.dumps(REQUEST).encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return verdict(response.read())
    except urllib.error.HTTPError as err:
        return False, f"HTTP {err.code}: {err.read()[:300].decode(errors='replace')}"
    except OSError as err:  # refused, reset, timed out
        return False, f"unreachable: {err}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="Triton's HTTP host:port")
    parser.add_argument("--timeout-s", type=float, default=5.0)
    parser.add_argument("--drain-file", type=Path, default=DRAIN_FILE)
    args = parser.parse_args(argv)
    ok, reason = check(args.url, args.timeout_s, args.drain_file)
    print(reason)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
