"""Warming every instance at load (Triton's `model_warmup`), described once per family (pure).

Triton 2.51 runs a config's `model_warmup` samples on each instance right after the
instance is initialised and before the model reports READY (core r24.10,
`TritonModelInstance::WarmUp`): a sample of batch size N is N requests of one row each,
executed together, `count` times (at least once); a variable-size dim must be given; an
`input_data_file` is read from the model folder's `warmup/` folder (for a BYTES input,
Triton's serialized elements: each one's 4-byte little-endian length, then its bytes). A
sample that fails fails the instance, and with it the load.

So the samples are real inputs, never random ones (the text encoders refuse token ids past
the vocabulary, runtime/input_limits.py): a typical text, its token ids, a real
image and its preprocessed pixels, written by `export/warmup.py` into the front model's
`warmup/` folder, which its encoders' `warmup/` folders link to. Each file is named after
the input it feeds.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.model_config import mc

if TYPE_CHECKING:  # spec.py imports this module: a Family holds its WarmupPlan
    from core.families.spec import Tensor

WARMUP_FOLDER = "warmup"  # Triton's folder for input_data_file, in the model folder
VARIABLE = -1  # a variable-size dim in a config


@dataclass(frozen=True)
class WarmupPlan:
    """How a family's models are warmed: the batch sizes of a front's and of an encoder's
    samples (what a lone request sends, and the batch an execution takes under load), how
    often each runs, and the length a variable-size dim takes (a text's tokens)."""

    front_batches: tuple[int, ...]
    encoder_batches: tuple[int, ...]
    encoder_runs: int = 1  # Triton's `count`: TorchScript's profiling executor needs two
    tokens: int = 0  # the length of every -1 dim of a sample; 0: the family has none

    def dims(self, tensor: Tensor, sizes: Mapping[str, int]) -> list[int]:
        """The tensor's dims in a sample: its own sizes, a variable dim as `tokens`."""
        dims = [self.tokens if d == VARIABLE else d for d in tensor.resolved(sizes)]
        if any(d <= 0 for d in dims):
            raise ValueError(f"{tensor.name}: no warmup length for its variable dims {dims}")
        return dims


def samples(plan: WarmupPlan, inputs: Iterable[Tensor], sizes: Mapping[str, int],
            batches: Iterable[int], runs: int = 1) -> list[dict[str, Any]]:
    """`model_warmup` entries (Triton's JSON form): one sample per batch size, every input
    from its file in `warmup/`."""
    feeds = {t.name: {"data_type": t.data_type, "dims": plan.dims(t, sizes),
                      "input_data_file": t.name} for t in inputs}
    return [{"name": f"real_batch_{n}", "batch_size": n, "count": runs, "inputs": feeds}
            for n in batches]


def executions(config: Mapping[str, Any]) -> int:
    """How many executions Triton runs on each instance to warm it, from the config's JSON
    form (what a Python model's `initialize` gets): one per run of each sample."""
    return sum(max(int(s.get("count", 0)), 1) for s in config.get("model_warmup", [])
               if int(s.get("batch_size", 0)) > 0)


def data_files(config: mc.ModelConfig) -> set[str]:
    """The files in `warmup/` a config's samples read."""
    return {i.input_data_file for s in config.model_warmup for i in s.inputs.values()
            if i.input_data_file}


def serialized(items: Iterable[bytes]) -> bytes:
    """BYTES elements as Triton serializes them (a warmup file of a BYTES input)."""
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def elements(data: bytes) -> list[bytes]:
    """The BYTES elements of a serialized warmup file: the inverse of `serialized`."""
    items, at = [], 0
    while at < len(data):
        if at + 4 > len(data):
            raise ValueError(f"a truncated length at byte {at} of {len(data)}")
        (size,) = struct.unpack_from("<I", data, at)
        if at + 4 + size > len(data):
            raise ValueError(f"an element of {size} bytes at byte {at} of {len(data)}")
        items.append(data[at + 4:at + 4 + size])
        at += 4 + size
    return items


def without_warmup(config: mc.ModelConfig) -> None:
    """A config change (core.config_edit.Change): no warmup samples (the cold baseline)."""
    config.ClearField("model_warmup")
