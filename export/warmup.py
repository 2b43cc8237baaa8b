"""The warmup data of every family model (core/families/warmup.py), made from real inputs.

    python -m export.warmup [--repository DIR] [--configs]

A front's sample is a real input of its clients, from the perf inputs (perf/inputs/: the
model's own `<front>.json`, else its family's file), and its encoders' samples are what
the front makes of that input. The family's recipe module makes them (`warmup_files`,
export/recipe.py): for text, the text whose token count comes closest to the family's
warmup length without passing it, and its token ids from the front's own tokenizer,
padded to the warmup length with the tokenizer's pad id (mask 0); for images, the first
image as its raw bytes, and its pixels as the front's own code preprocesses them
(runtime/images.py). The files go into the front's `warmup/` folder; each encoder's
`warmup/` is a relative link to it, so the repository holds one copy per model (an
EfficientNet-Lite0 pixel tensor is 588 KiB).

`tmr add` and `tmr export` write them (export.pipeline); a file is rewritten only when its
bytes change, so a re-run leaves an unchanged repository untouched. `--configs` first
re-renders every family config of the repository through core/families/configs.py, as
`tmr add` writes them (after a change of the families' code, e.g. their warmup plan).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

from core import versions
from core.families.catalog import FamilyModel, catalog
from core.families.configs import (
    encoder_spec,
    front_spec,
    gpu_spec,
    write_encoder,
    write_front,
)
from core.families.warmup import WARMUP_FOLDER, data_files
from core.files import write_atomically
from core.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from export.errors import ExportError
from export.recipe import recipe_module

CLIENT_INPUTS = PROJECT_ROOT / "perf" / "inputs"  # what clients send, as perf_analyzer data


def client_inputs(model: FamilyModel) -> list[str]:
    """The contents of the front's one input in its perf inputs (base64 text for images)."""
    own = CLIENT_INPUTS / f"{model.front}.json"
    path = own if own.exists() else CLIENT_INPUTS / model.family.perf_inputs
    name = model.family.contract.front_inputs[0].name
    return [row[name]["content"][0] for row in json.loads(path.read_text())["data"]]


def front_artifact(repository: Path, front: str) -> Path:
    """The front's file (its tokenizer.json or labels.txt) in the version it serves."""
    folder = repository / front
    filename = versions.read_config(folder).default_model_filename
    return folder / str(versions.served_version(folder)) / filename


def write_if_changed(path: Path, data: bytes) -> bool:
    if path.is_file() and path.read_bytes() == data:
        return False
    write_atomically(path, data)
    return True


def same_files(a: Path, b: Path) -> bool:
    """Two folders holding the same file names with the same bytes."""
    names = sorted(p.name for p in a.iterdir())
    return names == sorted(p.name for p in b.iterdir()) and all(
        (a / n).is_file() and (b / n).is_file() and (a / n).read_bytes() == (b / n).read_bytes()
        for n in names)


def link_folder(link: Path, target: Path) -> bool:
    """`link` as a relative symlink to the folder `target`, replacing what was there: a
    link or a file, or a folder holding a copy of the target's files (what a repository
    copy makes of a link, core.repository.copy_repository); any other folder is refused."""
    relative = Path(os.path.relpath(target, link.parent))
    if link.is_symlink() and Path(os.readlink(link)) == relative:
        return False
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir() and same_files(link, target):
        shutil.rmtree(link)
    elif link.is_dir():
        raise FileExistsError(f"{link} is a folder; remove it to link it to {target}")
    link.symlink_to(relative, target_is_directory=True)
    return True


def write_warmup(repository: Path, model: FamilyModel) -> list[Path]:
    """The model's warmup files in its front's folder and its encoders' links to them; the
    paths that changed. Needs the front's exported files (its tokenizer)."""
    if not model.front:
        raise ExportError(f"{model.base} has no front model to take a real input from")
    files = recipe_module(model.family).warmup_files(repository, model)
    folder = repository / model.front / WARMUP_FOLDER
    changed = [folder / name for name, data in sorted(files.items())
               if write_if_changed(folder / name, data)]
    for name in model.models:
        wanted = data_files(versions.read_config(repository / name))
        if not wanted <= set(files):
            raise ExportError(f"{name} warms with {sorted(wanted - set(files))}, which "
                             f"export.warmup does not make")
        link = repository / name / WARMUP_FOLDER
        if name != model.front and link_folder(link, folder):
            changed.append(link)
    return changed


def rewrite_configs(repository: Path, model: FamilyModel) -> None:
    """Every config of the model re-rendered from what varies in it (core/families/configs)."""
    for name in model.encoders.values():
        folder = repository / name
        spec = encoder_spec(versions.read_config(folder))
        gpu = folder / "configs" / "gpu.pbtxt"
        write_encoder(repository, gpu_spec(spec, versions.parse_config(gpu.read_text()))
                      if gpu.exists() else spec)
    if model.front:
        write_front(repository, front_spec(versions.read_config(repository / model.front)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export.warmup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    parser.add_argument("--configs", action="store_true",
                        help="re-render every family config first (as `tmr add` writes them)")
    args = parser.parse_args(argv)
    for model in catalog(args.repository):
        if args.configs:
            rewrite_configs(args.repository, model)
        changed = write_warmup(args.repository, model)
        print(f"{model.base}: {len(changed)} warmup path(s) written"
              + "".join(f"\n  {p.relative_to(args.repository)}" for p in changed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
