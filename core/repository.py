"""Copies and edits of a model repository (tests that edit one, benchmark variants, admin)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable
from pathlib import Path


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


def edit_config(repository: Path, model: str, pattern: str, replacement: str) -> None:
    """Replace exactly one match of `pattern` (regex, DOTALL) in the model's config.pbtxt."""
    config = repository / model / "config.pbtxt"
    text, count = re.subn(pattern, replacement, config.read_text(), flags=re.DOTALL)
    if count != 1:
        raise ValueError(f"{pattern!r} matched {count} times in {config}, expected once")
    tmp = config.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(config)


def set_parameter(repository: Path, model: str, key: str, value: str) -> None:
    """Set an existing `parameters { key: ... }` string value in config.pbtxt."""
    edit_config(repository, model,
                rf'(key: "{re.escape(key)}" value: {{ string_value: ")[^"]*(" }})',
                rf"\g<1>{value}\g<2>")


def put_parameter(repository: Path, model: str, key: str, value: str) -> None:
    """Set `parameters { key }` in config.pbtxt, adding the line when the key is absent."""
    config = repository / model / "config.pbtxt"
    if f'key: "{key}"' in config.read_text():
        set_parameter(repository, model, key, value)
        return
    line = f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
    tmp = config.with_suffix(".tmp")
    tmp.write_text(config.read_text().rstrip("\n") + "\n" + line)
    tmp.replace(config)
