"""Triton's `ModelConfig` protobuf (`tritonclient.grpc.model_config_pb2`), without gRPC.

`from tritonclient.grpc import model_config_pb2` runs `tritonclient.grpc`'s `__init__`,
which imports grpc and its OpenSSL: about 19 MB of resident memory in every process,
every Python stub included, for a module that needs only protobuf. This loads the one
file under its own name, so a process that imports `tritonclient.grpc` later (the SDK's
gRPC client, the admin client) gets this very module, and its message types are one.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

MODULE = "tritonclient.grpc.model_config_pb2"


def _load() -> ModuleType:
    if MODULE in sys.modules:
        return sys.modules[MODULE]
    package = importlib.util.find_spec("tritonclient")
    if package is None or not package.submodule_search_locations:
        raise ImportError("tritonclient is not installed: it holds Triton's model_config_pb2")
    path = Path(package.submodule_search_locations[0]) / "grpc" / "model_config_pb2.py"
    spec = importlib.util.spec_from_file_location(MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[MODULE]
        raise
    return module


mc = _load()
