"""Where the CPU goes: the full `embed` pipeline against the bare single-model fixture.

    .venv/bin/python -m perf.profile [--concurrency 16] [--seconds 8]

CPU-bound, throughput is cores / CPU seconds per request. Under a perf_analyzer load: the CPU
time (/proc) of tritonserver and of each model's stubs per request served, and py-spy samples
of the front's stubs (project functions by inclusive share); before it, at concurrency 1,
Triton's own statistics per request per model. What `tmr serve` serves here; output:
`perf/results/profile-<timestamp>/profile.md` and py-spy's stacks.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tmr_client.core import DEFAULT_MODEL

from core import cpu_share as host_cpu
from core.families import TEXT_EMBEDDING
from core.repository import set_parameter
from perf import subjects
from perf.subjects import build_repository
from server import goodput, perf_analyzer
from server.launcher import TritonServer, stub_processes
from server.profile import served_variant
from server.prometheus import metric_value
from server.served_copy import free_port_server
from server.stamp import run_dir, write_report

INPUTS = goodput.INPUTS / TEXT_EMBEDDING.perf_inputs
OTHERS = "rest of the machine (perf_analyzer, OS)"
OWN_CODE = ("python_backends/", "runtime/", "perf/stub_fixtures/", "core/")  # ours, in the stubs
PY_SPY = Path(sys.executable).parent / "py-spy"  # the venv's, from the dev extra
STAGES = ("queue", "compute_input", "compute_infer", "compute_output")  # Triton's, a request


def cpu_by_group(groups: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds per group, plus OTHERS: the rest of the machine's busy time (the load
    generator, the OS, this script)."""
    procs = host_cpu.processes()
    seconds = {name: sum(procs[p][1] for p in pids) for name, pids in groups.items()}
    busy, steal, _ = host_cpu.machine_times()
    seconds[OTHERS] = busy + steal - sum(seconds.values())
    return seconds


def successes(metrics_url: str, model: str) -> float:
    return metric_value(metrics_url, "nv_inference_request_success", model=model)


def own_frames(raw: str) -> Counter:
    """Inclusive sample counts of project functions in py-spy's raw (collapsed) stacks."""
    counts: Counter = Counter()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        seen = set()
        for frame in stack.split(";"):  # "function (path/file.py:line)"
            name, _, where = frame.partition(" (")
            if any(marker in where for marker in OWN_CODE):
                seen.add(f"{name} ({where.split(':')[0].rsplit('/', 1)[-1]})")
        for key in seen:
            counts[key] += int(n)
        counts["<all samples>"] += int(n)
    return counts


@dataclass
class Profile:
    model: str
    requests: float
    seconds: float
    cpu: dict[str, float]  # group -> CPU seconds in the window
    frames: Counter

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    def ms_per_request(self, group: str) -> float:
        return 1000 * self.cpu.get(group, 0.0) / max(self.requests, 1)


