"""The shared skeleton of every Python-backend model in this project.

A model's `model.py` is a shim that imports its class from here. Subclasses override
`setup()` and `execute_requests()` (filling `self.batch` as they go); parsing the config,
logging, the per-batch structured log line and turning a `ModelError` into a per-request
`TritonError` live here once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from python_backends.errors import ModelError
from python_backends.params import parameter
from python_backends.pb import Log, pb_utils
from python_backends.structured_log import BATCH_LOG_INTERVAL_S, BatchFacts, BatchLog


class BaseModel:
    """Triton's `TritonPythonModel` interface with the boilerplate done once."""

    default_filename = ""

    def initialize(self, args: dict[str, str]) -> None:
        self.config: dict[str, Any] = json.loads(args["model_config"])
        self.name = args["model_name"]
        self.version = args["model_version"]
        self.instance_kind = args.get("model_instance_kind", "CPU")
        self.model_dir = Path(args["model_repository"])
        self.log = Log(f"{self.name}/{self.version}")
        self.batch_log = BatchLog(self.log, self.name, self.version, parameter(
            self.config, "batch_log_interval_s", BATCH_LOG_INTERVAL_S, float))
        self.batch = BatchFacts()
        self.setup(args)

    def setup(self, args: dict[str, str]) -> None:
        """Build heavy state (sessions, tokenizers) once per instance."""

    def artifact_path(self) -> Path:
        """The version folder's artifact: `default_model_filename` or the class default."""
        filename = self.config.get("default_model_filename") or self.default_filename
        return self.model_dir / self.version / filename

    def execute(self, requests: list[Any]) -> list[Any]:
        """`execute_requests`, then the batch's structured log line (when it is due)."""
        began = time.monotonic()
        self.batch = BatchFacts()
        responses = self.execute_requests(requests)
        self.batch_log.emit(requests, responses, self.batch, began, self.degradation_level())
        return responses

    def degradation_level(self) -> int | None:
        """The level the batch was served at (the router knows it; plain models do not)."""
        return None

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        raise NotImplementedError

    def finalize(self) -> None:
        self.log.info("finalized")


def input_array(request: Any, name: str) -> np.ndarray:
    """The named input of a request as a numpy array."""
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


def ok_response(outputs: dict[str, np.ndarray]) -> Any:
    return pb_utils.InferenceResponse(
        output_tensors=[pb_utils.Tensor(name, array) for name, array in outputs.items()]
    )


def error_response(err: ModelError) -> Any:
    """A response carrying `err` with its Triton code (INVALID_ARG -> HTTP 400, ...)."""
    code = getattr(pb_utils.TritonError, err.code, pb_utils.TritonError.INTERNAL)
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err), code))
