"""A family model's probe: the one real request that shows it serves, built from its config.

Both health checks build it here: the `health` model inside Triton (python_backends.health,
from the configs on disk) and the operator client (server.admin_client, from the configs
the server reports). A front is probed through its family's front probe, an encoder
through its encoder probe; a model outside every family has no probe.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from core.families import Family, family
from core.families.lanes import LANE_PARAMETER
from core.model_config import mc


@dataclass(frozen=True)
class ProbeTarget:
    """A family model and the one real request that shows it serves."""

    model: str
    family: Family
    params: dict[str, str]
    inputs: dict[str, np.ndarray]
    outputs: list[str]
    priority_levels: int = 0  # the model's dynamic_batching priority levels (0: none)

    @property
    def priorities(self) -> list[int]:
        """The priorities a probe is sent at: each level, highest first; [0] (the model's
        default) for a model without levels."""
        return list(range(1, self.priority_levels + 1)) or [0]

    @property
    def is_front(self) -> bool:
        return "primary_model" in self.params

    def problem(self, answer: np.ndarray) -> str | None:
        """None when the answer's first output is sane, as the family judges it."""
        return self.family.probes.check_probe(answer, self.params)


def probe_params(config: mc.ModelConfig) -> dict[str, str]:
    """The config's parameters plus its first output's name and first input's dims."""
    params = {key: value.string_value for key, value in config.parameters.items()}
    params["output"] = config.output[0].name
    params["input_dims"] = ",".join(str(d) for d in config.input[0].dims)
    return params


def lane_front(config: mc.ModelConfig) -> str | None:
    """The front an ensemble lane runs in (core/families/lanes.py), else None."""
    if config.platform != "ensemble" or LANE_PARAMETER not in config.parameters:
        return None
    return config.parameters[LANE_PARAMETER].string_value


def probe_target(config: mc.ModelConfig, front: mc.ModelConfig | None = None
                 ) -> ProbeTarget | None:
    """The probe of a model from its config; None for a model outside every family. An
    ensemble lane (`lane_front`) is probed as its front, whose config `front` is, under
    its own name: the same inputs reach the front's interactive worker."""
    if front is not None and lane_front(config) is not None:
        target = probe_target(front)
        # probed at priority 1, the class it carries (the front takes any level as one)
        return None if target is None else replace(target, model=config.name,
                                                    priority_levels=1)
    if "family" not in config.parameters:
        return None
    params = probe_params(config)
    fam = family(params["family"])
    probe = fam.probes.front_probe if "primary_model" in params else fam.probes.encoder_probe
    inputs, outputs = probe(params)
    return ProbeTarget(config.name, fam, params, inputs, outputs,
                       config.dynamic_batching.priority_levels)
