"""`stub_env`: reports which Python environment the Triton Python stub really runs in.

DESIGN.md: the 2.51 stub breaks with numpy 2, and which site-packages it imports
depends on how the server was started. This model lets a test (and an operator) ask.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

from python_backends.base import BaseModel, ok_response


def environment_info() -> dict[str, Any]:
    """The interpreter, numpy and search path seen by this process."""
    return {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "prefix": sys.prefix,
        "numpy_version": np.__version__,
        "numpy_path": np.__file__,
        "sys_path": sys.path[:8],
    }


class StubEnvModel(BaseModel):
    """Any request gets INFO: the JSON of `environment_info()`."""

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        info = np.array([json.dumps(environment_info()).encode()], dtype=np.object_)
        return [ok_response({"INFO": info}) for _ in requests]
