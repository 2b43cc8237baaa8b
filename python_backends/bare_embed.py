"""`embed_bare`: tokenizer and onnxruntime in ONE Python model (benchmark fixture).

The baseline the full pipeline is measured against: no BLS hop, no second stub.
"""

from __future__ import annotations

import numpy as np

from python_backends.embed import EmbedModel
from python_backends.errors import ModelError
from python_backends.params import parameter, positive_int
from python_backends.router import Encoder
from python_backends.runners import onnx_runner


class BareEmbedModel(EmbedModel):
    """EmbedModel whose encoder call is an in-process onnxruntime session."""

    def setup(self, args: dict[str, str]) -> None:
        super().setup(args)
        threads = parameter(self.config, "intra_op_thread_count", 1, positive_int)
        path = parameter(self.config, "onnx_path", "", str)
        if not path:
            raise ModelError("embed_bare needs the parameter onnx_path")
        self.session = onnx_runner(path, threads)

    def call_encoder(self, encoder: Encoder, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return self.session(feeds)[encoder.output]
