"""Writing files that servers read while we write them, and ${NAME} templates."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from core.errors import CoreError

_PLACEHOLDER = re.compile(r"\$\{([A-Z][A-Z0-9_]*)\}")


class TemplateError(CoreError, ValueError):
    """A template names a placeholder that no value was given for (`missing`, sorted)."""

    def __init__(self, missing: list[str]) -> None:
        self.missing = missing
        super().__init__(f"no value for placeholder(s) {', '.join(missing)}")


def write_atomically(path: Path, data: str | bytes) -> Path:
    """Write through a hidden temporary file and a rename: a reader (Triton polling the
    repository, nginx, Prometheus) sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    if isinstance(data, bytes):
        tmp.write_bytes(data)
    else:
        tmp.write_text(data, encoding="utf-8")
    tmp.replace(path)
    return path


def placeholders(template: str) -> list[str]:
    """The distinct ${NAME} placeholders of `template`, sorted."""
    return sorted(set(_PLACEHOLDER.findall(template)))


def render_template(template: str, values: Mapping[str, object]) -> str:
    """`template` with every ${NAME} replaced; a name without a value raises TemplateError."""
    missing = [name for name in placeholders(template) if name not in values]
    if missing:
        raise TemplateError(missing)
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)
