"""Python-based `image_classification` backend: every front model of the image family
(python_backends/classify.py). A front's config says `backend: "image_classification"`;
its version folder holds only its labels.txt."""

from python_backends.classify import ClassifyModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
