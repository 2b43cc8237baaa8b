"""Copies and edits of a model repository (tests that edit one, benchmark variants, admin)."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from core import config_edit
from core.config_edit import Change, edit_file
from core.versions import config_files


def copy_repository(sources: Iterable[Path], target: Path) -> Path:
    """Copy every model folder of `sources` into `target`; version folders are linked.

    Configs and everything else are real copies, so they can be edited freely; the large
    artifacts in integer version folders are symlinks (Triton follows them).
    """
    for source in sources:
        for model in sorted(p for p in source.iterdir() if p.is_dir()):
            dest = target / model.name
            dest.mkdir(parents=True)
            for item in model.iterdir():
                if item.name.isdigit():
                    (dest / item.name).symlink_to(item.resolve())
                elif item.is_dir():
                    shutil.copytree(item, dest / item.name)
                else:
                    shutil.copy(item, dest / item.name)
    return target


def edit_config(repository: Path, model: str, change: Change) -> str:
    """Apply `change` to the model's parsed config.pbtxt and to each of its variants in
    configs/ (whichever one the server serves: the host profile, the GPU profile), each
    written back atomically (core.config_edit); the previous text of config.pbtxt."""
    previous = [edit_file(path, change) for path in config_files(repository / model)]
    return previous[0]


def set_parameter(repository: Path, model: str, key: str, value: str) -> None:
    """Set an existing `parameters { key }` string value in every config file of the model
    (ValueError if absent)."""
    edit_config(repository, model, config_edit.set_parameter(key, value))


def put_parameter(repository: Path, model: str, key: str, value: str) -> None:
    """Set `parameters { key }` in every config file of the model, adding it when absent."""
    edit_config(repository, model, config_edit.set_parameter(key, value, add=True))
