"""The record `tmr tune` writes beside the models, as one frozen type, and when it no longer
fits this host or repository.

`host_profile.json` at the repository's root (git-ignored) says on which host, from which
reviewed configs and served versions, and why each front serves what it serves. It is
written and read here only: `TuneRecord.to_json` / `from_json`; server/tune.py builds
one, server/profile.py reads one to select what `tmr serve` serves.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from core.files import write_atomically
from core.host_profile import Candidate, Host, Layout, ProfileError, Verdict
from core.variant import HOST
from core.versions import read_config, served_version

RECORD_FILE = "host_profile.json"  # at the repository's root, beside the model folders
REPORT_FILE = "host_profile.md"
# Parameters that change while serving (a rollout's state) and do not make a profile stale.
VOLATILE_PARAMETERS = ("rollout", "rollout_last")


@dataclass(frozen=True)
class FrontChoice:
    """What the tuning concluded for one front: the verdict, the candidate that serves,
    the objective, and every candidate as measured with why each was or was not taken."""

    model: str
    verdict: Verdict
    reason: str
    objective_p99_ms: float
    objective_source: str
    candidates: tuple[Candidate, ...]  # the reviewed configs first
    served: str  # the name of the candidate that serves
    ratios: Mapping[str, float] = field(default_factory=dict)
    noise: Mapping[str, float] = field(default_factory=dict)
    refused: Mapping[str, str] = field(default_factory=dict)

    @property
    def chosen(self) -> Candidate:
        return next(c for c in self.candidates if c.name == self.served)

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**data, "verdict": self.verdict.name,
                "candidates": [candidate_json(c) for c in self.candidates],
                "ratios": dict(self.ratios), "noise": dict(self.noise),
                "refused": dict(self.refused)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FrontChoice:
        return cls(**{**data, "verdict": Verdict[data["verdict"]],
                      "candidates": tuple(candidate_of(c) for c in data["candidates"])})


def candidate_json(cand: Candidate) -> dict[str, Any]:
    return {**asdict(cand), "goodput": cand.goodput}


def candidate_of(data: Mapping[str, Any]) -> Candidate:
    known = {f.name for f in fields(Candidate)}
    values = {k: v for k, v in data.items() if k in known}
    return Candidate(**{**values, "layout": Layout(**data["layout"]),
                        "goodputs": tuple(data["goodputs"])})


@dataclass(frozen=True)
class TuneRecord:
    """One tuning: where and when it ran, what it measured and what it chose."""

    written_at: str
    mode: str
    took_s: float
    host: Host
    affinity: int
    cgroup_quota: float | None
    memory_budget_mb: float
    models: tuple[str, ...]  # the models measured (the text models' folders)
    repository_models: tuple[str, ...]  # every model of the repository then
    reviewed_digest: str
    versions: Mapping[str, int | None]
    fronts: Mapping[str, FrontChoice]
    gates: Mapping[str, Any] = field(default_factory=dict)
    memory_mib: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    points: tuple[Mapping[str, Any], ...] = ()

    @property
    def profiled(self) -> list[str]:
        """The fronts whose host.pbtxt was written: a candidate beat the reviewed configs."""
        return sorted(f for f, c in self.fronts.items() if not c.chosen.reviewed)

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**data, "host": {**asdict(self.host), "flags": list(self.host.flags)},
                "models": list(self.models), "repository_models": list(self.repository_models),
                "fronts": {f: c.to_json() for f, c in self.fronts.items()},
                "points": list(self.points), "profiled": self.profiled}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TuneRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{**{k: v for k, v in data.items() if k in known},
                      "host": Host(**{**data["host"], "flags": tuple(data["host"]["flags"])}),
                      "models": tuple(data["models"]),
                      "repository_models": tuple(data["repository_models"]),
                      "fronts": {f: FrontChoice.from_json(c) for f, c in data["fronts"].items()},
                      "points": tuple(data.get("points", ()))})


def read_record(repository: Path) -> TuneRecord | None:
    """The written profile's record, or None when `tmr tune` has not run here; a record
    that cannot be read (or was written by an older `tmr tune`) is a ProfileError."""
    path = repository / RECORD_FILE
    try:
        return TuneRecord.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ProfileError(f"{path} is unreadable ({type(err).__name__}: {err}): run "
                           "`tmr tune` again") from err


def write_record(repository: Path, record: TuneRecord) -> None:
    write_atomically(repository / RECORD_FILE,
                     json.dumps(record.to_json(), indent=1, default=float) + "\n")


def profile_files(repository: Path) -> list[Path]:
    """Every configs/host.pbtxt of the repository."""
    return sorted(repository.glob(f"*/configs/{HOST.name}.pbtxt"))


# -- staleness ------------------------------------------------------------------------------
def reviewed_digest(repository: Path, models: Sequence[str]) -> str:
    """sha256 over the models' reviewed configs, without what changes while serving (the
    version policy, a rollout's state): a changed reviewed config makes a profile stale."""
    digest = hashlib.sha256()
    for name in sorted(models):
        config = read_config(repository / name)
        config.ClearField("version_policy")
        for key in VOLATILE_PARAMETERS:
            if key in config.parameters:
                del config.parameters[key]
        digest.update(name.encode() + b"\0" + config.SerializeToString(deterministic=True))
    return digest.hexdigest()


