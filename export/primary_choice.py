"""The formats a front may call normally, and the runner of a served one.

Candidates are the family's formats gated at FP32 fidelity (ONNX, TorchScript, OpenVINO;
not INT8, the degradation fallback): `tmr add --primary` picks one for the reviewed
config. Which one serves on a given host is `tmr tune`'s choice, measured through the
real server (server/tune.py, core/host_profile.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.families import Family
from core.families.catalog import FamilyModel
from core.families.configs import encoder_spec
from core.versions import artifact_file, read_config
from export.errors import ExportRequestError
from python_backends.runners import Runner, artifact_runner


def candidates(fam: Family) -> list[str]:
    """The formats gated at FP32 fidelity: those whose precision class is fp32."""
    return [f.name for f in fam.formats if f.precision == "fp32"]


def served_runner(repository: Path, model: FamilyModel, fmt: str, threads: int,
                  precision: str | None = None) -> Runner:
    """The format's served version in-process, as its backend runs it (at `precision`, by
    default its config's), with its one output named as the family's (TorchScript's
    suffix dropped)."""
    fam, folder = model.family, repository / model.encoder(fmt)
    output = fam.contract.encoder_output.name
    run = artifact_runner(artifact_file(folder), fam.format(fmt).runtime, threads,
                          [t.name for t in fam.contract.encoder_inputs],
                          [output + fam.format(fmt).output_suffix],
                          precision=precision or encoder_spec(read_config(folder)).precision)

    def call(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {output: next(iter(run(feeds).values()))}

    return call


def check_primary(fam: Family, fmt: str) -> None:
    """ExportRequestError unless `fmt` may be a primary: a format of the family gated at
    FP32."""
    if fmt not in candidates(fam):
        raise ExportRequestError(f"--primary {fmt}: the primary must be a format gated at "
                                 f"FP32 fidelity, one of {', '.join(candidates(fam))}")
