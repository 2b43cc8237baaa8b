"""Python-based `openvino` backend for the CPU dev server (see python_backends.tensor_model)."""

from python_backends.tensor_model import OpenVinoModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
