"""Python-based replacements for Triton's native `onnxruntime` and `pytorch` backends.

The CPU dev server's wheel has neither native backend, so `backends/<name>/model.py`
loads these. One `config.pbtxt` then serves on both paths: native backends in the GPU
image, these on CPU. A whole dynamic batch runs as one runtime call (concatenate,
run, split), counted in `tmr_backend_runtime_calls_total`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from python_backends.base import BaseModel, error_response, input_array, ok_response
from python_backends.batching import concat_feeds, group_by_shape, split_outputs
from python_backends.errors import ModelError
from python_backends.metrics import Counter
from python_backends.params import flag, parameter, positive_int, tensor_names
from python_backends.runners import RunnerError, artifact_runner
from python_backends.structured_log import BatchFacts


class TensorModel(BaseModel):
    """The shared request loop of the Python-based backends: one runner per instance."""

    threads_parameter = "intra_op_thread_count"  # the native backend's parameter name

    def setup(self, args: dict[str, str]) -> None:
        self.inputs = tensor_names(self.config, "input")
        self.outputs = tensor_names(self.config, "output")
        self.threads = parameter(self.config, self.threads_parameter, 1, positive_int)
        labels = {"model": self.name, "version": self.version}
        self.calls = Counter("tmr_backend_runtime_calls_total",
                             "Runtime (session) calls made by a Python-based backend", labels)
        self.rows = Counter("tmr_backend_runtime_rows_total",
                            "Rows (batch items) passed to runtime calls", labels)
        path = self.artifact_path()
        spinning = parameter(self.config, "allow_spinning", True, flag)
        self.run = artifact_runner(path, self.threads, self.inputs, self.outputs, spinning)
        self.log.info(f"loaded {path} with {self.threads} intra-op thread(s)")

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        feeds = [{name: input_array(r, name) for name in self.inputs} for r in requests]
        self.batch = BatchFacts(
            batch_size=sum(len(next(iter(f.values()))) for f in feeds if f),
            input_bytes=sum(a.nbytes for f in feeds for a in f.values()))
        responses: list[Any] = [None] * len(requests)
        for group in group_by_shape(feeds):
            batch, sizes = concat_feeds([feeds[i] for i in group])
            try:
                parts = split_outputs(self._counted_run(batch, sum(sizes)), sizes)
            except (RunnerError, ValueError) as err:
                failure = error_response(ModelError(f"{type(err).__name__}: {err}"))
                for i in group:
                    responses[i] = failure
                continue
            for i, part in zip(group, parts):
                responses[i] = ok_response(part)
        return responses

    def _counted_run(self, batch: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        out = self.run(batch)
        self.calls.inc()
        self.rows.inc(rows)
        return out


class OnnxRuntimeModel(TensorModel):
    """`backend: "onnxruntime"` on the CPU, through the onnxruntime package."""

    default_filename = "model.onnx"


class TorchScriptModel(TensorModel):
    """`platform: "pytorch_libtorch"` on the CPU, through torch.jit.

    Inputs are passed positionally in config order, which must match the forward()
    arguments (the native backend maps them by name)."""

    default_filename = "model.pt"
    threads_parameter = "INTRA_OP_THREAD_COUNT"
