"""Locate the Triton 2.51 server shipped in the `nvidia-pytriton` wheel and lay out a server home.

The wheel carries `tritonserver`, the Python backend, one Python stub per interpreter
version and the local response cache, but no native onnxruntime or pytorch backend.
`prepare_home()` builds a backend directory where `onnxruntime` and `pytorch` are
Python-based backends (`backends/<name>/model.py`) taken from `python_backends/`.
"""

from __future__ import annotations

import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from core.files import write_atomically
from core.paths import PROJECT_ROOT
from server.errors import DistributionError

PYTHON_BASED_BACKENDS = PROJECT_ROOT / "python_backends" / "backends"


@dataclass(frozen=True)
class TritonDistribution:
    """Paths inside the installed `nvidia-pytriton` wheel."""

    root: Path  # site-packages/pytriton/tritonserver
    libs: Path  # site-packages/nvidia_pytriton.libs

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    def stub_for(self, version: str) -> Path:
        return self.root / "python_backend_stubs" / version / "triton_python_backend_stub"


def find_distribution() -> TritonDistribution:
    """The wheel's server, from the running interpreter's site-packages."""
    site = Path(sysconfig.get_paths()["purelib"])
    dist = TritonDistribution(root=site / "pytriton" / "tritonserver",
                              libs=site / "nvidia_pytriton.libs")
    if not dist.binary.is_file():
        raise DistributionError(
            f"tritonserver not found at {dist.binary}; install the project (`make setup`), "
            "which pins nvidia-pytriton==0.7.0 for its Triton 2.51.0 binary"
        )
    return dist


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


@dataclass(frozen=True)
class ServerHome:
    """A prepared folder with `bin`, `backends` and `caches` for one interpreter."""

    root: Path
    dist: TritonDistribution

    @property
    def backends(self) -> Path:
        return self.root / "backends"

    @property
    def caches(self) -> Path:
        return self.dist.root / "caches"


def prepare_home(root: Path, dist: TritonDistribution | None = None) -> ServerHome:
    """Lay out the backend directory under `root` (idempotent: copies only what changed).

    Copies, not links: Triton refuses a backend library whose real path escapes the
    backend directory.
    """
    dist = dist or find_distribution()
    stub = dist.stub_for(python_version())
    if not stub.is_file():
        raise DistributionError(f"no Python backend stub for Python {python_version()} at {stub}")
    python_dir = root / "backends" / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    src_python = dist.root / "backends" / "python"
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        _copy(src_python / name, python_dir / name)
    _copy(stub, python_dir / "triton_python_backend_stub")
    for backend in sorted(PYTHON_BASED_BACKENDS.iterdir()):
        if (backend / "model.py").is_file():
            (root / "backends" / backend.name).mkdir(exist_ok=True)
            _copy(backend / "model.py", root / "backends" / backend.name / "model.py")
    return ServerHome(root=root, dist=dist)


def _copy(src: Path, dst: Path) -> None:
    if dst.is_file() and not dst.is_symlink() and dst.read_bytes() == src.read_bytes():
        return
    write_atomically(dst, src.read_bytes())
    shutil.copystat(src, dst)
