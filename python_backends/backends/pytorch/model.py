"""Python-based `pytorch` backend for the CPU dev server (see python_backends.tensor_model)."""

from python_backends.tensor_model import TorchScriptModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
