"""The text-ranking family's pure parts: pairs framed and cut exactly as Hugging Face
tokenizers frame and cut them (runtime/pairs.py), the front's scores and parameters
(python_backends/rerank.py), the INT8 judge of an order (export/quality.py) and what a
cross-encoder folder says (export/rank_source.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from export.errors import ExportCheckError
from export.quality import rank_quality, spearman
from export.rank_source import max_tokens, read_rank_facts
from python_backends.rerank import pair_scores, paired, raw_scores_asked
from runtime.errors import InvalidInputError
from runtime.pairs import PairEncoder, fit_pair, longest_first, pair_feeds
from runtime.tokenization import FittedText, TextLimits, TextOptions
from tests.conftest import MINILM_SOURCE

TOKENIZER = MINILM_SOURCE / "tokenizer.json"
WORDS = ["the", "cat", "sat", "on", "a", "mat", "while", "dogs", "bark", "loudly", "at",
         "night", "near", "old", "stone", "walls"]


@pytest.fixture(scope="module")
def encoder() -> PairEncoder:
    return PairEncoder(TOKENIZER)


def reference(query: str, document: str, max_length: int | None) -> tuple[list, list]:
    """The tokenizers library's own pair encoding (CrossEncoder's `truncation=True`)."""
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    if max_length:
        tokenizer.enable_truncation(max_length, strategy="longest_first")
    done = tokenizer.encode(query, document)
    return done.ids, done.type_ids


def test_the_frame_is_learned_from_the_tokenizer(encoder: PairEncoder) -> None:
    frame = encoder.frame
    assert (frame.lead, frame.middle, frame.trail) == ((101,), (102,), (102,))  # BERT
    ids, types = reference("a query", "a document", None)
    (q,), (d,) = encoder.ids(["a query"]), encoder.ids(["a document"])
    row = frame.row(q, d)
    assert (list(row.ids), list(row.types)) == (ids, types)


def test_truncation_cuts_exactly_as_the_tokenizers_library_does(encoder: PairEncoder) -> None:
    """Random lengths on both sides and random limits: the same tokens, the same segments."""
    rng = random.Random(7)
    for _ in range(300):
        query = " ".join(rng.choices(WORDS, k=rng.randint(1, 40)))
        document = " ".join(rng.choices(WORDS, k=rng.randint(1, 90)))
        limit = rng.randint(6, 70)
        (q,), (d,) = encoder.ids([query]), encoder.ids([document])
        fitted = fit_pair(q, d, encoder.frame, TextLimits(max_tokens=limit),
                          TextOptions("truncate", 0), 0)
        (row,) = fitted.rows
        assert (list(row.ids), list(row.types)) == reference(query, document, limit)
        assert fitted.truncated == max(0, len(q) + len(d) + 3 - limit)


@pytest.mark.parametrize(("first", "second", "room", "kept"), [
    (3, 4, 10, (3, 4)),  # both fit
    (2, 20, 10, (2, 8)),  # the longer side is cut
    (20, 2, 10, (8, 2)),
    (7, 9, 10, (5, 5)),  # the shorter passes half: half each
    (8, 9, 9, (4, 5)),  # the odd token goes to the second
])
def test_longest_first(first: int, second: int, room: int, kept: tuple[int, int]) -> None:
    assert longest_first(first, second, room) == kept


def test_reject_names_the_document_and_chunk_keeps_the_query_beside_each_window(
        encoder: PairEncoder) -> None:
    limits = TextLimits(max_tokens=16, max_windows_per_text=4)
    q, d = list(range(1000, 1004)), list(range(2000, 2020))
    with pytest.raises(InvalidInputError, match=r"DOCUMENT\[2\].*27 tokens.*limit of 16"):
        fit_pair(q, d, encoder.frame, limits, TextOptions("reject", 0), 2)
    fitted = fit_pair(q, d, encoder.frame, limits, TextOptions("chunk", 2), 0)
    assert len(fitted.rows) == 3 and fitted.truncated == 0  # windows of 9, stride 7
    for row in fitted.rows:
        assert len(row) <= 16 and list(row.ids[1:5]) == q
    assert [row.ids[6] for row in fitted.rows] == [2000, 2007, 2014]
    with pytest.raises(InvalidInputError, match="windows per document"):
        fit_pair(q, list(range(80)), encoder.frame, limits, TextOptions("chunk", 0), 0)
    with pytest.raises(InvalidInputError, match=r"QUERY\[0\] is 14 tokens"):
        fit_pair(list(range(14)), d, encoder.frame, limits, TextOptions("chunk", 0), 0)
    with pytest.raises(InvalidInputError, match=r"DOCUMENT\[1\] has no tokens"):
        fit_pair(q, [], encoder.frame, limits, TextOptions("truncate", 0), 1)


def test_rows_are_padded_with_the_pad_id_and_segments_of_zero(encoder: PairEncoder) -> None:
    short, long_ = encoder.frame.row([5], [6]), encoder.frame.row([5, 5], [6, 6, 6])
    ids, mask, types = pair_feeds([short, long_], pad_id=0)
    assert ids.shape == mask.shape == types.shape == (2, 8)
    assert mask[0].tolist() == [1] * 5 + [0] * 3
    assert types[0].tolist() == [0, 0, 0, 1, 1, 0, 0, 0]
    assert short.digest() != long_.digest()
    assert short.digest() == encoder.frame.row([5], [6]).digest()


def test_a_pair_scores_its_best_window_through_the_activation_unless_raw() -> None:
    fitted = [FittedText([[1]], 1), FittedText([[1], [2], [3]], 9)]
    logits = np.array([[0.0], [-1.0], [2.0], [0.5]], dtype=np.float32)
    assert pair_scores(fitted, logits, "sigmoid", raw=True).ravel().tolist() == [0.0, 2.0]
    squashed = pair_scores(fitted, logits, "sigmoid", raw=False).ravel()
    assert np.allclose(squashed, [0.5, 1 / (1 + np.exp(-2.0))])
    assert pair_scores(fitted, logits, "identity", raw=False).ravel().tolist() == [0.0, 2.0]


def test_request_parameters_of_a_reranker() -> None:
    assert raw_scores_asked(None) is False and raw_scores_asked('{"raw_scores": true}') is True
    with pytest.raises(InvalidInputError, match="raw_scores"):
        raw_scores_asked('{"raw_scores": "yes"}')
    with pytest.raises(InvalidInputError, match="count_only"):
        raw_scores_asked('{"count_only": true}')
    assert paired(["q", "q"], ["a", "b"]) == ["q", "q"]
    with pytest.raises(InvalidInputError, match="2 rows and DOCUMENT 3"):
        paired(["q", "r"], ["a", "b", "c"])


def test_rank_quality_judges_the_order_of_each_query() -> None:
    gates = {"gate_min_rank_correlation": 0.9, "gate_min_top3_overlap": 0.8,
             "gate_max_score_error": 0.1}
    reference = np.array([3.0, 2.0, 1.0, 0.0, -1.0, -2.0] * 2).reshape(-1, 1)
    same, why = rank_quality(reference, reference + 0.01, gates, 6)
    assert why is None and same["rank_correlation"] == 1.0 and same["queries"] == 2
    flipped, why = rank_quality(reference, -reference, gates, 6)
    assert flipped["rank_correlation"] == -1.0 and flipped["top3_overlap"] == 0.0
    assert "rank correlation" in why and "top-3" in why and "score changed" in why
    assert spearman(np.ones(4), np.arange(4.0)) == 1.0  # no order to disagree on


def folder_with(tmp_path: Path, config: dict, **files: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "tokenizer.json").write_text(TOKENIZER.read_text())
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    for name, data in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    return tmp_path


def test_a_cross_encoder_folder_says_its_length_and_activation(tmp_path: Path) -> None:
    bert = {"architectures": ["BertForSequenceClassification"], "num_labels": 1,
            "max_position_embeddings": 512}
    facts = read_rank_facts(folder_with(tmp_path, bert, tokenizer_config={
        "model_max_length": 1000000000000000019884624838656}))
    assert (facts.max_tokens, facts.activation, facts.dimension) == (512, "sigmoid", 1)
    assert max_tokens(bert, {"max_seq_length": 128}, {}) == 128
    assert max_tokens({"max_position_embeddings": 514}, {}, {"model_max_length": 512}) == 512
    identity = read_rank_facts(folder_with(tmp_path, bert, config_sentence_transformers={
        "activation_fn": "torch.nn.modules.linear.Identity"}))
    assert identity.front_parameters == {"max_tokens": "512", "activation": "identity"}


@pytest.mark.parametrize(("config", "message"), [
    ({"architectures": ["BertModel"]}, "ForSequenceClassification"),
    ({"architectures": ["BertForSequenceClassification"], "id2label": {"0": "a", "1": "b"}},
     "several labels"),
])
def test_a_folder_that_is_not_a_one_label_cross_encoder_is_refused(
        tmp_path: Path, config: dict, message: str) -> None:
    with pytest.raises(ExportCheckError, match=message):
        read_rank_facts(folder_with(tmp_path, {**config, "max_position_embeddings": 512}))
