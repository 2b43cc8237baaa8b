"""Tensor names, shapes and model names shared by the configs, the backends and the client.

`tests/unit/test_configs.py` checks every `config.pbtxt` against this module and the
exported graphs, so a rename here without the configs (or the reverse) fails a test.
"""

from __future__ import annotations

EMBED_MODEL = "embed"
TEXT_INPUT = "TEXT"
EMBEDDING_OUTPUT = "EMBEDDING"
EMBEDDING_DIM = 384

ENCODER_INPUTS = ("input_ids", "attention_mask")
# The libtorch backend requires outputs named <name>__<index>.
ENCODER_OUTPUTS = {
    "minilm_onnx": "embedding",
    "minilm_int8": "embedding",
    "minilm_torchscript": "embedding__0",
}
ENCODER_MODELS = tuple(ENCODER_OUTPUTS)

# What served a row: "<model>:<version>:<precision>:<level>", one per row of EMBEDDING.
SERVED_BY_OUTPUT = "SERVED_BY"
PRECISION = {"minilm_onnx": "fp32", "minilm_torchscript": "fp32", "minilm_int8": "int8"}
