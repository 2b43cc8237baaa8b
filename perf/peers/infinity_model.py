"""The model folder infinity-emb serves: the text model's sentence-transformers folder plus
`model.onnx`, the bare transformer (`last_hidden_state`; infinity pools and normalises itself).
Its own exporter fails on torch 2.13, so this exports with the project venv's torch, beside
the target, renamed into place (an existing folder is kept):

    .venv/bin/python -m perf.peers.infinity_model .peers/infinity/model
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from core.families.configs import encoder_spec
from core.paths import DEFAULT_REPOSITORY
from core.versions import read_config
from export.quiet import quiet_export
from export.sources import resolve
from export.text_embedding import ModelFacts, encode, load_embedder, load_tokenizer, read_facts
from perf.subjects import text_model

OPSET = 17
INPUT_NAMES = ["input_ids", "attention_mask", "token_type_ids"]
OUTPUT_NAMES = ["last_hidden_state"]
SKIPPED = {"model.safetensors", "README.md", ".gitattributes"}  # not read by infinity
PARITY_ATOL = 1e-4
Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # ids, mask, token types


class BareEncoder(nn.Module):
    """The transformer without pooling: (ids, mask, token types) -> hidden states, with an
    additive mask as in export.text_embedding.SentenceEmbedder (no CPU-only helper traced)."""

    def __init__(self, transformer: nn.Module) -> None:
        super().__init__()
        self.transformer = transformer

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:
        embedded = self.transformer.embeddings(input_ids=input_ids,
                                               token_type_ids=token_type_ids)
        keep = attention_mask[:, None, None, :].to(embedded.dtype)
        additive = (1.0 - keep) * torch.finfo(embedded.dtype).min
        return self.transformer.encoder(embedded, attention_mask=additive).last_hidden_state


def source_folder(repository: Path = DEFAULT_REPOSITORY) -> Path:
    """The sentence-transformers folder of the repository's text model: the `source` its
    primary encoder is exported from."""
    model = text_model(repository)
    spec = encoder_spec(read_config(repository / model.encoder(model.primary)))
    return resolve(spec.source, repository)


def without_torchvision() -> None:
    """Make transformers skip torchvision, which this export never needs: a CUDA torchvision
    beside the CPU torch fails to load ("operator torchvision::nms does not exist")."""
    import transformers.utils as utils
    import transformers.utils.import_utils as import_utils

    for module in (utils, import_utils):
        module.is_torchvision_available = lambda: False


def sample_inputs(facts: ModelFacts, texts: list[str]) -> Inputs:
    """Tokenized `texts`, padded to the longest, as the three int64 inputs."""
    ids, mask = encode(load_tokenizer(facts), texts, facts.pad_id)
    input_ids = torch.from_numpy(ids)
    return input_ids, torch.from_numpy(mask), torch.zeros_like(input_ids)


def export_bare(model: BareEncoder, path: Path, sample: Inputs) -> None:
    """One-file ONNX export (TorchScript exporter), dynamic batch and sequence axes."""
    axes = {name: {0: "batch", 1: "sequence"} for name in (*INPUT_NAMES, *OUTPUT_NAMES)}
    with quiet_export():
        torch.onnx.export(model, sample, str(path), input_names=INPUT_NAMES,
                          output_names=OUTPUT_NAMES, dynamic_axes=axes, opset_version=OPSET,
                          do_constant_folding=True, dynamo=False)


def parity(model: BareEncoder, path: Path, sample: Inputs) -> float:
    """Max abs difference between onnxruntime and torch on `sample`'s real tokens."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {name: t.numpy() for name, t in zip(INPUT_NAMES, sample)}
    got = session.run(OUTPUT_NAMES, feeds)[0]
    with torch.inference_mode():
        want = model(*sample).numpy()
    real = sample[1].numpy().astype(bool)
    return float(np.abs(got[real] - want[real]).max())


def build(target: Path, repository: Path = DEFAULT_REPOSITORY) -> Path:
    """Write the folder at `target` unless it already holds a model.onnx."""
    if (target / "model.onnx").exists():
        return target
    facts = read_facts(source_folder(repository))
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    shutil.copytree(facts.folder, work, dirs_exist_ok=True,
                    ignore=lambda _d, names: [n for n in names if n in SKIPPED])
    without_torchvision()
    model = BareEncoder(load_embedder(facts).transformer).eval()
    sample = sample_inputs(facts, ["a short one",
                                   "a somewhat longer sentence to pad the batch with"])
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
