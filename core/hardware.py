"""What this host's CPU is, and the inference precision a runtime should use on it (pure
rules over the flags, and one reader of /proc/cpuinfo).

A choice that depends on the processor is made where the model is added and recorded with
the CPU it was made on (export provenance), so a different host can re-check it.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable
from pathlib import Path

# The flags that decide a precision or explain a speed, as /proc/cpuinfo names them.
RELEVANT_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile",
                  "amx_bf16", "amx_int8")
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # native bf16 arithmetic
FP32, BF16 = "fp32", "bf16"  # the project's names (SERVED_BY, configs, provenance)
OPENVINO_NAMES = {FP32: "f32", BF16: "bf16"}  # ... and OpenVINO's INFERENCE_PRECISION_HINT


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The flags of the first processor in a /proc/cpuinfo text."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_model(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def inference_precision(flags: Iterable[str]) -> str:
    """bf16 where the CPU computes it natively (avx512_bf16 or AMX), fp32 otherwise."""
    return BF16 if BF16_FLAGS & set(flags) else FP32


def host_cpu(cpuinfo_path: Path = Path("/proc/cpuinfo")) -> dict[str, object]:
    """This host's CPU model, cores and relevant flags, for provenance and reports."""
    try:
        text = cpuinfo_path.read_text()
    except OSError:
        text = ""
    flags = cpu_flags(text)
    return {"model": cpu_model(text), "cores": os.cpu_count() or 1,
            "flags": [f for f in RELEVANT_FLAGS if f in flags],
            "precision": inference_precision(flags)}


def host_precision() -> str:
    """The inference precision rule applied to this host."""
    return str(host_cpu()["precision"])
