"""Edits of a config.pbtxt as values: parse it with Triton's protobuf, change the message,
render it back, write it atomically. Nothing depends on the text's layout.

A family model's config (one with a `family` parameter) is rendered by
core.families.configs.render, the layout `tmr add` writes (tests/unit/test_configs.py
holds every shipped config to it); any other config (health, stub_env, the benchmark
fixtures) with Triton's text format. The file's leading comment lines stay its header.

    tmr promote / rollback     set_version(model_dir, version): every profile's policy
    tmr export                 pin_served_version(model_dir), before a new version folder
    tmr degrade --control-mode poll   core.repository.set_parameter (set_parameter below)
    tests and benchmarks       core.repository.edit_config(repository, model, change)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from google.protobuf import text_format

from core.families.configs import family_of, render
from core.files import write_atomically
from core.model_config import mc
from core.versions import (
    VersionError,
    config_files,
    parse_config,
    read_config,
    selected_versions,
    versions_on_disk,
)

Change = Callable[[mc.ModelConfig], None]  # changes the parsed config in place


def header_of(text: str) -> str:
    """The leading comment lines of a config, without their `# `."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[2:] if line.startswith("# ") else line[1:])
    return "\n".join(lines)


def rendered(config: mc.ModelConfig, header: str) -> str:
    """config.pbtxt text: the family layout where it applies, Triton's text format else."""
    policy = config.version_policy
    if family_of(config) is not None and (not config.HasField("version_policy")
                                          or policy.HasField("specific")):
        return render(config, header)
    comments = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    return comments + text_format.MessageToString(config)


def edited(text: str, change: Change) -> str:
    """The config text with `change` applied; a text Triton would not parse is refused."""
    config = parse_config(text)
    change(config)
    return rendered(config, header_of(text))


def edit_file(path: Path, change: Change) -> str:
    """Apply `change` to the config at `path`, written atomically; the previous text."""
    previous = path.read_text(encoding="utf-8")
    write_atomically(path, edited(previous, change))
    return previous


# -- the changes --------------------------------------------------------------------------
def set_parameter(key: str, value: str, add: bool = False) -> Change:
    """Set `parameters { key }` to the string `value`; without `add`, the key must exist
    (ValueError otherwise)."""
    def change(config: mc.ModelConfig) -> None:
        if not add and key not in config.parameters:
            raise ValueError(f"{config.name} has no parameter {key!r} to set")
        config.parameters[key].string_value = value
    return change


def select_version(version: int) -> Change:
    """A `specific` version policy selecting exactly `version`."""
    def change(config: mc.ModelConfig) -> None:
        config.version_policy.Clear()
        config.version_policy.specific.versions.append(version)
    return change


def with_specific_version(text: str, version: int) -> str:
    """config.pbtxt text whose version_policy selects exactly `version`."""
    new = edited(text, select_version(version))
    if list(parse_config(new).version_policy.specific.versions) != [version]:
        raise VersionError(f"edited config does not select version {version}")
    return new


def set_version(model_dir: Path, version: int) -> dict[Path, str]:
    """Select `version` in every config file of the model; the previous texts (for undo).
    Every file is edited before any is written: a refused edit writes nothing."""
    previous = {path: path.read_text(encoding="utf-8") for path in config_files(model_dir)}
    new = {path: with_specific_version(text, version) for path, text in previous.items()}
    for path, text in new.items():
        write_atomically(path, text)
    return previous


def pin_served_version(model_dir: Path) -> int | None:
    """Before a new version folder is added: make `version_policy` name the version served
    now, so the new one takes no traffic until `tmr promote` (poll mode would load it at the
    next scan, explicit mode at the next start). A `specific` policy already does; the
    shipped configs have one. Returns the served version, or None when nothing is served
    yet (the first export of a model serves at once: there is nothing to gate it against).
    """
    if not (model_dir / "config.pbtxt").exists():
        return None  # a folder Triton does not serve (an export outside a repository)
    config = read_config(model_dir)
    selected = selected_versions(config, versions_on_disk(model_dir))
    if selected and not config.version_policy.HasField("specific"):
        set_version(model_dir, selected[-1])
    return selected[-1] if selected else None
