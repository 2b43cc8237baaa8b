"""Export: PyTorch models to the repository's formats (ONNX FP32, TorchScript, INT8,
OpenVINO), each version checked against eager PyTorch and gated before it serves; the
families' recipes, warmup data and `tmr add`'s pipeline. Imports core/ and runtime/,
never server/ or python_backends/."""
