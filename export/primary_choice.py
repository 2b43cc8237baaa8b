"""The formats a front may call normally, and timing them in-process on this host.

Candidates are the family's formats gated at FP32 fidelity (ONNX, TorchScript, OpenVINO;
not INT8, the degradation fallback): `tmr add --primary` picks one for the reviewed
config. Which one serves on a given host is `tmr tune`'s choice, measured through the
real server (perf/tune.py, core/host_profile.py). `measure` times runners in-process,
interleaved round by round (perf/runtimes.py's table uses it).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from core.families import Family
from core.families.catalog import FamilyModel
from core.families.configs import encoder_spec
from core.versions import artifact_file, read_config
from python_backends.runners import Runner, artifact_runner

CELL_SECONDS = 0.4  # time per format, batch and round
ROUNDS = 3
WARMUP_CALLS = 3


def candidates(fam: Family) -> list[str]:
    """The formats gated at FP32 fidelity: those whose precision class is fp32."""
    return [f.name for f in fam.formats if f.precision == "fp32"]


def sized(feeds: Mapping[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """`feeds` cut or repeated to `rows` rows."""
    have = len(next(iter(feeds.values())))
    reps = -(-rows // have)
    return {k: np.ascontiguousarray(np.concatenate([v] * reps)[:rows]) for k, v in feeds.items()}


def measure(runs: Mapping[str, Runner], feeds: Mapping[str, np.ndarray],
            batches: Sequence[int], rounds: int = ROUNDS,
            cell_s: float = CELL_SECONDS) -> dict[str, dict[int, float]]:
    """rows/s of each runner at each batch: the median call time over interleaved rounds."""
    times: dict[tuple[str, int], list[float]] = {(f, b): [] for f in runs for b in batches}
    inputs = {b: sized(feeds, b) for b in batches}
    for run in runs.values():  # warm up: first calls allocate, compile and (TorchScript's
        for b in batches:      # profiling executor) optimise
            for _ in range(WARMUP_CALLS):
                run(inputs[b])
    for _ in range(rounds):
        for b in batches:
            for name, run in runs.items():
                end = time.perf_counter() + cell_s
                while True:
                    began = time.perf_counter()
                    run(inputs[b])
                    times[name, b].append(time.perf_counter() - began)
                    if time.perf_counter() > end:
                        break
    return {f: {b: b / float(np.median(times[f, b])) for b in batches} for f in runs}


def served_runner(repository: Path, model: FamilyModel, fmt: str, threads: int,
                  precision: str | None = None) -> Runner:
    """The format's served version in-process, as its backend runs it (at `precision`, by
    default its config's), with its one output named as the family's (TorchScript's
    suffix dropped)."""
    fam, folder = model.family, repository / model.encoder(fmt)
    output = fam.encoder_output.name
    run = artifact_runner(artifact_file(folder), fam.format(fmt).runtime, threads,
                          [t.name for t in fam.encoder_inputs],
                          [output + fam.format(fmt).output_suffix],
                          precision=precision or encoder_spec(read_config(folder)).precision)

    def call(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {output: next(iter(run(feeds).values()))}

    return call


def check_primary(fam: Family, fmt: str) -> None:
    """ValueError unless `fmt` may be a primary: a format of the family gated at FP32."""
    if fmt not in candidates(fam):
        raise ValueError(f"--primary {fmt}: the primary must be a format gated at FP32 "
                         f"fidelity, one of {', '.join(candidates(fam))}")
