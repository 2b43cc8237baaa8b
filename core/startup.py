"""Which models a server loads at start, and which it loads only on demand.

The rule, read from the configs (nothing is named in code): a server loads at start every
model outside the families (a config without a `family` parameter: `health`; not
`stub_env`, a diagnostic whose `load_at_start` is "false"), every family model that is
not an encoder (the fronts and their lanes), and the encoders a front calls over BLS: its
`primary_model`, unless the front runs it in its own process (`primary_in_process`). A
front's fallback (`fallback_model`) runs in the front's process, loaded when the ladder
first needs it (python_backends/in_process.py), so its Triton model is not loaded at
start either. Every other encoder (a format no front routes to, e.g. TorchScript) is
loaded on demand: by `tmr promote`/`rollback`, a rollout, or the load API.
`tmr serve --load-all` and the GPU compose file load every model.

`select` narrows the rule to some fronts (`tmr serve --models embed` or a family's name):
those fronts, their lanes, what they call over BLS and the models outside the families.

The models a loaded front calls over BLS are also what the deep health check requires to
be loaded (python_backends/health.py): any other encoder that is not loaded is only
reported so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from core.errors import CoreError
from core.settings import IN_PROCESS_PARAMETER
from core.variant import Variant
from core.versions import served_config

Parameters = Mapping[str, Mapping[str, str]]  # model -> its config's string parameters
PRIMARY, FALLBACK = "primary_model", "fallback_model"  # a front's encoders
LANE_PARAMETER = "lane_of"  # a lane's config names its front (core/families/lanes.py)
LOAD_AT_START_PARAMETER = "load_at_start"  # "false": a diagnostic loaded on demand


class SelectionError(CoreError, ValueError):
    """`--models` names something that is neither a front, a lane nor a family."""

    exit_code = 2


def repository_parameters(repository: Path, variant: Variant
                          ) -> dict[str, dict[str, str]]:
    """Every model of `repository` (a folder with a config.pbtxt) -> its config's parameters
    under `variant` (core.versions.served_config: a host profile routes a front elsewhere)."""
    return {path.parent.name: {k: v.string_value
                               for k, v in served_config(path.parent, variant).parameters.items()}
            for path in sorted(repository.glob("*/config.pbtxt"))}


def is_encoder(params: Mapping[str, str]) -> bool:
    return "family" in params and "format" in params


def is_front(params: Mapping[str, str]) -> bool:
    """A family model that is not an encoder: a front or a front's lane."""
    return "family" in params and not is_encoder(params)


def bls_encoders(params: Mapping[str, str]) -> set[str]:
    """The encoders a front calls over BLS: its primary, unless it runs it in process."""
    if params.get(IN_PROCESS_PARAMETER, "false") == "true" or PRIMARY not in params:
        return set()
    return {params[PRIMARY]}


def routed_models(models: Parameters) -> list[str]:
    """The fronts (family models that are not encoders) and every model of `models` a
    front calls over BLS, sorted: what must be loaded for every front to serve."""
    fronts = [name for name, params in models.items() if is_front(params)]
    routes = {encoder for f in fronts for encoder in bls_encoders(models[f])}
    return sorted(set(fronts) | (routes & set(models)))


def startup_rule(models: Parameters) -> list[str]:
    """The models to load at start, sorted: those outside the families (but a diagnostic
    whose `load_at_start` is "false", e.g. stub_env), and the routed."""
    outside = {name for name, params in models.items() if "family" not in params
               and params.get(LOAD_AT_START_PARAMETER, "true") != "false"}
    return sorted(outside | set(routed_models(models)))


def select(models: Parameters, wanted: Iterable[str]) -> dict[str, Mapping[str, str]]:
    """The part of `models` that serves the fronts `wanted` names (a front, a lane or a
    family): those fronts and their lanes, every encoder, and the models outside the
    families. SelectionError names what it does not know."""
    wanted = list(wanted)
    fronts = {name for name, params in models.items() if is_front(params)}
    families = {params["family"] for params in models.values() if "family" in params}
    unknown = [w for w in wanted if w not in fronts and w not in families]
    if unknown:
        raise SelectionError(
            f"--models: {', '.join(map(repr, unknown))} is neither a front nor a family of "
            f"this repository; fronts: {', '.join(sorted(fronts))}; families: "
            f"{', '.join(sorted(families))}")
    chosen = {name for name in fronts
              if name in wanted or models[name]["family"] in wanted}
    chosen |= {models[name][LANE_PARAMETER] for name in chosen
               if LANE_PARAMETER in models[name]}  # a lane named: its front too
    chosen |= {name for name in fronts if models[name].get(LANE_PARAMETER) in chosen}
    return {name: params for name, params in models.items()
            if name in chosen or not is_front(params)}


def required_models(models: Parameters, loaded: Iterable[str]) -> set[str]:
    """What the loaded fronts need loaded: each one's front or lane, and the encoders they
    call over BLS (a front the server was not asked to serve is not needed)."""
    fronts = [name for name in loaded if name in models and is_front(models[name])]
    return set(routed_models(select(models, fronts))) if fronts else set()


def startup_models(repository: Path, variant: Variant,
                   wanted: Iterable[str] = ()) -> list[str]:
    """`startup_rule` over the configs of `repository` served under `variant`, narrowed to
    the fronts `wanted` names when it names any."""
    models = repository_parameters(repository, variant)
    wanted = list(wanted)
    return startup_rule(select(models, wanted) if wanted else models)
