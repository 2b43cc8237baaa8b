"""Every family's front logic is what the router reads (front.FrontLogic), built from the
repository's own config and version folder; and the text front's pure answer path: a
chunked text's windows pooled, duplicates and the counts it reports."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from google.protobuf import json_format

from core.paths import DEFAULT_REPOSITORY
from core.variant import REVIEWED
from core.versions import read_config
from python_backends.classify import ImageClassificationFront
from python_backends.embed import TextEmbeddingFront
from python_backends.front import FrontLogic
from python_backends.structured_log import BatchFacts

FRONTS = {"embed": TextEmbeddingFront, "digits": ImageClassificationFront,
          "efficientnet_lite0": ImageClassificationFront}


def model_of(name: str) -> SimpleNamespace:
    """What a front logic reads of its Triton model: config (JSON form), name, version
    folder, batch facts."""
    config = json_format.MessageToDict(read_config(DEFAULT_REPOSITORY / name),
                                       preserving_proto_field_name=True)
    folder = DEFAULT_REPOSITORY / name / "1"

    def artifact_path(default: str = "") -> Path:
        return folder / (config.get("default_model_filename") or default)

    return SimpleNamespace(config=config, name=name, artifact_path=artifact_path,
                           batch=BatchFacts(), model_dir=DEFAULT_REPOSITORY / name,
                           variant=REVIEWED)


def members() -> list[str]:
    """FrontLogic's attributes and methods."""
    methods = [n for n, _ in inspect.getmembers(FrontLogic, inspect.isfunction)
               if not n.startswith("_")]
    return [*FrontLogic.__annotations__, *methods]


@pytest.mark.parametrize("name", list(FRONTS))
def test_every_front_logic_has_what_the_router_reads(name: str) -> None:
    front = FRONTS[name](model_of(name))
    missing = [m for m in members() if not hasattr(front, m)]
    assert missing == [], f"{FRONTS[name].__name__} lacks {missing}"
    assert isinstance(front.bucket_waste, float) and isinstance(front.max_batch_tokens, int)


class Request:
    """A stub-side request as the text front reads it: TEXT and its parameters."""

    def __init__(self, texts: list[str], parameters: str = "{}") -> None:
        self.array = np.array([t.encode() for t in texts], dtype=np.object_).reshape(-1, 1)
        self._parameters = parameters

    def parameters(self) -> str:
        return self._parameters


def test_a_chunked_text_is_answered_with_its_windows_pooled_and_its_counts(monkeypatch):
    from python_backends import embed, text_model

    monkeypatch.setattr(embed, "ok_response", lambda outputs: outputs)
    monkeypatch.setattr(text_model, "input_array", lambda request, name: request.array)
    front = TextEmbeddingFront(model_of("embed"))
    long_text = "a sentence about windows and pooling. " * 150
    responses, prepared = front.prepare_requests(
        [Request([long_text, "short"], '{"truncate": "chunk"}')])
    assert responses == [None]
    request = prepared[0]
    windows = len(request.rows) - 1
    assert windows > 1 and request.split_keys == [long_text] * windows + ["short"]
    rng = np.random.default_rng(0)
    outputs = rng.normal(size=(len(request.rows), 384)).astype(np.float32)
    answer = front.respond(request, outputs, [f"m:1:fp32:L0:{i}" for i in range(windows + 1)])
    weights = np.array([len(r) for r in request.rows[:windows]], np.float64)
    pooled = (outputs[:windows] * weights[:, None]).sum(0) / weights.sum()
    np.testing.assert_allclose(answer["EMBEDDING"][0], pooled / np.linalg.norm(pooled),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(answer["EMBEDDING"][1], outputs[-1])
    assert answer["WINDOWS"].ravel().tolist() == [windows, 1]
    assert answer["TOKENS"].ravel().tolist() == [int(weights.sum()), len(request.rows[-1])]
    assert answer["TRUNCATED_TOKENS"].ravel().tolist() == [0, 0]
    assert answer["SERVED_BY"].ravel().tolist() == [b"m:1:fp32:L0:0",
                                                    f"m:1:fp32:L0:{windows}".encode()]
    assert front.inputs.metrics.windows.value == windows


def test_rows_are_keyed_by_their_token_ids_so_equal_texts_share_a_key(monkeypatch):
    from python_backends import text_model

    monkeypatch.setattr(text_model, "input_array", lambda request, name: request.array)
    front = TextEmbeddingFront(model_of("embed"))
    _, prepared = front.prepare_requests([Request(["same", "same", "other"])])
    keys = prepared[0].keys
    assert keys[0] == keys[1] != keys[2]
