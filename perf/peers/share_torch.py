"""Let a peer venv import the project venv's torch without installing it there.

optimum 1.24 (infinity-emb's `optimum` engine) imports torch, and its metadata requires it.
Rather than a second torch, this links the project venv's torch packages into one folder and
names it in a `.pth` file of the peer venv: Python appends it to `sys.path` after the peer's
own site-packages, and pip sees torch as installed, so the peer's pins never pull one.

    .venv/bin/python -m perf.peers.share_torch .peers/infinity/venv .peers/infinity/shared-torch
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
from pathlib import Path

PTH_NAME = "project-torch.pth"


def torch_entries() -> list[Path]:
    """The top-level folders of this venv's torch distribution, and its .dist-info."""
    dist = importlib.metadata.distribution("torch")
    site = Path(dist.locate_file(""))
    tops = {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}
    return sorted(site / top for top in tops if (site / top).is_dir())


def site_packages(venv: Path) -> Path:
    """The purelib folder of `venv`, asked of its own interpreter."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], check=True,
                         capture_output=True, text=True)
    return Path(out.stdout.strip())


def share(venv: Path, folder: Path) -> Path:
    """Link torch's entries into `folder` (replacing old links) and point `venv` at it."""
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        if old.is_symlink():
            old.unlink()
    for entry in torch_entries():
        (folder / entry.name).symlink_to(entry.resolve())
    pth = site_packages(venv) / PTH_NAME
    pth.write_text(f"{folder}\n")
    return pth


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("venv", type=Path)
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    print(f"torch shared with {args.venv} through {share(args.venv, args.folder)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
