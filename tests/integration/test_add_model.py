"""`tmr add` on a copy of the repository: a second text-embedding model served with no code
change, its embeddings equal to sentence-transformers' own (eager PyTorch).

CI adds a smaller second model built here from real weights: all-MiniLM-L6-v2 cut to its
first 3 layers, with CLS pooling and no normalisation, a maximum of 128 tokens, so every
model fact the family reads from a folder differs from the shipped model's. The same
test adds all-mpnet-base-v2 (MPNet, 768-d, 440 MB, assembled from five packages) when
`TMR_ADD_SOURCE` names it, which `make test-mpnet` does: too slow for CI (docs).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tmr_client import Client

from core.families import served_precision
from core.families.catalog import find
from core.families.configs import parameters_of
from core.repository import copy_repository
from core.versions import read_config, versions_on_disk
from export.sources import resolve
from server.launcher import TritonServer
from tests.conftest import MINILM_SOURCE, REPOSITORY, start_server, stop_cleanly
from tests.integration.helpers import tmr
from tests.integration.test_embed_serving import TEXTS, sentence_transformers_embeddings

NAME = os.environ.get("TMR_ADD_NAME", "small")


def smaller_model(folder: Path) -> Path:
    """all-MiniLM-L6-v2 cut to 3 layers, CLS pooling, unnormalised, 128 tokens (a real ST
    folder: sentence-transformers loads it as it is)."""
    shutil.copytree(MINILM_SOURCE, folder)
    edits = {
        "config.json": {"num_hidden_layers": 3},
        "1_Pooling/config.json": {"pooling_mode_mean_tokens": False,
                                  "pooling_mode_cls_token": True},
        "sentence_bert_config.json": {"max_seq_length": 128},
    }
    for name, changes in edits.items():
        data = json.loads((folder / name).read_text())
        (folder / name).write_text(json.dumps({**data, **changes}, indent=1))
    modules = [m for m in json.loads((folder / "modules.json").read_text())
               if not m["type"].endswith("Normalize")]
    (folder / "modules.json").write_text(json.dumps(modules, indent=1))
    return folder


@pytest.fixture(scope="module")
def added(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TritonServer, Path, Path]]:
    root = tmp_path_factory.mktemp("add")
    repo = copy_repository([REPOSITORY], root / "repository")
    source = os.environ.get("TMR_ADD_SOURCE") or str(smaller_model(root / "source"))
    out = tmr("add", NAME, "--family", "text_embedding", "--from", source,
              "--repository", str(repo), "--no-tune", timeout_s=3000)
    assert out.returncode == 0, out.stdout + out.stderr
    print(f"\ntmr add {NAME}:\n{out.stdout}")  # its fidelity and gate figures (-s shows them)
    server = start_server(repo, root / "tritonserver.log")
    yield server, repo, resolve(source)
    stop_cleanly(server)


@pytest.mark.timeout(3600)
def test_an_added_model_is_served_with_no_code_change_and_equals_eager_pytorch(added) -> None:
    server, repo, folder = added
    model = find(repo, NAME)
    assert model.front == NAME
    assert sorted(model.encoders) == ["int8", "onnx", "openvino", "torchscript"]
    reference = sentence_transformers_embeddings(folder, TEXTS)
    with Client(server.grpc_url, protocol="grpc") as client:
        result = client.embed_with_info(TEXTS, model=NAME)
        shipped = client.embed(TEXTS)  # the default model still serves beside it
    got = result.embeddings
    assert got.shape == reference.shape and shipped.shape[0] == len(TEXTS)
    cosine = (got * reference).sum(1) / (np.linalg.norm(got, axis=1)
                                          * np.linalg.norm(reference, axis=1))
    print(f"\n{NAME}: dim {got.shape[1]}, cosine vs sentence-transformers min {cosine.min():.6f}")
    assert cosine.min() >= 0.9999
    assert np.allclose(np.linalg.norm(got, axis=1), np.linalg.norm(reference, axis=1),
                       rtol=1e-3)  # the same normalisation (or none)
    # The reviewed config calls the family's primary at FP32 whatever this host is: the
    # host's choices are `tmr tune`'s (test_host_profile.py), never frozen into config.pbtxt.
    assert model.primary == model.family.serving.primary
    primary = model.encoder(model.primary)
    precision = served_precision(parameters_of(read_config(repo / primary)))
    assert result.served_by == [f"{primary}:1:{precision}:L0"] * len(TEXTS)


@pytest.mark.timeout(3600)
def test_adding_it_again_changes_nothing_and_a_bad_source_leaves_nothing(added) -> None:
    _, repo, folder = added
    model = find(repo, NAME)
    before = {m: versions_on_disk(repo / m) for m in model.models}
    again = tmr("add", NAME, "--family", "text_embedding", "--from", str(folder),
                "--repository", str(repo), "--no-tune")  # tuning is test_tune.py's
    if again.returncode != 0:  # added from parts:...: the folder is another source string
        assert "already exists" in again.stderr, again.stderr[-3000:]
    else:
        assert again.stdout.count("up to date") == 4, again.stdout
    assert {m: versions_on_disk(repo / m) for m in model.models} == before
    empty = repo.parent / "not_a_model"
    empty.mkdir()
    bad = tmr("add", "broken", "--family", "text_embedding", "--from", str(empty),
              "--repository", str(repo))
    assert bad.returncode == 2 and "no config.json" in bad.stderr, bad.stderr
    assert not [p for p in repo.iterdir() if "broken" in p.name]
    unknown = tmr("add", "other", "--family", "audio", "--from", str(folder),
                  "--repository", str(repo))
    assert unknown.returncode == 2 and "unknown model family 'audio'" in unknown.stderr
