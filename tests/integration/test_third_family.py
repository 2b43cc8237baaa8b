"""A third family touches only the files docs/families.md lists, and is then added and
served like the two shipped ones: `tmr add`, then `tmr serve` of the real server.

The family (a classifier of tabular rows, tests/third_family/, laid out as its files go
into the project) is registered in a copy of the project, never in this one: its files
are copied in and its two registrations edited, and the test checks that the changed
files are exactly the checklist's. In the copy, `tmr add` exports a small seeded MLP in
every format of the family, and `tmr serve --models tabular_classification` serves it
with the health model; the SDK's generic `Client.infer` gets the MLP's softmax, a bad row
gets INVALID_ARG naming it, and SIGTERM stops the server cleanly.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch
from tmr_client import Client, InvalidInputError
from tmr_client.served_by import ServedBy

from core.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from tests.conftest import free_ports

FAMILY = "tabular_classification"
PERF_INPUTS = "tabular_classification.json"
FIXTURE = PROJECT_ROOT / "tests" / "third_family"
COLUMNS, HIDDEN, CLASSES = 8, 16, 3
# The registrations: (file, text before, text after), one edit each.
REGISTRATIONS = (
    ("core/families/__init__.py",
     "from core.families.text_embedding import TEXT_EMBEDDING\n",
     "from core.families.tabular_classification import TABULAR_CLASSIFICATION\n"
     "from core.families.text_embedding import TEXT_EMBEDDING\n"),
    ("core/families/__init__.py",
     "TEXT_RANKING)}",
     "TEXT_RANKING, TABULAR_CLASSIFICATION)}"),
    ("export/recipe.py",
     '"text_ranking": "export.text_ranking"}',
     '"text_ranking": "export.text_ranking",\n'
     f'                  "{FAMILY}": "export.{FAMILY}"}}'),
)


def project_files() -> list[str]:
    """The project's files as git sees them (tracked, and new ones it does not ignore)."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                          "-z"], cwd=PROJECT_ROOT, capture_output=True, check=True)
    names = [f for f in out.stdout.decode().split("\0") if f]
    return [f for f in names if (PROJECT_ROOT / f).exists() or (PROJECT_ROOT / f).is_symlink()]


def copy_project(target: Path) -> None:
    for name in project_files():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROJECT_ROOT / name, path, follow_symlinks=False)


def copy_venv(copy: Path) -> Path:
    """A venv for the copy, its Python: this venv's packages, linked, and the copy's code
    where this one has its editable install. A Python stub ignores PYTHONPATH (it embeds an
    isolated interpreter) and finds its venv from PATH, where the launcher puts the
    server's: the copy's code must be its venv's own."""
    venv = copy / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    here = Path(sysconfig.get_paths()["purelib"])
    site = venv / here.relative_to(sys.prefix)
    for entry in here.iterdir():
        if not entry.name.startswith("__editable__"):
            (site / entry.name).symlink_to(entry)
    (copy / ".sdk").mkdir()
    (copy / ".sdk" / "tmr_client").symlink_to(copy / "client")  # the SDK's import name
    (site / "tmr_copy.pth").write_text(f"{copy}\n{copy / '.sdk'}\n")
    return venv / "bin" / "python"


def register_family(copy: Path) -> set[str]:
    """The family's files copied into the project copy and its registrations made; the
    project paths that changed."""
    changed = set()
    for path in FIXTURE.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            name = str(path.relative_to(FIXTURE))
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, copy / name)
            changed.add(name)
    for name, before, after in REGISTRATIONS:
        text = (copy / name).read_text()
        assert text.count(before) == 1, f"{name} no longer holds {before!r}"
        (copy / name).write_text(text.replace(before, after))
        changed.add(name)
    return changed


def checklist() -> set[str]:
    """The paths docs/families.md's "Adding a family" list names as a family's: its own
    files (named with `<name>`), and where it is registered."""
    text = (PROJECT_ROOT / "docs" / "families.md").read_text()
    section = text.split("## Adding a family", 1)[1].split("and no others:\n\n", 1)[1]
    section = section.split("\n\n", 1)[0]  # the numbered list
    own = re.findall(r"`([a-z_/]*<[a-z_]+>[a-z_<>/]*\.(?:py|json))`", section)
    registrations = re.findall(r"(?:registered|named) in\s+`([a-z_/]+\.py)`", section)
    return {p.replace("<name>", FAMILY).replace("<perf_inputs>", PERF_INPUTS.removesuffix(
        ".json")) for p in own + registrations}


