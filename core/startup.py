"""Which models a server loads at start, and which it loads only on demand.

The rule, read from the configs (nothing is named in code): a server loads at start every
model outside the families (a config without a `family` parameter: `health`; not
`stub_env`, a diagnostic whose `load_at_start` is "false"), every family model that is
not an encoder (the fronts), and the encoders a front routes to (its `primary_model` and
`fallback_model`). Any other encoder (a format no front routes to, e.g. TorchScript) is
loaded on demand: by `tmr promote`/`rollback`, a
rollout, or the load API. `tmr serve --load-all` and the GPU compose file load every model.

The routed models are also what the deep health check requires to be loaded: a front, or
an encoder a front routes to, that is not loaded is a failure; any other encoder that is
not loaded is only reported so.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from core.versions import served_config

Parameters = Mapping[str, Mapping[str, str]]  # model -> its config's string parameters
ROUTE_PARAMETERS = ("primary_model", "fallback_model")  # a front's encoders


def repository_parameters(repository: Path, profile: str | None = None
                          ) -> dict[str, dict[str, str]]:
    """Every model of `repository` (a folder with a config.pbtxt) -> its served config's
    parameters (core.versions.served_config: a host profile routes a front elsewhere)."""
    return {path.parent.name: {k: v.string_value
                               for k, v in served_config(path.parent, profile).parameters.items()}
            for path in sorted(repository.glob("*/config.pbtxt"))}


def is_encoder(params: Mapping[str, str]) -> bool:
    return "family" in params and "format" in params


def routed_models(models: Parameters) -> list[str]:
    """The fronts (family models that are not encoders) and every model of `models` a
    front routes to, sorted: what must be loaded for every front to serve."""
    fronts = [name for name, params in models.items()
              if "family" in params and not is_encoder(params)]
    routes = {models[f][key] for f in fronts for key in ROUTE_PARAMETERS if key in models[f]}
    return sorted(set(fronts) | (routes & set(models)))


LOAD_AT_START_PARAMETER = "load_at_start"  # "false": a diagnostic loaded on demand


def startup_rule(models: Parameters) -> list[str]:
    """The models to load at start, sorted: those outside the families (but a diagnostic
    whose `load_at_start` is "false", e.g. stub_env), and the routed."""
    outside = {name for name, params in models.items() if "family" not in params
               and params.get(LOAD_AT_START_PARAMETER, "true") != "false"}
    return sorted(outside | set(routed_models(models)))


def startup_models(repository: Path, profile: str | None = None) -> list[str]:
    """`startup_rule` over the configs of `repository` served under `profile` (by default
    core.versions.served_profile())."""
    return startup_rule(repository_parameters(repository, profile))
