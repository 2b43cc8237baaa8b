"""Python-based `text_embedding` backend: every front model of the text-embedding family
(python_backends/embed.py). A front's config says `backend: "text_embedding"`; its
version folder holds only its tokenizer.json."""

from python_backends.embed import EmbedModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