def profile(server: TritonServer, model: str, concurrency: int, seconds: float,
            out: Path) -> Profile:
    """CPU per request by process group, and py-spy samples of `model`'s stubs."""
    groups = {"tritonserver": [server.process.pid], **stub_processes(server.process.pid)}
    done = threading.Event()

    def load() -> None:  # perf_analyzer keeps the load on until its windows are stable
        while not done.is_set():
            perf_analyzer.run(model, server.grpc_url, concurrency, INPUTS,
                              out / f"{model}-load.csv", stability_pct=100)

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    time.sleep(3)  # past perf_analyzer's warm-up
    before_cpu, before_n = cpu_by_group(groups), successes(server.metrics_url, model)
    began = time.monotonic()
    spies = [subprocess.Popen(
        [str(PY_SPY), "record", "--pid", str(pid),
         "--duration", str(int(seconds)), "--rate", "200", "--format", "raw", "--nonblocking",
         "-o", str(out / f"{model}-{pid}.txt")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in groups[model]]
    for spy in spies:
        spy.wait(timeout=seconds + 60)
    elapsed = time.monotonic() - began
    after_cpu, after_n = cpu_by_group(groups), successes(server.metrics_url, model)
    done.set()
    loader.join(timeout=120)
    frames: Counter = Counter()
    for path in out.glob(f"{model}-*.txt"):
        frames += own_frames(path.read_text())
    return Profile(model, after_n - before_n, elapsed,
                   {g: after_cpu[g] - before_cpu[g] for g in after_cpu}, frames)


def stage_totals(http_url: str) -> dict[str, dict[str, float]]:
    """Per loaded model: its successes and the nanoseconds of each stage so far."""
    totals: dict[str, dict[str, float]] = {}
    for model in perf_analyzer.model_stats(http_url):
        row = totals.setdefault(model["name"], dict.fromkeys(("n", *STAGES), 0.0))
        row["n"] += int(model["inference_stats"]["success"]["count"])
        for stage in STAGES:
            row[stage] += int(model["inference_stats"][stage]["ns"])
    return totals


def request_stages(server: TritonServer, model: str, requests: int = 300) -> str:
    """Where one request's time goes at concurrency 1, as a markdown table (ms a request)."""
    import tritonclient.http as http

    texts = goodput.unique_texts(subjects.texts())
    client = http.InferenceServerClient(server.http_url)

    def one() -> float:
        tensor = http.InferInput(TEXT_EMBEDDING.contract.front_inputs[0].name, [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[next(texts).encode()]], dtype=np.object_))
        began = time.perf_counter()
        client.infer(model, [tensor])
        return 1000 * (time.perf_counter() - began)

    for _ in range(30):
        one()  # connections, the batcher's first shapes
    before = stage_totals(server.http_url)
    took = sorted(one() for _ in range(requests))
    after = stage_totals(server.http_url)
    lines = [f"One request at a time, {requests} new texts over HTTP: client p50 "
             f"{took[len(took) // 2]:.2f} ms, mean {sum(took) / len(took):.2f} ms.\n",
             "| model (requests) | " + " | ".join(STAGES) + " | total |",
             "| --- |" + " ---: |" * (len(STAGES) + 1)]
    for name, row in after.items():
        n = row["n"] - before.get(name, {}).get("n", 0)
        if n <= 0:
            continue
        ms = [(row[s] - before[name][s]) / n / 1e6 for s in STAGES]
        lines.append(f"| {name} ({n:.0f}) | " + " | ".join(f"{t:.2f}" for t in ms)
                     + f" | {sum(ms):.2f} |")
    return "\n".join(lines) + "\n"


def report(profiles: list[Profile], concurrency: int) -> str:
    groups = sorted({g for p in profiles for g, s in p.cpu.items() if s > 0.05 and g != OTHERS})
    lines = [f"CPU milliseconds per request, perf_analyzer gRPC at concurrency {concurrency}; "
             "each column its own load window.\n",
             "| process group | " + " | ".join(p.model for p in profiles) + " |",
             "| --- |" + " ---: |" * len(profiles)]
    for group in groups:
        lines.append(f"| {group} | " + " | ".join(f"{p.ms_per_request(group):.2f}"
                                                 for p in profiles) + " |")
    lines.append("| **Triton, all processes** | " + " | ".join(
        f"**{sum(p.ms_per_request(g) for g in groups):.2f}**" for p in profiles) + " |")
    lines.append(f"| {OTHERS} | " + " | ".join(f"{p.ms_per_request(OTHERS):.2f}"
                                               for p in profiles) + " |")
    lines.append("| served infer/s | " + " | ".join(f"{p.rps:.0f}" for p in profiles) + " |")
    for p in profiles:
        total = p.frames.pop("<all samples>", 0) or 1
        lines += [f"\npy-spy, `{p.model}` stubs: inclusive share of the busy samples "
                  f"({total} samples)\n", "| function | share |", "| --- | ---: |"]
        lines += [f"| `{name}` | {100 * n / total:.0f}% |"
                  for name, n in p.frames.most_common(12)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--models", nargs="+", default=[DEFAULT_MODEL, "embed_bare"])
    parser.add_argument("--param", action="append", default=[], metavar="MODEL:KEY=VALUE",
                        help="set a config parameter on the served copy (repeatable)")
    args = parser.parse_args()
    out = run_dir("profile")
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_repository(Path(tmp), [])
        for setting in args.param:
            model, _, assignment = setting.partition(":")
            key, _, value = assignment.partition("=")
            set_parameter(repo, model, key, value)
        with free_port_server(repo, out / "tritonserver.log") as server:
            stages = request_stages(server, args.models[0])
            profiles = [profile(server, m, args.concurrency, args.seconds, out)
                        for m in args.models]
    print(write_report(out, "profile", f"{served_variant()[1]}\n\n{stages}\n"
                       + report(profiles, args.concurrency)))


if __name__ == "__main__":
    main()
