"""What a cross-encoder folder says about its model, read from its files alone
(export/text_ranking.py exports it): a Hugging Face `*ForSequenceClassification` folder,
a sentence-transformers CrossEncoder folder among them.

The architecture and labels from `config.json` (one label: a relevance score); the
maximum length as sentence-transformers' CrossEncoder reads it (`max_seq_length` of
`sentence_bert_config.json`, else the tokenizer's `model_max_length` capped by the
model's positions); the activation from `config_sentence_transformers.json` (sigmoid when
it names none, as CrossEncoder applies to one label); the padding token from
`tokenizer.json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from export.errors import ExportCheckError
from export.text_source import read_json, weights_of

# sentence-transformers' activation paths (torch's own modules) -> the front's setting
ACTIVATIONS = {"torch.nn.modules.activation.Sigmoid": "sigmoid",
               "torch.nn.modules.linear.Identity": "identity"}
ACTIVATIONS_DEFAULT = "torch.nn.modules.activation.Sigmoid"  # CrossEncoder's, for one label
NO_LIMIT = 10**6  # a tokenizer_config's model_max_length past this means "none"


@dataclass(frozen=True)
class RankFacts:
    """What a cross-encoder folder says about its model."""

    folder: Path
    weights: Path
    architecture: str
    max_tokens: int
    activation: str  # "sigmoid" or "identity" (core.settings.RankFrontSettings)
    pad_id: int
    dimension: int = 1  # one score per pair

    @property
    def input_shape(self) -> tuple[int, ...]:
        return ()

    @property
    def front_parameters(self) -> dict[str, str]:
        """The front config's values of this model."""
        return {"max_tokens": str(self.max_tokens), "activation": self.activation}

    def settings(self) -> dict[str, Any]:
        return {"architecture": self.architecture, "max_tokens": self.max_tokens,
                "activation": self.activation}


def optional_json(path: Path) -> dict[str, Any]:
    return read_json(path) if path.is_file() else {}


def read_rank_facts(folder: Path) -> RankFacts:
    """The facts of a cross-encoder folder; SourceError or ExportCheckError names what is
    missing or what this family does not serve."""
    weights = weights_of(folder, "a cross-encoder folder")
    config = read_json(folder / "config.json")
    architecture = (config.get("architectures") or [config.get("model_type", "?")])[0]
    if not str(architecture).endswith("ForSequenceClassification"):
        raise ExportCheckError("architecture", architecture,
                               "a *ForSequenceClassification model (a cross-encoder)")
    labels = int(config.get("num_labels") or len(config.get("id2label") or {}) or 1)
    if labels != 1:
        raise ExportCheckError(
            "labels", labels, 1, "a reranker gives one relevance score per pair; a model "
            "with several labels is a pair classifier, which the text_ranking family does "
            "not serve")
    st = optional_json(folder / "config_sentence_transformers.json")
    path = st.get("activation_fn") or ACTIVATIONS_DEFAULT
    if path not in ACTIVATIONS:
        raise ExportCheckError("activation_fn", path, " or ".join(ACTIVATIONS))
    tokenizer = read_json(folder / "tokenizer.json")
    return RankFacts(
        folder=folder, weights=weights, architecture=str(architecture),
        max_tokens=max_tokens(config, optional_json(folder / "sentence_bert_config.json"),
                              optional_json(folder / "tokenizer_config.json")),
        activation=ACTIVATIONS[path],
        pad_id=int((tokenizer.get("padding") or {}).get("pad_id", config.get("pad_token_id", 0)
                                                            or 0)))



def max_tokens(config: dict[str, Any], bert: dict[str, Any], tokenizer: dict[str, Any]) -> int:
    """The length CrossEncoder truncates pairs to: `max_seq_length`, else the tokenizer's
    `model_max_length` capped by the model's positions (a RoBERTa's 514 counts 2 of its
    own, so its tokenizer's 512 stands)."""
    if bert.get("max_seq_length"):
        return int(bert["max_seq_length"])
    positions = int(config.get("max_position_embeddings") or NO_LIMIT)
    declared = int(tokenizer.get("model_max_length") or NO_LIMIT)
    limit = min(declared if declared < NO_LIMIT else positions, positions)
    if limit >= NO_LIMIT:
        raise ExportCheckError("max_tokens", "none declared", "a model_max_length or "
                               "max_position_embeddings")
    return limit
