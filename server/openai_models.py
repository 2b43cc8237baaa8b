"""The models the OpenAI-compatible routes serve, for the front door's njs (openai.js).

    python -m server.openai_models [--repository DIR] > server/nginx/openai_models.json

Every text-embedding model of the repository (/v1/embeddings, /v1/tokenize,
/v1/similarity), every image-classification one (/v1/classify) and every text-ranking one
(/v1/rerank, /v2/rerank: rerank.js), under its name (`tmr add NAME`), its front model's
name and the names its front config lists in the `openai_names` parameter
(comma-separated, e.g. the Hugging Face id). The CPU dev server writes the table of the
repository it serves into the front door's runtime folder; compose and Kubernetes mount
the committed `server/nginx/openai_models.json`, which a unit test keeps equal to the
repository's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tmr_client.contract import in_flight
from tmr_client.core import request_rows

from core.families import IMAGE_CLASSIFICATION, TEXT_EMBEDDING, TEXT_RANKING
from core.families.catalog import FamilyModel, catalog
from core.families.configs import parameters_of
from core.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from core.settings import TextFrontSettings, chunk_request_rows, chunks_by_default
from core.versions import read_config

COMMITTED = PROJECT_ROOT / "server" / "nginx" / "openai_models.json"
CREATED = 1_764_460_800  # 2025-11-30: what /v1/models reports as `created` (no real date)


def common_row(model: FamilyModel, config: Any, body: dict[str, Any]) -> dict[str, Any]:
    """What every family's row has: {"id", "names", "front", "lane", "max_batch",
    "request_rows", "in_flight"}: `request_rows` is the rows of one request to the front
    (its preferred batch, else max_batch_size), as the SDK cuts a bulk call."""
    extra = [n.strip() for n in parameters_of(config).get("openai_names", "").split(",")]
    return {"id": model.base,
            "names": list(dict.fromkeys([model.base, model.front, *filter(None, extra)])),
            "front": model.front,
            "lane": model.lane,  # where x-priority 1 goes (core/families/lanes.py)
            "max_batch": int(config.max_batch_size),
            "request_rows": request_rows(config),
            # chunks of one request in flight at once: one per instance or worker
            "in_flight": in_flight(body)}


def text_limits(body: dict[str, Any]) -> dict[str, Any]:
    """A text front's length rules: {"max_tokens", "chunk_rows" (the rows of one request
    whose texts are chunked), "chunks_by_default"}."""
    return {"max_tokens": TextFrontSettings.from_parameters(body).max_tokens,
            "chunk_rows": chunk_request_rows(body),
            "chunks_by_default": chunks_by_default(body)}


def embedding_row(common: dict[str, Any], config: Any, body: dict[str, Any]) -> dict[str, Any]:
    """A text-embedding model: its size ("dimensions"), "sizes" (its own first, then its
    Matryoshka sizes), "prompts" (names), "default_prompt_name" and its text limits."""
    settings = TextFrontSettings.from_parameters(body)
    dimensions = int(config.output[0].dims[-1])
    return {**common, "dimensions": dimensions,
            "sizes": [dimensions, *settings.matryoshka_dims],
            "prompts": settings.prompts.names,
            "default_prompt_name": settings.default_prompt_name,
            **text_limits(body)}


def reranker_row(common: dict[str, Any], config: Any, body: dict[str, Any]) -> dict[str, Any]:
    """A text-ranking model: its text limits (`max_tokens` of a query and document pair)."""
    return {**common, **text_limits(body)}


Row = Callable[[dict[str, Any], Any, dict[str, Any]], dict[str, Any]]
# Each family the routes serve: the table's list of its models, and how a row is made.
LISTS: dict[str, tuple[str, Row]] = {
    TEXT_EMBEDDING.name: ("models", embedding_row),
    IMAGE_CLASSIFICATION.name: ("classifiers", lambda common, config, body: common),
    TEXT_RANKING.name: ("rerankers", reranker_row),
}


def openai_models(repository: Path = DEFAULT_REPOSITORY) -> dict[str, Any]:
    """{"created", "models": [text-embedding models], "classifiers": [image models],
    "rerankers": [text-ranking models]}, each row made by its family's row function."""
    table: dict[str, Any] = {"created": CREATED, **{key: [] for key, _ in LISTS.values()}}
    for model in catalog(repository):
        if not model.front or model.family.name not in LISTS:
            continue
        config = read_config(repository / model.front)
        body = as_json(config)
        key, row = LISTS[model.family.name]
        table[key].append(row(common_row(model, config, body), config, body))
    return table


def as_json(config: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def render(repository: Path = DEFAULT_REPOSITORY) -> str:
    return json.dumps(openai_models(repository), indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server.openai_models",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    args = parser.parse_args(argv)
    sys.stdout.write(render(args.repository))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
