"""The formats a front may call normally.

Candidates are the family's formats gated at FP32 fidelity (ONNX, TorchScript, OpenVINO;
not INT8, the degradation fallback): `tmr add --primary` picks one for the reviewed
config. Which one serves on a given host is `tmr tune`'s choice, measured through the
real server (server/tune.py, core/host_profile.py).
"""

from __future__ import annotations

from core.families import Family
from export.errors import ExportRequestError


def candidates(fam: Family) -> list[str]:
    """The formats gated at FP32 fidelity: those whose precision class is fp32."""
    return [f.name for f in fam.formats if f.precision == "fp32"]


def check_primary(fam: Family, fmt: str) -> None:
    """ExportRequestError unless `fmt` may be a primary: a format of the family gated at
    FP32."""
    if fmt not in candidates(fam):
        raise ExportRequestError(f"--primary {fmt}: the primary must be a format gated at "
                                 f"FP32 fidelity, one of {', '.join(candidates(fam))}")
