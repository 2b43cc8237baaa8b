"""`tmr embed`: embed texts through a running server and print a short summary."""

from __future__ import annotations

import argparse
import sys

from client.core import default_url
from client.errors import TritonClientError
from client.sync import EmbedClient


def embed_command(args: argparse.Namespace) -> int:
    url = args.url or default_url(args.protocol)
    try:
        with EmbedClient(url, protocol=args.protocol, model=args.model) as client:
            result = client.embed_with_info(args.texts, priority=args.priority,
                                            timeout_ms=args.timeout_ms)
    except TritonClientError as err:
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    versions = ",".join(sorted(set(result.model_versions)))
    print(f"{result.model_name} v{versions} over {args.protocol} ({url})")
    for text, vector in zip(args.texts, result.embeddings):
        norm = float((vector**2).sum() ** 0.5)
        head = " ".join(f"{v:+.4f}" for v in vector[:5])
        print(f"  norm={norm:.4f} dim={vector.shape[0]} [{head} ...]  {text[:60]!r}")
    return 0