def model_folders(repository: Path) -> list[str]:
    """Every model of the repository (a folder with a config.pbtxt), sorted."""
    return sorted(p.parent.name for p in repository.glob("*/config.pbtxt"))


def served_versions(repository: Path, models: Sequence[str]) -> dict[str, int | None]:
    """The version each model serves (its policy, a rollout's candidate excluded)."""
    return {name: served_version(repository / name) for name in sorted(models)}


def stale_reasons(record: TuneRecord, host: Host, repository: Path) -> list[str]:
    """Why a written profile no longer fits this host or this repository; [] when it does."""
    return unfit_reasons(record, host, repository) + changed_since(record, repository)


def unfit_reasons(record: TuneRecord, host: Host, repository: Path) -> list[str]:
    """Why the profile cannot serve at all: this host's CPU or cores are not those it was
    tuned on, a model it tuned is gone, or the reviewed configs it was derived from
    changed (its configs would undo the edit)."""
    was, reasons = record.host, []
    if was.model != host.model or was.flags != host.flags:
        reasons.append(f"tuned on {was.model!r} {list(was.flags)}, this host is "
                       f"{host.model!r} {list(host.flags)}")
    if was.cores != host.cores:
        reasons.append(f"tuned for {was.cores} usable cores, this host has {host.cores}")
    missing = [m for m in record.models if not (repository / m / "config.pbtxt").exists()]
    if missing:
        return [*reasons, f"models gone from the repository: {', '.join(missing)}"]
    if record.reviewed_digest != reviewed_digest(repository, record.models):
        reasons.append("the reviewed configs changed since it was tuned")
    return reasons


def changed_since(record: TuneRecord, repository: Path) -> list[str]:
    """What an operation changed since the tuning without undoing it: models added (they
    serve their reviewed configs) and served versions (a rollout, promote, rollback or
    export). The profile keeps serving and says so (server/profile.py); `tmr tune`
    measures them."""
    reasons = []
    added = sorted(set(model_folders(repository)) - set(record.repository_models))
    if added:
        reasons.append(f"models added since: {', '.join(added)}")
    present = [m for m in record.models if (repository / m / "config.pbtxt").exists()]
    now = served_versions(repository, present)
    changed = [f"{m} v{was_v}->v{now[m]}" for m, was_v in record.versions.items()
               if m in now and now[m] != was_v]
    if changed:
        reasons.append(f"served versions changed: {', '.join(changed)}")
    return reasons


def changes_here(repository: Path) -> list[str]:
    """What operations changed since the repository's written profile was tuned ([] without
    one, or with one that cannot be read: `tmr tune --show` says why)."""
    try:
        record = read_record(repository)
    except ProfileError:
        return []
    return changed_since(record, repository) if record is not None else []


def only_added(record: TuneRecord | None, host: Host, repository: Path) -> bool:
    """Whether `record` still fits but for models added since: `tmr add` then measures the
    added model alone and keeps what the record chose for the others (`merged`)."""
    if record is None:
        return False
    reasons = stale_reasons(record, host, repository)
    return all(r.startswith("models added since") for r in reasons)


def merged(old: TuneRecord, new: TuneRecord, repository: Path) -> TuneRecord:
    """`old` with what `new` measured (an added model's fronts, gates and servers), and the
    repository as it is now: the record fits again without timing the others anew."""
    names = tuple(sorted({*old.models, *new.models}))
    return replace(new, models=names, repository_models=tuple(model_folders(repository)),
                   reviewed_digest=reviewed_digest(repository, names),
                   versions=served_versions(repository, names),
                   fronts={**old.fronts, **new.fronts}, gates={**old.gates, **new.gates},
                   points=(*old.points, *new.points))
