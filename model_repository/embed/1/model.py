"""embed: see python_backends/embed.py."""

from python_backends.embed import EmbedModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
