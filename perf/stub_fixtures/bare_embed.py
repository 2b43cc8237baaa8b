"""`embed_bare`: tokenizer and onnxruntime in ONE Python model (benchmark fixture).

The baseline the full pipeline is measured against: no BLS hop, no second stub. Its sessions
are the served onnxruntime encoders' (python_backends/tensor_model.py): `intra_op_thread_count`
threads, and a second for a lone batch where `idle_intra_op_thread_count` is more.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from core.params import IDLE_THREADS_PARAMETER, ORT_THREADS_PARAMETER, parameter, positive_int
from core.settings import ENCODER_THREADS, BackendSettings
from python_backends.busy_peers import BusyPeers, IdleAwareRunner, peers_folder
from python_backends.channels import Channel
from python_backends.embed import EmbedModel
from runtime.errors import ModelError
from runtime.runners import onnx_runner


class BareEmbedModel(EmbedModel):
    """EmbedModel whose encoder channel is an in-process onnxruntime session, not BLS."""

    idle_aware: IdleAwareRunner | None = None

    def setup(self, args: dict[str, str]) -> None:
        super().setup(args)
        threads = parameter(self.config, ORT_THREADS_PARAMETER, ENCODER_THREADS, positive_int)
        idle = parameter(self.config, IDLE_THREADS_PARAMETER, threads, positive_int)
        spinning = BackendSettings.from_parameters(self.config).allow_spinning
        path = parameter(self.config, "onnx_path", "", str)
        if not path:
            raise ModelError("embed_bare needs the parameter onnx_path")
        self.session = onnx_runner(path, threads, spinning=spinning)
        if idle > threads:
            self.idle_aware = IdleAwareRunner(
                self.session, onnx_runner(path, idle, spinning=False),
                BusyPeers(peers_folder(self.name, self.version),
                          args.get("model_instance_name", "0")))

    def finalize(self) -> None:
        if self.idle_aware is not None:
            self.idle_aware.close()
        super().finalize()

    def _channels(self) -> dict[str, Channel]:
        """The in-process session for every encoder and version (a fixture has one)."""
        return {e.name: partial(self._in_process, e.output) for e in self.encoders.values()}

    def _in_process(self, output: str, feeds: dict, version: int = -1) -> np.ndarray:
        run = self.idle_aware
        return (self.session(feeds) if run is None else run(feeds)[0])[output]
