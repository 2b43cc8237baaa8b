"""Which config files a server serves: Triton's `--model-config-name`, as one typed value.

Triton serves `configs/<name>.pbtxt` where a model has one and `config.pbtxt` elsewhere,
one name per server. Here that name is a `Variant`: the reviewed configs in git (no name),
the host profile `tmr tune` writes (`host`), the GPU profile (`gpu`). It is decided once
where a process starts (`tmr serve` by core.host_profile's rules, server/profile.py; a
Python stub from `VARIANT_ENV`, which the launcher sets beside the flag), then passed down
to every function that reads a served config: none of them reads the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

VARIANT_ENV = "TMR_CONFIG_NAME"  # the launcher's word to the stubs; "" is the reviewed


@dataclass(frozen=True)
class Variant:
    """The served config variant: `name` as `--model-config-name` takes it, "" for the
    reviewed `config.pbtxt` everywhere."""

    name: str = ""

    @property
    def reviewed(self) -> bool:
        return not self.name

    def config_path(self, model_dir: Path) -> Path:
        """configs/<name>.pbtxt where the model has one, else config.pbtxt (Triton's rule)."""
        variant = model_dir / "configs" / f"{self.name}.pbtxt"
        return variant if self.name and variant.is_file() else model_dir / "config.pbtxt"

    def flag(self) -> list[str]:
        """tritonserver's flag for it (none for the reviewed configs)."""
        return [f"--model-config-name={self.name}"] if self.name else []

    def describe(self) -> str:
        return "the reviewed configs" if self.reviewed else f"the {self.name} profile"

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> Variant | None:
        """The variant named by VARIANT_ENV, or None when it is not set. Read once, where
        a process starts (a stub; a command the test suite pins to the reviewed configs)."""
        env = os.environ if env is None else env
        return cls(env[VARIANT_ENV]) if VARIANT_ENV in env else None


REVIEWED = Variant("")
HOST = Variant("host")  # what `tmr tune` writes (core/host_profile.py)
GPU = Variant("gpu")  # docker-compose.yml and server/k8s serve it
