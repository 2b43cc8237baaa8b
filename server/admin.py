"""Operator commands against a running server: force a degradation level, deep health.

Models are found on the server itself (its repository index and configs, admin APIs),
so these work from anywhere the admin key reaches: `tmr` on the host, the watchdog in
its own container. Each model is probed the way its family says (one real inference).
Every call goes through the one operator client (server.admin_client). What a front
reports is read back with the producers' own parsers: `ServedBy.parse` for SERVED_BY and
`core.messages.degraded_level` for the router's refusal.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tmr_client import TritonClientError, UnavailableError
from tmr_client.core import DEFAULT_MODEL

from core.families.lanes import lane_name
from core.messages import degraded_level
from core.repository import set_parameter
from core.served_by import OUTPUT as SERVED_BY
from core.served_by import ServedBy
from core.startup import bls_encoders
from core.timeouts import LEVEL_WAIT
from core.versions import read_config
from server.admin_client import AdminClient, Check

AUTO = -1
DEFAULT_FRONT = DEFAULT_MODEL
FORCED_LEVEL = "forced_level"  # the front's parameter that pins its ladder (-1: automatic)


def force_level_explicit(url: str, level: int, model: str = DEFAULT_FRONT,
                         admin_key: str | None = None) -> None:
    """Reload `model`, and its interactive lane when the server has it, through the load
    API with `forced_level` overridden (explicit mode): an operator's level holds for
    priority 1 too.

    The override lives in the server only: `--level auto` sends it back as -1. The
    on-disk config.pbtxt stays the source of truth for the next start. Both calls are
    restricted APIs: they carry the admin key (tmr_client.auth).
    """
    with AdminClient(url, admin_key) as admin:
        lane = lane_name(model)
        # a lane of its own has a ladder; an ensemble lane runs in the front's (lanes.py)
        own = lane in admin.ready_models() and FORCED_LEVEL in admin.config(lane).parameters
        for name in (model, *([lane] if own else [])):
            admin.reload(name, {FORCED_LEVEL: str(level)})


def force_level_poll(repository: Path, level: int, model: str = DEFAULT_FRONT) -> None:
    """Edit config.pbtxt in place (poll mode), the lane's too: Triton reloads them on its
    next scan."""
    for name in (model, lane_name(model)):
        path = repository / name / "config.pbtxt"
        if path.is_file() and (name == model or FORCED_LEVEL in read_config(path.parent)
                               .parameters):  # an ensemble lane has no ladder of its own
            set_parameter(repository, name, FORCED_LEVEL, str(level))


@dataclass(frozen=True)
class Observation:
    """What a front reported to one request: its SERVED_BY, or its refusal, and the ladder
    level that names (None: neither, e.g. the server is unreachable)."""

    text: str
    level: int | None

    @classmethod
    def of_answer(cls, served_by: str) -> Observation:
        """An answer: the level its SERVED_BY names."""
        return cls(served_by, ServedBy.parse(served_by).level)

    @classmethod
    def of_refusal(cls, message: str) -> Observation:
        """A refusal: the level a degraded refusal names (None for any other refusal)."""
        return cls(message, degraded_level(message))


def observed_level(url: str, model: str = DEFAULT_FRONT) -> Observation:
    """What a real high-priority request reports now: SERVED_BY, or the refusal. The
    request is the model's family probe (any family's front answers SERVED_BY)."""
    with AdminClient(url) as admin:
        (target,) = admin.probe_targets([model])
        try:
            answer = admin.infer(model, target.inputs, [SERVED_BY], priority=1)
        except UnavailableError as err:  # the router refusing at its level, or overload
            return Observation.of_refusal(err.message)
    return Observation.of_answer(answer[SERVED_BY].reshape(-1)[0].decode())


def wait_for_level(url: str, level: int, timeout_s: float = LEVEL_WAIT.seconds,
                   consecutive: int = 1, model: str = DEFAULT_FRONT) -> str:
    """Poll with real requests until `consecutive` answers in a row report `level`
    (AUTO: level 0); the last answer's text. Each front instance keeps its own ladder,
    hence `consecutive`."""
    want = 0 if level == AUTO else level
    deadline = time.monotonic() + timeout_s
    seen, streak = Observation("", None), 0
    while time.monotonic() < deadline:
        try:
            seen = observed_level(url, model)
        except TritonClientError as err:
            seen = Observation(str(err), None)
        streak = streak + 1 if seen.level == want else 0
        if streak >= consecutive:
            return seen.text
        time.sleep(0.5 if streak == 0 else 0.1)
    raise TimeoutError(f"{model} did not reach level {want} in {timeout_s:.0f} s; "
                       f"last: {seen.text}")


def deep_health(url: str, models: list[str] | None = None) -> list[Check]:
    """A real inference through every family model the server has loaded (or those
    named). An encoder a loaded front routes to that is not loaded fails (core.startup's
    rule loads it at start); other encoders load on demand and are not probed."""
    with AdminClient(url) as admin:
        if models is not None:
            return [admin.probe_model(m) for m in models]
        targets = admin.probe_targets()
        routed = {encoder for t in targets if t.is_front for encoder in bls_encoders(t.params)}
        missing = sorted(routed - {t.model for t in targets})
        return [admin.probe(t) for t in targets] + [
            Check(m, False, 0.0, "not loaded, yet a loaded front calls it over BLS")
            for m in missing]


HEALTH_MODEL = "health"  # the deep health check inside the server (python_backends/health.py)


def server_memory_report(url: str) -> dict | None:
    """The server's memory as its `health` model reads it from /proc (it runs inside the
    server, so this works for a remote server too): {"total": ..., "by_model": ...};
    None when the server has no `health` model loaded."""
    with AdminClient(url) as admin:
        if HEALTH_MODEL not in admin.ready_models():
            return None
        answer = admin.infer(HEALTH_MODEL, {"QUERY": np.array([b"memory"], dtype=np.object_)},
                             ["REPORT"])
    return json.loads(answer["REPORT"][0]).get("memory")


def idle_models(url: str) -> list[str]:
    """The models of the server's repository with no READY version (loaded on demand)."""
    with AdminClient(url) as admin:
        return admin.idle_models()


def load_models(url: str, models: list[str]) -> list[str]:
    """Load models through the load API (explicit mode), in order; the names loaded."""
    with AdminClient(url) as admin:
        for model in models:
            admin.load(model)
    return list(models)
