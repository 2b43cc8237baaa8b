"""Python-based `text_ranking` backend: every front model of the text-ranking family
(python_backends/rerank.py). A front's config says `backend: "text_ranking"`; its version
folder holds only its tokenizer.json."""

from python_backends.rerank import RerankModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
