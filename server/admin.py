"""Operator commands against a running server: force a degradation level, deep health.

Models are found on the server itself (its repository index and configs, admin APIs),
so these work from anywhere the admin key reaches: `tmr` on the host, the watchdog in
its own container. Each model is probed the way its family says (one real inference).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient

from client import TritonClientError, UnavailableError
from client.auth import key_headers
from client.core import DEFAULT_MODEL, SERVED_BY_OUTPUT
from client.errors import from_exception
from core.families import Family, family
from core.repository import set_parameter

AUTO = -1
DEFAULT_FRONT = DEFAULT_MODEL
TRITON_DTYPES = {np.dtype(np.int64): "INT64", np.dtype(np.int32): "INT32",
                 np.dtype(np.float32): "FP32", np.dtype(np.object_): "BYTES",
                 np.dtype(np.uint8): "UINT8"}


def admin_client(url: str) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(url)


def force_level_explicit(url: str, level: int, model: str = DEFAULT_FRONT,
                         admin_key: str | None = None) -> None:
    """Reload `model` through the load API with `forced_level` overridden (explicit mode).

    The override lives in the server only: `--level auto` sends it back as -1. The
    on-disk config.pbtxt stays the source of truth for the next start. Both calls are
    restricted APIs: they carry the admin key (client.auth).
    """
    client = admin_client(url)
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


def force_level_poll(repository: Path, level: int, model: str = DEFAULT_FRONT) -> None:
    """Edit config.pbtxt in place (poll mode): Triton reloads it on its next scan."""
    set_parameter(repository, model, "forced_level", str(level))


def observed_level(url: str, model: str = DEFAULT_FRONT) -> str:
    """What a real high-priority request reports now: SERVED_BY, or the refusal. The
    request is the model's family probe (any family's front answers SERVED_BY)."""
    client = admin_client(url)
    try:
        (target,) = probe_targets(client, [model])
        result = client.infer(model, infer_inputs(target), priority=1, headers=key_headers(),
                              outputs=[httpclient.InferRequestedOutput(SERVED_BY_OUTPUT)])
    except Exception as exc:  # tritonclient raises several types
        err = from_exception(exc)
        if isinstance(err, UnavailableError):
            return err.message
        raise err from exc
    finally:
        client.close()
    return result.as_numpy(SERVED_BY_OUTPUT).reshape(-1)[0].decode()


def wait_for_level(url: str, level: int, timeout_s: float = 30.0, consecutive: int = 1,
                   model: str = DEFAULT_FRONT) -> str:
    """Poll with real requests until `consecutive` answers in a row report `level`
    (AUTO: level 0). Each front instance keeps its own ladder, hence `consecutive`."""
    want = 0 if level == AUTO else level
    deadline = time.monotonic() + timeout_s
    seen, streak = "", 0
    while time.monotonic() < deadline:
        try:
            seen = observed_level(url, model)
        except TritonClientError as err:
            seen = str(err)
        at_level = seen.endswith(f":L{want}") or f"degraded to level {want} " in seen
        streak = streak + 1 if at_level else 0
        if streak >= consecutive:
            return seen
        time.sleep(0.5 if streak == 0 else 0.1)
    raise TimeoutError(f"{model} did not reach level {want} in {timeout_s:.0f} s; last: {seen}")


@dataclass(frozen=True)
class ProbeTarget:
    """A family model on the server and the one real request that shows it serves."""

    model: str
    family: Family
    params: dict[str, str]
    inputs: dict[str, np.ndarray]
    outputs: list[str]


@dataclass(frozen=True)
class Check:
    """One model's deep-health result."""

    model: str
    ok: bool
    ms: float
    detail: str


def probe_target(config: dict[str, Any]) -> ProbeTarget | None:
    """The probe of a model from its config (Triton's JSON form); None outside families."""
    params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
    if "family" not in params:
        return None
    fam = family(params["family"])
    params["output"] = config["output"][0]["name"]
    params["input_dims"] = ",".join(str(d) for d in config["input"][0]["dims"])
    probe = fam.front_probe if "primary_model" in params else fam.encoder_probe
    inputs, outputs = probe(params)
    return ProbeTarget(config["name"], fam, params, inputs, outputs)


def probe_targets(client: httpclient.InferenceServerClient,
                  models: list[str] | None = None) -> list[ProbeTarget]:
    """Every ready family model on the server (or those named), fronts first."""
    if models is None:
        index = client.get_model_repository_index(headers=key_headers(admin=True))
        models = sorted({m["name"] for m in index if m.get("state") == "READY"})
    targets = [probe_target(client.get_model_config(m, headers=key_headers(admin=True)))
               for m in models]
    found = [t for t in targets if t is not None]
    return sorted(found, key=lambda t: ("primary_model" not in t.params, t.model))


def infer_inputs(target: ProbeTarget) -> list[httpclient.InferInput]:
    inputs = []
    for name, array in target.inputs.items():
        tensor = httpclient.InferInput(name, list(array.shape), TRITON_DTYPES[array.dtype])
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def probe(client: httpclient.InferenceServerClient, target: ProbeTarget,
          version: str = "") -> Check:
    """One real inference (readiness alone is not trusted), checked as the family says."""
    began = time.monotonic()
    try:
        result = client.infer(target.model, infer_inputs(target), model_version=version,
                              headers=key_headers(),
                              outputs=[httpclient.InferRequestedOutput(o) for o in target.outputs])
        problem = target.family.check_probe(result.as_numpy(target.outputs[0]), target.params)
        ok, detail = problem is None, problem or "sane answer"
    except Exception as exc:  # tritonclient raises several types
        ok, detail = False, str(from_exception(exc))
    return Check(target.model, ok, round((time.monotonic() - began) * 1000, 1), detail)


def probe_model(client: httpclient.InferenceServerClient, model: str, version: str = "") -> Check:
    """Probe one model by name (its config read from the server first)."""
    try:
        targets = probe_targets(client, [model])
    except Exception as exc:  # unknown model, admin key refused...
        return Check(model, False, 0.0, str(from_exception(exc)))
    if not targets:
        return Check(model, False, 0.0, f"{model} belongs to no model family: nothing to probe")
    return probe(client, targets[0], version)


def deep_health(url: str, models: list[str] | None = None) -> list[Check]:
    """A real inference through every family model on the server (or those named)."""
    client = admin_client(url)
    try:
        if models is not None:
            return [probe_model(client, m) for m in models]
        return [probe(client, t) for t in probe_targets(client)]
    finally:
        client.close()


def load_models(url: str, models: list[str]) -> list[str]:
    """Load models through the load API (explicit mode), in order; the names loaded."""
    client = admin_client(url)
    try:
        for model in models:
            client.load_model(model, headers=key_headers(admin=True))
    except Exception as exc:  # tritonclient raises several types
        raise from_exception(exc) from exc
    finally:
        client.close()
    return list(models)
