"""The one operator client: model control, the repository index, configs, readiness and
probes, over Triton's HTTP API with the admin key (tmr_client.auth).

`tmr degrade`, `tmr health`, `tmr promote`/`rollback`, the watchdog and the loading of new
models all talk to Triton through `AdminClient`; none of them builds an
`InferenceServerClient` or catches tritonclient's exceptions. Every call goes through
`AdminClient._call`, the one place where those exceptions become the project's typed
errors (tmr_client.errors.from_exception): callers branch on `TritonClientError` subclasses.

Configs travel as Triton's protobuf (`model_config_pb2.ModelConfig`), the type the
repository's own config code uses; "reload" means re-sending a model's config through the
load API, since a plain load of an unchanged model is a no-op on 2.51.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

import numpy as np
import tritonclient.http as httpclient
from google.protobuf import json_format
from tmr_client.auth import key_headers
from tmr_client.errors import TritonClientError, from_exception
from tritonclient.utils import np_to_triton_dtype

from core.model_config import mc
from core.probes import ProbeTarget, lane_front, probe_target
from server import settings

T = TypeVar("T")


class ModelState(StrEnum):
    """A model version's state in Triton's repository index ("" : listed, never loaded)."""

    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"
    NEVER_LOADED = ""


UNLOADED = "unloaded"  # the index's reason for a version unloaded or not (yet) loaded


@dataclass(frozen=True)
class IndexEntry:
    """One row of the repository index: a model (and version, when loaded) and its state."""

    name: str
    version: int | None
    state: ModelState
    reason: str  # UNLOADED for a version unloaded or not (yet) loaded

    @property
    def unloaded(self) -> bool:
        return self.state == ModelState.UNAVAILABLE and self.reason == UNLOADED


@dataclass(frozen=True)
class Check:
    """One model's probe result."""

    model: str
    ok: bool
    ms: float
    detail: str
    error: TritonClientError | None = None  # the typed failure, when the request failed


def config_from_json(config: Mapping[str, Any]) -> mc.ModelConfig:
    """Triton's JSON form of a config (what the HTTP API answers) as the protobuf."""
    return json_format.ParseDict(config, mc.ModelConfig(), ignore_unknown_fields=True)


def config_to_json(config: mc.ModelConfig) -> str:
    """The config as the load API takes it."""
    return json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True))


def infer_inputs(arrays: Mapping[str, np.ndarray]) -> list[httpclient.InferInput]:
    """HTTP inputs for named numpy arrays."""
    inputs = []
    for name, array in arrays.items():
        tensor = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


class AdminClient:
    """Operator calls against one server; use as a context manager, or close()."""

    def __init__(self, url: str, admin_key: str | None = None) -> None:
        self.url = url
        self.admin_key = admin_key
        self._client = httpclient.InferenceServerClient(url)

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def _call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one tritonclient call; its failure is raised as a TritonClientError."""
        try:
            return method(*args, **kwargs)
        except Exception as exc:  # tritonclient and its transport raise many types: map once
            raise from_exception(exc) from exc

    def _admin(self) -> dict[str, str]:
        key = settings.admin_key() if self.admin_key is None else self.admin_key
        return key_headers(admin=True, admin_key=key)

    # -- the repository and model control ---------------------------------------------
    def index(self) -> list[IndexEntry]:
        """The repository index (a restricted API)."""
        entries = self._call(self._client.get_model_repository_index, headers=self._admin())
        return [IndexEntry(e["name"], int(e["version"]) if e.get("version") else None,
                           ModelState(e.get("state", "")), e.get("reason", ""))
                for e in entries]

    def ready_models(self) -> list[str]:
        """Sorted names of the models with a READY version."""
        return sorted({e.name for e in self.index() if e.state == ModelState.READY})

    def idle_models(self) -> list[str]:
        """Sorted names of the repository's models with no READY version (not loaded: on
        demand, core/startup.py)."""
        index = self.index()
        ready = {e.name for e in index if e.state == ModelState.READY}
        return sorted({e.name for e in index} - ready)

    def config(self, model: str) -> mc.ModelConfig:
        """The config the server runs `model` with."""
        return config_from_json(self._call(self._client.get_model_config, model,
                                           headers=self._admin()))

    def load(self, model: str, config: mc.ModelConfig | None = None) -> None:
        """Load `model` (explicit mode), from `config` when given instead of the disk."""
        extra = {} if config is None else {"config": config_to_json(config)}
        self._call(self._client.load_model, model, headers=self._admin(), **extra)

    def unload(self, model: str) -> None:
        self._call(self._client.unload_model, model, headers=self._admin())

    def reload(self, model: str, parameters: Mapping[str, str] | None = None) -> None:
        """New instances (and stubs) of `model`: its running config sent back through the
        load API, with `parameters` overridden (the override lives in the server only)."""
        config = self.config(model)
        for key, value in (parameters or {}).items():
            config.parameters[key].string_value = value
        self.load(model, config)

    def is_ready(self, model: str, version: str = "") -> bool:
        return self._call(self._client.is_model_ready, model, version, headers=key_headers())

    # -- requests -----------------------------------------------------------------------
    def infer(self, model: str, inputs: Mapping[str, np.ndarray], outputs: list[str],
              version: str = "", priority: int = 0) -> dict[str, np.ndarray]:
        """One inference with the client's API key (if any); the outputs named."""
        result = self._call(self._client.infer, model, infer_inputs(inputs),
                            model_version=version, priority=priority, headers=key_headers(),
                            outputs=[httpclient.InferRequestedOutput(o) for o in outputs])
        return {name: result.as_numpy(name) for name in outputs}

    def probe_targets(self, models: list[str] | None = None) -> list[ProbeTarget]:
        """The probe of every ready family model on the server (or of those named), fronts
        first; models outside every family are left out."""
        names = self.ready_models() if models is None else models
        configs = {m: self.config(m) for m in names}
        fronts = {m: lane_front(c) for m, c in configs.items()}
        found = [probe_target(c, fronts[m] and self.config(fronts[m]))  # type: ignore[arg-type]
                 for m, c in configs.items()]
        return sorted((t for t in found if t is not None),
                      key=lambda t: (not t.is_front, t.model))

    def probe(self, target: ProbeTarget, version: str = "", priority: int = 0) -> Check:
        """One real inference (readiness alone is not trusted), checked as the family says;
        at `priority` (0: the model's default level)."""
        began = time.monotonic()
        try:
            answer = self.infer(target.model, target.inputs, target.outputs, version,
                                priority)
        except TritonClientError as err:
            return Check(target.model, False, elapsed_ms(began), str(err), err)
        problem = target.problem(answer[target.outputs[0]])
        return Check(target.model, problem is None, elapsed_ms(began), problem or "sane answer")

    def probe_model(self, model: str, version: str = "") -> Check:
        """Probe one model by name (its config read from the server first)."""
        try:
            targets = self.probe_targets([model])
        except TritonClientError as err:  # unknown model, admin key refused...
            return Check(model, False, 0.0, str(err), err)
        if not targets:
            return Check(model, False, 0.0, f"{model} belongs to no model family: nothing to probe")
        return self.probe(targets[0], version)


def elapsed_ms(began: float) -> float:
    return round((time.monotonic() - began) * 1000, 1)
