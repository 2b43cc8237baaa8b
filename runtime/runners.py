"""Running an exported artifact in-process: one way for the CPU backends, export and gate.

A runner takes named input arrays and returns named output arrays. ONNX artifacts run in
an onnxruntime CPU session (the session options of the served encoders); TorchScript
artifacts through torch.jit with inputs passed positionally in the given order (Triton's
libtorch backend maps them by the forward()'s argument names, which export checks); the
`openvino` format's ONNX file through OpenVINO's CPU plugin at the config's precision.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.hardware import FP32, OPENVINO_NAMES

Runner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


class RunnerError(RuntimeError):
    """The runtime refused the inputs or failed while running them."""


def onnx_session(path: str | Path, threads: int, spinning: bool = True) -> Any:
    """A CPU onnxruntime session with `threads` intra-op threads and no inter-op pool;
    `spinning` False stops idle intra-op threads from busy-waiting for the next op."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def shrinking_run_options() -> Any:
    """Run options that hand the arena's growth back after each call.

    onnxruntime's CPU arena grows to the largest call a session has run and keeps it: a
    session that once ran 64 rows x 256 tokens of MiniLM held 500 MB more for good, in
    every process that runs it. With shrinkage on, the memory past the arena's first
    region is freed after each call; measured in-process, 2 threads, the same session's
    speed within the noise at 1x16 to 16x64 tokens and 1.04-1.18x slower at 64x256, where
    a session without an arena was 1.7-2.1x slower (docs/benchmarks.md, memory)."""
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


def onnx_runner(path: str | Path, threads: int, outputs: Sequence[str] | None = None,
                spinning: bool = True) -> Runner:
    session = onnx_session(path, threads, spinning)
    names = list(outputs or [o.name for o in session.get_outputs()])
    options = shrinking_run_options()

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            values = session.run(names, feeds, options)
        except Exception as err:  # onnxruntime raises its own non-standard exception types
            raise RunnerError(str(err)) from err
        return dict(zip(names, values))

    return run


def torchscript_runner(path: str | Path, threads: int, inputs: Sequence[str],
                       outputs: Sequence[str]) -> Runner:
    import torch

    torch.set_num_threads(threads)
    module = torch.jit.load(str(path), map_location="cpu").eval()

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        args = [torch.from_numpy(np.ascontiguousarray(feeds[name])) for name in inputs]
        try:
            with torch.inference_mode():
                result = module(*args)
        except RuntimeError as err:
            raise RunnerError(str(err)) from err
        values = result if isinstance(result, (tuple, list)) else (result,)
        return {name: v.numpy() for name, v in zip(outputs, values)}

    return run


def openvino_runner(path: str | Path, threads: int, outputs: Sequence[str] | None = None,
                    precision: str = FP32, streams: str = "1",
                    hint: str = "LATENCY") -> Runner:
    """One OpenVINO CPU infer request: `threads` inference threads in `streams` streams
    (one dynamic batch at a time, as Triton gives an instance), at `precision`."""
    import openvino as ov

    core = ov.Core()
    # No CPU pinning: each Triton instance is a process of its own, and OpenVINO pins its
    # threads from core 0 in every one of them, so two instances shared one core (served
    # throughput at c16 measured 0.6x onnxruntime's with pinning, docs/serving.md).
    compiled = core.compile_model(core.read_model(str(path)), "CPU", {
        "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": streams, "PERFORMANCE_HINT": hint,
        "INFERENCE_PRECISION_HINT": OPENVINO_NAMES[precision], "ENABLE_CPU_PINNING": False})
    # One infer request per calling thread: a request is not safe to share, and a front's
    # workers (python_backends/workers.py) call one compiled model, one copy of the
    # weights, at once; another request costs its tensors only.
    requests = threading.local()
    names = list(outputs or [o.get_any_name() for o in compiled.outputs])
    ports = [compiled.output(name) for name in names]
    spikes = SpikeWatch()

    busy = [0]  # infer requests running: memory is released only with none (it refuses)
    lock = threading.Lock()

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        request = getattr(requests, "value", None)
        if request is None:
            request = requests.value = compiled.create_infer_request()
        with lock:
            busy[0] += 1
        try:
            result = request.infer(feeds)
            answer = {name: np.array(result[port]) for name, port in zip(names, ports)}
        except Exception as err:  # OpenVINO raises RuntimeError and its own types
            raise RunnerError(str(err)) from err
        finally:
            with lock:
                busy[0] -= 1
        with lock:
            if spikes.spiked(sum(array.size for array in feeds.values())) and not busy[0]:
                try:
                    compiled.release_memory()
                except Exception as err:
                    raise RunnerError(str(err)) from err
        return answer

    return run


class SpikeWatch:
    """Whether a call was much larger than the calls before it (an EMA of their sizes).

    OpenVINO's CPU plugin keeps the intermediate memory of the largest call it has run:
    MiniLM at bf16 held 300 MB more for good after one call of 64 rows x 256 tokens.
    `CompiledModel.release_memory()` gives it back, but after every call it cost 5-11% on
    batches of 8-32 rows (measured in-process, 2 threads); so it runs only after a call
    over `factor` times the usual size, and typical traffic keeps its memory warm."""

    def __init__(self, factor: float = 2.0, alpha: float = 0.1) -> None:
        self.factor, self.alpha = factor, alpha
        self.usual: float | None = None

    def spiked(self, size: float) -> bool:
        spike = self.usual is not None and size > self.factor * self.usual
        self.usual = size if self.usual is None else (
            self.alpha * size + (1 - self.alpha) * self.usual)
        return spike


def artifact_runner(path: Path, runtime: str, threads: int, inputs: Sequence[str],
                    outputs: Sequence[str], spinning: bool = True,
                    precision: str = FP32) -> Runner:
    """The runner for an artifact on `runtime` (core.families.spec.Format.runtime:
    onnxruntime, openvino or pytorch)."""
    if runtime == "openvino":
        return openvino_runner(path, threads, outputs, precision)
    if runtime == "onnxruntime":
        return onnx_runner(path, threads, outputs, spinning)
    if runtime == "pytorch":
        return torchscript_runner(path, threads, inputs, outputs)
    raise ValueError(f"unknown runtime {runtime!r}: onnxruntime, openvino or pytorch")
