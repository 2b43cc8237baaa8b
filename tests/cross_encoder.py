"""A cross-encoder folder built from real weights, for the text-ranking family's tests:
all-MiniLM-L6-v2's encoder (the shipped model's package) as a
`BertForSequenceClassification` with one label, its pooler kept and a seeded
classification head, saved by sentence-transformers as a CrossEncoder folder. No
cross-encoder weights can be installed offline here; this one's scores mean nothing, so
the tests check that what is served equals eager `CrossEncoder.predict` on the same folder.
"""

from __future__ import annotations

import os
from pathlib import Path

HEAD_SEED = 1234
HEAD_STD = 2.0  # logits of a few units: distinct scores to rank, on both sides of 0.5
MAX_LENGTH = 128  # short, so the long-document tests meet it with little text


def cross_encoder_folder(folder: Path) -> Path:
    """The folder at `folder` (built once): MiniLM's 6 layers and pooler, a seeded head.
    All 6: MiniLM was trained to mean-pool, and its [CLS] state, which the head reads,
    varies with the input only in its last layer (std 0.20 there, 0.0006 after layer 3)."""
    if (folder / "config_sentence_transformers.json").is_file():
        return folder
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import AutoTokenizer, BertForSequenceClassification

    from tests.conftest import MINILM_SOURCE

    staging = folder.with_name(folder.name + ".hf")
    torch.manual_seed(HEAD_SEED)
    model = BertForSequenceClassification.from_pretrained(
        str(MINILM_SOURCE), num_labels=1)
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, HEAD_STD)
        model.classifier.bias.fill_(0.25)
    model.save_pretrained(staging)
    AutoTokenizer.from_pretrained(str(MINILM_SOURCE)).save_pretrained(staging)
    CrossEncoder(str(staging), max_length=MAX_LENGTH, device="cpu").save_pretrained(str(folder))
    return folder
