"""health: see python_backends/health.py."""

from python_backends.health import HealthModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
