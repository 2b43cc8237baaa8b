"""`tmr promote` / `tmr rollback`: edit version_policy on disk, apply it, wait until it serves.

The repository edit is the source of truth. In explicit mode the change is applied with
the load API and the on-disk config (a plain load of an unchanged model is a no-op on
2.51); in poll mode Triton picks the edit up on its next scan. Either way the command
waits until the repository index shows the target READY and a request pinned to it is
answered. A target that fails to load never takes traffic: the previous config is put
back and re-applied, and the command fails with Triton's reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tmr_client import TritonClientError

from core import config_edit, versions
from core.rollout import state_of
from core.timeouts import RELEASE_WAIT
from core.variant import Variant
from server.admin_client import UNLOADED, AdminClient, ModelState
from server.errors import ReleaseError


@dataclass(frozen=True)
class Target:
    """Where a release applies: a model folder, a server, and its control mode."""

    model_dir: Path
    url: str
    variant: Variant  # the configs the server serves (core/variant.py)
    mode: str = "explicit"  # or "poll"
    timeout_s: float = RELEASE_WAIT.seconds

    @property
    def model(self) -> str:
        return self.model_dir.name


def check_candidate(model_dir: Path, version: int) -> None:
    """Refuse a missing or corrupt version before anything changes."""
    version_dir = model_dir / str(version)
    if version not in versions.versions_on_disk(model_dir):
        raise versions.VersionError(f"{model_dir.name} has no version {version} on disk "
                                    f"(have {versions.versions_on_disk(model_dir)})")
    provenance = versions.read_provenance(version_dir)
    if not provenance:
        raise versions.VersionError(f"{version_dir} has no provenance.json")
    if not versions.artifact_intact(version_dir, provenance):
        raise versions.VersionError(f"{version_dir}: artifact missing or its sha256 differs from "
                                    "provenance.json (corrupt)")


def states_of(admin: AdminClient, model: str) -> dict[int, tuple[ModelState, str]]:
    """version -> (state, reason) from the repository index."""
    return {e.version: (e.state, e.reason) for e in admin.index()
            if e.name == model and e.version is not None}


def index_states(url: str, model: str) -> dict[int, tuple[ModelState, str]]:
    """states_of the server at `url`."""
    with AdminClient(url) as admin:
        return states_of(admin, model)


def serves(url: str, model: str, version: int) -> bool:
    """A request pinned to `version` is answered, and sanely (its family's probe check)."""
    with AdminClient(url) as admin:
        return admin.probe_model(model, str(version)).ok


def apply_explicit(target: Target) -> None:
    """Hand the served on-disk config to Triton through the load API (it loads the
    version): the host profile's where it has one, so a release keeps the host's fitting."""
    config = versions.served_config(target.model_dir, target.variant)
    try:
        with AdminClient(target.url) as admin:
            admin.load(target.model, config)
    except TritonClientError as err:
        raise ReleaseError(f"Triton refused to load {target.model}: {err}") from err


@dataclass(frozen=True)
class SwitchTiming:
    """How long a switch took, from the first config write to the first answer of the
    target version; `apply_s` is the part until the change was handed to Triton (explicit
    mode: the load API call, which loads the version; poll mode: the config writes)."""

    total_s: float
    apply_s: float
    mode: str

    def describe(self) -> str:
        step = "load API" if self.mode == "explicit" else "config written"
        return (f"switched in {self.total_s:.2f} s ({step} {self.apply_s:.2f} s, then the "
                f"first answer {self.total_s - self.apply_s:.2f} s later)")


def wait_serving(target: Target, version: int) -> float:
    """Seconds until the index shows `version` READY (and no other) and a request pinned
    to it is answered, and sanely (its family's probe check)."""
    began = time.monotonic()
    with AdminClient(target.url) as admin:
        while time.monotonic() - began < target.timeout_s:
            states = states_of(admin, target.model)
            state, reason = states.get(version, ("", ""))
            # "unloaded" is the state of a version not (yet) loaded, e.g. before a poll scan.
            if state == ModelState.UNAVAILABLE and reason and reason != UNLOADED:
                raise ReleaseError(f"{target.model} version {version} failed to load: {reason}")
            others = [n for n, (s, _) in states.items() if s == ModelState.READY and n != version]
            if (state == ModelState.READY and not others
                    and admin.probe_model(target.model, str(version)).ok):
                return time.monotonic() - began
            time.sleep(0.25)
        raise ReleaseError(f"{target.model} version {version} not serving after "
                           f"{target.timeout_s:.0f} s; index: {states_of(admin, target.model)}")


def switch(target: Target, version: int, action: str) -> SwitchTiming:
    """Edit, apply, wait; on failure restore the old config and re-apply it."""
    running = state_of(versions.read_config(target.model_dir))
    if running is not None:
        raise versions.VersionError(f"a rollout of {target.model} v{running.version} is running: "
                                    f"`tmr rollout abort {target.model}` first, or let it finish")
    began = time.monotonic()
    current = versions.selected_on_disk(target.model_dir)
    history = target.model_dir / versions.HISTORY
    # The history and the configs change together: in poll mode every write in the model
    # folder is a reload, so one burst of writes gives one reload, not two racing ones.
    previous = {history: history.read_text()} if history.exists() else {}
    if not versions.read_history(target.model_dir) and current:
        versions.append_history(target.model_dir, current[-1], "initial")
    versions.append_history(target.model_dir, version, action)
    previous.update(config_edit.set_version(target.model_dir, version))
    try:
        if target.mode == "explicit":
            apply_explicit(target)
        applied = time.monotonic()
        wait_serving(target, version)
        return SwitchTiming(time.monotonic() - began, applied - began, target.mode)
    except ReleaseError:
        versions.restore(previous)
        if not previous.get(history):
            history.unlink(missing_ok=True)
        if target.mode == "explicit":
            apply_explicit(target)
        if current:
            wait_serving(target, current[-1])
        raise


def current_version(model_dir: Path) -> int:
    served = versions.served_version(model_dir)
    if served is None:
        raise versions.VersionError(f"{model_dir.name}: its version_policy selects nothing on disk")
    return served


def rollback_target(model_dir: Path, to: int | None) -> int:
    return to if to is not None else versions.previous_version(versions.read_history(model_dir),
                                                               current_version(model_dir))
