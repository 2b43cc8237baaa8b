"""requirements.lock: agrees with pyproject.toml, is closed under dependencies, and is
exactly what the venv holds (make setup installs it with --no-deps)."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"


def locked() -> dict[str, Version]:
    """The lock as canonical name -> version; fails on anything but `name==version`."""
    pins: dict[str, Version] = {}
    for line in LOCK.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and re.fullmatch(r"[A-Za-z0-9._-]+", name), f"not an exact pin: {line!r}"
        key = canonicalize_name(name)
        assert key not in pins, f"{name} locked twice"
        pins[key] = Version(version.strip())
    return pins


def declared() -> list[Requirement]:
    """pyproject.toml's dependencies and its dev extra, as make setup installs them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in
            project["dependencies"] + project["optional-dependencies"]["dev"]]


def no_deps_packages() -> dict[str, Version]:
    """The Makefile's NO_DEPS_PACKAGES: locked, but their own requirements never installed."""
    line = re.search(r"^NO_DEPS_PACKAGES := (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert line, "Makefile has no NO_DEPS_PACKAGES"
    pins = [p.split("==") for p in line.group(1).split()]
    return {canonicalize_name(name): Version(version) for name, version in pins}


def test_every_pyproject_requirement_is_locked_at_a_version_it_allows() -> None:
    pins = locked()
    for req in declared():
        key = canonicalize_name(req.name)
        assert key in pins, f"{req} is in pyproject.toml but not in the lock: run make lock"
        assert req.specifier.contains(pins[key], prereleases=True), (
            f"lock has {req.name}=={pins[key]}, pyproject.toml asks {req}: run make lock")


def test_the_makefiles_no_deps_packages_are_locked_at_their_versions() -> None:
    pins = locked()
    for name, version in no_deps_packages().items():
        assert pins.get(name) == version, f"{name}: Makefile {version}, lock {pins.get(name)}"


def test_the_venv_holds_exactly_the_locked_versions() -> None:
    for name, version in locked().items():
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            pytest.fail(f"{name} is locked but not installed: run make venv")
        assert installed == version, f"{name}: venv {installed}, lock {version}"


def test_the_lock_is_closed_under_the_requirements_it_installs() -> None:
    """What pip would resolve: every requirement (with the extras asked for) of every locked
    distribution is locked too, at a version it allows. The no-deps packages are exempt."""
    pins = locked()
    exempt = set(no_deps_packages())
    extras: dict[str, set[str]] = {}
    queue = declared() + [Requirement(f"{name}=={version}") for name, version in
                          no_deps_packages().items()]
    while queue:
        req = queue.pop()
        key = canonicalize_name(req.name)
        assert key in pins, f"{req} is required but not locked: run make lock"
        assert req.specifier.contains(pins[key], prereleases=True), (
            f"{req} is required but the lock has {pins[key]}")
        wanted = {""} | set(req.extras)
        if wanted <= extras.get(key, set()):
            continue
        extras.setdefault(key, set()).update(wanted)
        if key in exempt:
            continue
        for line in metadata.requires(req.name) or []:
            dep = Requirement(line)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in wanted):
                queue.append(dep)
    unused = set(pins) - set(extras)
    assert not unused, f"locked but required by nothing: {sorted(unused)}: run make lock"
