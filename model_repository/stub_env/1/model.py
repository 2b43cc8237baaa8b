"""stub_env: see python_backends/stub_env.py."""

from python_backends.stub_env import StubEnvModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
