"""`embed_bare`: tokenizer and onnxruntime in ONE Python model (benchmark fixture).

The baseline the full pipeline is measured against: no BLS hop, no second stub. Its
sessions are set up as the served onnxruntime encoders' are (python_backends/tensor_model.py):
`intra_op_thread_count` threads each, and with `idle_intra_op_thread_count` above that, a
second session that a batch takes when no other instance is running one.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

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
        self.session: Any = onnx_runner(path, threads, spinning=spinning)
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
        """Every encoder's channel is the in-process session, whatever version the router
        pinned (a fixture has one); read when called, as setup makes it after the router's."""
        return {encoder.name: partial(self._in_process, encoder.output)
                for encoder in self.encoders.values()}

    def _in_process(self, output: str, feeds: Mapping[str, np.ndarray],
                    version: int = -1) -> np.ndarray:
        if self.idle_aware is None:
            return self.session(dict(feeds))[output]
        return self.idle_aware(dict(feeds))[0][output]
