"""The model folder infinity-emb serves: all-MiniLM-L6-v2's sentence-transformers files
plus `model.onnx`, the bare transformer with `last_hidden_state` as its output.

infinity pools and normalises the hidden states itself (`--pooling-method mean`), and its
own exporter fails on torch 2.13, so this writes the export with the project venv's torch:

    .venv/bin/python -m perf.peers.infinity_model .peers/infinity/model

The folder is built beside the target and renamed into place; an existing folder is kept.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from export.embedder import load_embedder, load_tokenizer, quiet_transformers, source_model_dir

OPSET = 17
INPUT_NAMES = ["input_ids", "attention_mask", "token_type_ids"]
OUTPUT_NAMES = ["last_hidden_state"]
SKIPPED = {"model.safetensors", "README.md", ".gitattributes"}  # not read by infinity
PARITY_ATOL = 1e-4


class BareEncoder(nn.Module):
    """BertModel without pooling: (input_ids, attention_mask, token_type_ids) -> hidden states.

    Embeddings and encoder are called directly with an additive mask, as in
    export.embedder.SentenceEmbedder, so no CPU-only mask helper is traced."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:
        embedded = self.bert.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        keep = attention_mask[:, None, None, :].to(embedded.dtype)
        additive = (1.0 - keep) * torch.finfo(embedded.dtype).min
        return self.bert.encoder(embedded, attention_mask=additive).last_hidden_state


def without_torchvision() -> None:
    """Make transformers skip torchvision, which this export never needs.

    transformers imports torchvision whenever it is installed, and a CUDA torchvision
    beside the CPU torch fails to load ("operator torchvision::nms does not exist")."""
    import transformers.utils as utils
    import transformers.utils.import_utils as import_utils

    for module in (utils, import_utils):
        module.is_torchvision_available = lambda: False


def sample_inputs(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tokenized `texts`, padded to the longest, as the three int64 inputs."""
    encodings = load_tokenizer().encode_batch(texts)
    ids = torch.tensor([e.ids for e in encodings], dtype=torch.int64)
    mask = torch.tensor([e.attention_mask for e in encodings], dtype=torch.int64)
    return ids, mask, torch.zeros_like(ids)


def export_bare(model: BareEncoder, path: Path,
                sample: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
    """One-file ONNX export (TorchScript exporter), dynamic batch and sequence axes."""
    axes = {name: {0: "batch", 1: "sequence"} for name in (*INPUT_NAMES, *OUTPUT_NAMES)}
    with warnings.catch_warnings(), quiet_transformers():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, sample, str(path), input_names=INPUT_NAMES,
                          output_names=OUTPUT_NAMES, dynamic_axes=axes, opset_version=OPSET,
                          do_constant_folding=True, dynamo=False)


def parity(model: BareEncoder, path: Path,
           sample: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> float:
    """Max abs difference between onnxruntime and torch on `sample`'s real tokens."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {name: t.numpy() for name, t in zip(INPUT_NAMES, sample)}
    got = session.run(OUTPUT_NAMES, feeds)[0]
    with torch.inference_mode():
        want = model(*sample).numpy()
    real = sample[1].numpy().astype(bool)
    return float(np.abs(got[real] - want[real]).max())


def build(target: Path) -> Path:
    """Write the folder at `target` unless it already holds a model.onnx."""
    if (target / "model.onnx").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    shutil.copytree(source_model_dir(), work, dirs_exist_ok=True,
                    ignore=lambda _d, names: [n for n in names if n in SKIPPED])
    without_torchvision()
    model = BareEncoder(load_embedder().bert).eval()
    sample = sample_inputs(["a short one", "a somewhat longer sentence to pad the batch with"])
    export_bare(model, work / "model.onnx", sample)
    diff = parity(model, work / "model.onnx", sample)
    if diff > PARITY_ATOL:
        shutil.rmtree(work)
        raise RuntimeError(f"bare export differs from torch by {diff:.2e} (> {PARITY_ATOL})")
    shutil.rmtree(target, ignore_errors=True)
    work.rename(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    print(f"infinity model folder: {build(args.target)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