def tabular_source(folder: Path) -> dict[str, torch.Tensor]:
    """A seeded MLP's folder (model.json, weights.pt); its weights."""
    torch.manual_seed(0)
    layers = torch.nn.Sequential(torch.nn.Linear(COLUMNS, HIDDEN), torch.nn.ReLU(),
                                 torch.nn.Linear(HIDDEN, CLASSES))
    weights = {f"layers.{k}": v for k, v in layers.state_dict().items()}
    folder.mkdir(parents=True)
    torch.save(weights, folder / "weights.pt")
    (folder / "model.json").write_text(json.dumps(
        {"columns": [f"c{i}" for i in range(COLUMNS)], "hidden": HIDDEN, "classes": CLASSES}))
    return weights


def softmax_of_mlp(weights: dict[str, torch.Tensor], rows: np.ndarray) -> np.ndarray:
    """The MLP by hand, in float64: what the served probabilities must be."""
    w = {k: v.double().numpy() for k, v in weights.items()}
    hidden = np.maximum(rows @ w["layers.0.weight"].T + w["layers.0.bias"], 0)
    logits = hidden @ w["layers.2.weight"].T + w["layers.2.bias"]
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def in_copy(copy: Path, *args: str, timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(copy / ".venv" / "bin" / "python"), "-m", "cli.main", *args],
                          cwd=copy, env=copy_environment(), capture_output=True, text=True,
                          timeout=timeout_s)


def copy_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.mark.timeout(900)
def test_a_third_family_touches_only_the_listed_files_and_serves(tmp_path: Path) -> None:
    copy = tmp_path / "project"
    copy_project(copy)
    changed = register_family(copy)
    assert changed == checklist(), "docs/families.md's checklist and the files a family needs"
    python = copy_venv(copy)

    weights = tabular_source(tmp_path / "source")
    repo = tmp_path / "repository"
    repo.mkdir()
    shutil.copytree(DEFAULT_REPOSITORY / "health", repo / "health", symlinks=True)
    added = in_copy(copy, "add", "tab", "--family", FAMILY, "--from", str(tmp_path / "source"),
                    "--repository", str(repo), timeout_s=600)
    assert added.returncode == 0, added.stdout + added.stderr
    assert "tmr tune: nothing to time in" in added.stdout, added.stdout  # text fronts only
    assert {p.name for p in repo.iterdir()} >= {"tab", "tab_onnx", "tab_torchscript",
                                                "tab_int8", "tab_openvino"}, added.stdout

    ports = free_ports()
    serve = subprocess.Popen(
        [str(python), "-m", "cli.main", "serve", "--repository", str(repo),
         "--http-port", str(ports.http), "--grpc-port", str(ports.grpc),
         "--metrics-port", str(ports.metrics), "--models", FAMILY, "--bulk-cpu", "nice"],
        cwd=copy, env=copy_environment(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        assert serve.stdout is not None
        for line in serve.stdout:
            lines.append(line)
            if line.startswith("memory: "):
                break
        # the family's probe through the generic call, described by the family
        assert any(re.match(r"tab answered: class \d p=0\.\d{3}", line) for line in lines), \
            "".join(lines)
        assert not any(" embed --url " in line for line in lines), "no embed example: no embed"
        rows = np.random.default_rng(1).normal(size=(5, COLUMNS))
        texts = np.array([[",".join(f"{v:.6f}" for v in row).encode()] for row in rows],
                         dtype=np.object_)
        with Client(f"localhost:{ports.http}") as client:
            result = client.infer(texts, "FEATURES", ["PROBABILITIES", "SERVED_BY"],
                                  model="tab")
            expected = softmax_of_mlp(weights, rows.round(6))
            np.testing.assert_allclose(result.outputs["PROBABILITIES"], expected, atol=1e-5)
            served = {ServedBy.parse(s.decode() if isinstance(s, bytes) else s)
                      for s in result.outputs["SERVED_BY"].reshape(-1)}
            assert {(s.model, s.level) for s in served} == {("tab_onnx", 0)}, served
            with pytest.raises(InvalidInputError, match=r"FEATURES\[0\]: 3 values; the model "
                                                        r"takes 8"):
                client.infer(np.array([[b"1,2,3"]], dtype=np.object_), "FEATURES",
                             ["PROBABILITIES"], model="tab")
            assert client.infer(texts[:1], "FEATURES", ["PROBABILITIES"],
                                model="tab").outputs["PROBABILITIES"].shape == (1, CLASSES)
        serve.send_signal(signal.SIGTERM)
        rest, _ = serve.communicate(timeout=60)
    finally:
        if serve.poll() is None:
            serve.kill()
    assert serve.returncode == 0, "".join(lines) + rest
    print("".join(["tmr add:\n", added.stdout, "tmr serve:\n", *lines]))  # -s shows them
