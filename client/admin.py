"""Operator commands: `tmr degrade` (force a degradation level) and `tmr health` (deep check)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from client.auth import key_headers
from client.errors import TritonClientError, UnavailableError, from_exception
from client.retry import NO_RETRY
from client.sync import EmbedClient
from python_backends import contracts
from server.repository import set_parameter

AUTO = -1


def force_level_explicit(url: str, level: int, model: str = contracts.EMBED_MODEL,
                         admin_key: str | None = None) -> None:
    """Reload `model` through the load API with `forced_level` overridden (explicit mode).

    The override lives in the server only: `--level auto` sends it back as -1. The
    on-disk config.pbtxt stays the source of truth for the next start. Both calls are
    restricted APIs: they carry the admin key (client.auth).
    """
    client = httpclient.InferenceServerClient(url)
    try:
        config = client.get_model_config(model, headers=key_headers(admin=True,
                                                                    admin_key=admin_key))
        config.setdefault("parameters", {})["forced_level"] = {"string_value": str(level)}
        client.load_model(model, config=json.dumps(config),
                          headers=key_headers(admin=True, admin_key=admin_key))
    except Exception as exc:  # tritonclient raises several types
        raise from_exception(exc) from exc
    finally:
        client.close()


def force_level_poll(repository: Path, level: int, model: str = contracts.EMBED_MODEL) -> None:
    """Edit config.pbtxt in place (poll mode): Triton reloads it on its next scan."""
    set_parameter(repository, model, "forced_level", str(level))


def observed_level(url: str) -> str:
    """What a real high-priority request reports now: SERVED_BY, or the refusal."""
    with EmbedClient(url, retry=NO_RETRY) as client:
        try:
            result = client.embed_with_info([f"level probe {time.time()}"], priority=1)
        except UnavailableError as err:
            return err.message
    return result.served_by[0]


def wait_for_level(url: str, level: int, timeout_s: float = 30.0,
                   consecutive: int = 1) -> str:
    """Poll with real requests until `consecutive` answers in a row report `level`
    (AUTO: level 0). Each embed instance keeps its own ladder, hence `consecutive`."""
    want = 0 if level == AUTO else level
    deadline = time.monotonic() + timeout_s
    seen, streak = "", 0
    while time.monotonic() < deadline:
        try:
            seen = observed_level(url)
        except TritonClientError as err:
            seen = str(err)
        at_level = seen.endswith(f":L{want}") or f"degraded to level {want} " in seen
        streak = streak + 1 if at_level else 0
        if streak >= consecutive:
            return seen
        time.sleep(0.5 if streak == 0 else 0.1)
    raise TimeoutError(f"embed did not reach level {want} in {timeout_s:.0f} s; last: {seen}")


@dataclass(frozen=True)
class Check:
    """One model's deep-health result."""

    model: str
    ok: bool
    ms: float
    detail: str


def probe_request(model: str) -> tuple[list, list[str]]:
    """HTTP InferInputs of the health probe for `model`, and the outputs to ask for."""
    from python_backends.health import probe

    feeds, outputs = probe(model)
    inputs = []
    for name, array in feeds.items():
        tensor = httpclient.InferInput(name, list(array.shape),
                                       "BYTES" if array.dtype == np.object_ else "INT64")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs, outputs


def probe_model(client: httpclient.InferenceServerClient, model: str,
                version: str = "") -> Check:
    """One real inference against `model` (readiness alone is not trusted)."""
    inputs, outputs = probe_request(model)
    began = time.monotonic()
    try:
        result = client.infer(model, inputs, model_version=version, headers=key_headers(),
                              outputs=[httpclient.InferRequestedOutput(o) for o in outputs])
        vector = result.as_numpy(outputs[0])
        detail = f"norm {float(np.linalg.norm(vector[0])):.4f}"
        ok = abs(float(np.linalg.norm(vector[0])) - 1.0) < 1e-3
    except Exception as exc:  # tritonclient raises several types
        ok, detail = False, str(from_exception(exc))
    return Check(model, ok, round((time.monotonic() - began) * 1000, 1), detail)


def deep_health(url: str, models: list[str]) -> list[Check]:
    client = httpclient.InferenceServerClient(url)
    try:
        return [probe_model(client, m) for m in models]
    finally:
        client.close()
