"""Python-based `tabular_classification` backend: every front model of the tabular family."""

from python_backends.tabular_classification import TabularModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
