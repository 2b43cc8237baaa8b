"""What a sentence-transformers folder says about its model, read from its files alone
(export/text_embedding.py exports it; perf's peers load it the same way).

The architecture and hidden size from `config.json`, the pooling (mean, CLS or max) from
`1_Pooling/config.json`, the normalisation from a Normalize module in `modules.json`, the
maximum length from `sentence_bert_config.json`, the padding token from `tokenizer.json`,
the prompts and Matryoshka sizes from `config_sentence_transformers.json`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.settings import NO_PROMPTS, Prompts
from export.errors import ExportCheckError
from export.sources import SourceError

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls",
                 "pooling_mode_max_tokens": "max"}


@dataclass(frozen=True)
class ModelFacts:
    """What a sentence-transformers folder says about its model."""

    folder: Path
    weights: Path
    architecture: str
    dimension: int
    max_tokens: int
    pooling: str
    normalize: bool
    pad_id: int
    # sentence-transformers' named prompts and default (config_sentence_transformers.json)
    prompts: Prompts = NO_PROMPTS
    default_prompt_name: str = ""
    matryoshka_dims: tuple[int, ...] = ()  # sizes it was trained to be cut to, if it says

    @property
    def front_parameters(self) -> dict[str, str]:
        """The front config's values of this model; prompts and Matryoshka sizes only where
        the model has them (a model without them has none)."""
        values = {"max_tokens": str(self.max_tokens), "normalize": str(self.normalize).lower()}
        if self.prompts.items:
            values["prompts"] = str(self.prompts)
        if self.default_prompt_name:
            values["default_prompt_name"] = self.default_prompt_name
        if self.matryoshka_dims:
            values["matryoshka_dims"] = ",".join(map(str, self.matryoshka_dims))
        return values

    @property
    def input_shape(self) -> tuple[int, ...]:
        return ()  # a text model's input is token ids of any length

    def settings(self) -> dict[str, Any]:
        return {"architecture": self.architecture, "pooling": self.pooling,
                "normalize": self.normalize, "max_tokens": self.max_tokens}


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ExportCheckError(f"reading {path.name}", str(err), "a readable JSON file") from None


def weights_of(folder: Path, kind: str) -> Path:
    """The weights file of a Hugging Face model folder; SourceError naming what a folder of
    `kind` holds when its config, tokenizer or weights are missing."""
    weights = next((folder / f for f in WEIGHT_FILES if (folder / f).is_file()), None)
    for required, present in (("config.json", (folder / "config.json").is_file()),
                              ("tokenizer.json", (folder / "tokenizer.json").is_file()),
                              (" or ".join(WEIGHT_FILES), weights is not None)):
        if not present:
            raise SourceError(f"{folder}: no {required}; {kind} holds config.json, "
                              "tokenizer.json and its weights")
    assert weights is not None
    return weights


def read_facts(folder: Path) -> ModelFacts:
    """The model facts of a sentence-transformers folder; ExportCheckError names what is
    missing or unusable."""
    weights = weights_of(folder, "a sentence-transformers model folder")
    config = read_json(folder / "config.json")
    pooling_file = next(iter(sorted(folder.glob("*Pooling/config.json"))), None)
    pooling = read_json(pooling_file) if pooling_file else {"pooling_mode_mean_tokens": True}
    modes = [mode for key, mode in POOLING_MODES.items() if pooling.get(key)]
    if len(modes) != 1:
        raise ExportCheckError("pooling", pooling, "exactly one of mean, CLS or max tokens")
    modules = read_json(folder / "modules.json") if (folder / "modules.json").is_file() else []
    bert = (read_json(folder / "sentence_bert_config.json")
            if (folder / "sentence_bert_config.json").is_file() else {})
    tokenizer = read_json(folder / "tokenizer.json")
    st = (read_json(folder / "config_sentence_transformers.json")
          if (folder / "config_sentence_transformers.json").is_file() else {})
    prompts, default_prompt = read_prompts(st)
    dimension = int(pooling.get("word_embedding_dimension") or config["hidden_size"])
    return ModelFacts(
        folder=folder, weights=weights,
        architecture=(config.get("architectures") or [config.get("model_type", "?")])[0],
        dimension=dimension,
        max_tokens=int(bert.get("max_seq_length") or config["max_position_embeddings"] - 2),
        pooling=modes[0],
        normalize=any(str(m.get("type", "")).endswith("Normalize") for m in modules),
        pad_id=int((tokenizer.get("padding") or {}).get("pad_id", config.get("pad_token_id", 0)
                                                            or 0)),
        prompts=prompts, default_prompt_name=default_prompt,
        matryoshka_dims=matryoshka_of(st, dimension))


def read_prompts(st: dict[str, Any]) -> tuple[Prompts, str]:
    """The named prompts and the default one of config_sentence_transformers.json."""
    try:
        prompts = Prompts.parse(json.dumps(st.get("prompts") or {}))
    except ValueError as err:
        raise ExportCheckError("prompts", str(err), "an object of name -> text") from None
    default = st.get("default_prompt_name") or ""
    if default and prompts.get(default) is None:
        raise ExportCheckError("default_prompt_name", default,
                               f"one of its prompts ({', '.join(prompts.names) or 'none'})")
    return prompts, default


def matryoshka_of(st: dict[str, Any], dimension: int) -> tuple[int, ...]:
    """The smaller sizes a folder declares its embeddings trained for (`matryoshka_dims`
    in config_sentence_transformers.json, where a model states it); none otherwise."""
    sizes = st.get("matryoshka_dims") or st.get("matryoshka_dimensions") or []
    return tuple(sorted({int(s) for s in sizes if 0 < int(s) < dimension}, reverse=True))
