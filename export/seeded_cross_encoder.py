"""A cross-encoder folder made from an installed sentence-transformers model, for the
text-ranking family's tests and `make bench`'s rerank row: the model's encoder as a
`BertForSequenceClassification` with one label, its pooler kept and a seeded classification
head, saved by sentence-transformers as a CrossEncoder folder.

No cross-encoder weights can be installed offline here. This one's scores mean nothing:
what it shows is that the served scores equal eager `CrossEncoder.predict` on the same
folder, and what serving one costs. A real reranker (an ms-marco or bge-reranker folder) is
added the same way, with `tmr add NAME --family text_ranking --from FOLDER`.
"""

from __future__ import annotations

import os
from pathlib import Path

HEAD_SEED = 1234
HEAD_STD = 2.0  # logits of a few units: distinct scores to rank, on both sides of 0.5
MAX_LENGTH = 128  # short, so the long-document tests meet it with little text


def seeded_cross_encoder(base: Path, folder: Path) -> Path:
    """The folder at `folder` (built once) from the BERT-family model folder `base`: all its
    layers and its pooler, a seeded head. All its layers: a model trained to mean-pool
    (all-MiniLM-L6-v2) moves its [CLS] state, which the head reads, only in its last
    layer (std 0.20 across inputs there, 0.0006 after layer 3)."""
    if (folder / "config_sentence_transformers.json").is_file():
        return folder
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import AutoTokenizer, BertForSequenceClassification

    from export.quiet import quiet_export

    staging = folder.with_name(folder.name + ".hf")
    torch.manual_seed(HEAD_SEED)
    with quiet_export():
        model = BertForSequenceClassification.from_pretrained(str(base), num_labels=1)
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, HEAD_STD)
        model.classifier.bias.fill_(0.25)
    model.save_pretrained(staging)
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(staging)
    with quiet_export():
        CrossEncoder(str(staging), max_length=MAX_LENGTH, device="cpu").save_pretrained(
            str(folder))
    return folder
