"""`tmr tune`: fit the server to this host by measurement, and write the host profile.

For every text front (the families whose inputs the tuner can vary: a new text a request,
so no cache answers it), the candidates are the reviewed configs, the OpenVINO encoder at
this host's precision with the host's layout (core.host_profile.layout_for), and, where the
layout differs from the reviewed one, ONNX FP32 with it (`--full` adds TorchScript and
OpenVINO FP32). A candidate precision other than FP32 passes the fidelity gate against
eager PyTorch first (a `Gate`; `tmr tune` passes export.gate.precision_gate). Each
candidate is served by its own real server on a copy of the repository (its variant as
configs/tune<i>.pbtxt); all of them are up at once and the rounds interleave them, so a
stall of the shared machine hits each alike. A round is a closed loop of new texts at each
concurrency (server/goodput.py); its goodput is the best requests/s whose p99 fits the
objective. core.host_profile.choose decides; the winner is written as
configs/host.pbtxt, with host_profile.json and host_profile.md beside the models. Image
fronts keep their reviewed configs (docs/serving.md says why).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core import host_profile as hp
from core import versions
from core.families import TEXT_EMBEDDING
from core.families.catalog import FamilyModel, catalog, missing_exports
from core.families.configs import encoder_spec, front_spec, write_variant
from core.files import write_atomically
from core.hardware import FP32
from core.paths import P99_OBJECTIVE_MS
from core.ports import free_ports
from core.repository import copy_repository
from core.rollout import state_of
from core.startup import startup_models
from server.goodput import (
    closed_loop,
    input_texts,
    interpolated_goodput,
    load_point,
    standard_sender,
    unique_texts,
)
from server.launcher import TritonServer
from server.memory import server_memory
from server.settings import Ports, ServerOptions

REVIEWED = "reviewed"


@dataclass(frozen=True)
class Mode:
    """How long the tuner measures: rounds, concurrencies, seconds per point."""

    rounds: int
    concurrencies: tuple[int, ...]
    seconds: float
    extra: bool  # also TorchScript and OpenVINO FP32


MODES = {"quick": Mode(2, (2, 4, 8), 2.0, False),
         "default": Mode(3, (2, 4, 8, 16), 2.5, False),
         "full": Mode(5, (1, 2, 4, 8, 16, 32), 4.0, True)}

Progress = Callable[[str, float], None]  # (what, fraction done)
# (encoder folder, precision) -> (figures, why it fails or None): export.gate.precision_gate
Gate = Callable[[Path, str], tuple[dict[str, float], str | None]]


def text_models(repository: Path) -> list[FamilyModel]:
    """The family models the tuner times through the server: text fronts."""
    return [m for m in catalog(repository) if m.family.name == TEXT_EMBEDDING.name and m.front]


def reviewed_candidate(repository: Path, model: FamilyModel) -> hp.Candidate:
    front = front_spec(versions.read_config(repository / model.front))
    fmt = front.primary or model.family.serving.primary
    spec = encoder_spec(versions.read_config(repository / model.encoder(fmt)))
    layout = hp.Layout(spec.instances, spec.threads,
                       front.instances or model.family.serving.front_instances, spec.idle_session)
    return hp.Candidate(REVIEWED, fmt, spec.precision, layout)


def kinds(host: hp.Host, reviewed: hp.Layout, mode: Mode) -> list[tuple[str, str, hp.Layout]]:
    """(primary format, precision, layout) of each candidate beside the reviewed configs."""
    layout = hp.layout_for(host.cores)
    # OpenVINO's idle session is a second compiled model: 285 MB more for two instances
    # (measured on MiniLM), for lone requests only; its candidates go without it.
    openvino = replace(layout, idle_session=False)
    # The same, run inside the front's stubs: no BLS hop per call; one front instance per
    # encoder instance (three fronts on two cores measured 1.39x the reviewed goodput, two
    # 1.68x, with 330 MB less); each with twice the threads, up to the cores, for what the
    # idle session gave a lone request without its second model (docs/serving.md).
    inside = replace(openvino, in_process=True,
                     front_instances=max(2, layout.encoder_instances),
                     encoder_threads=min(host.cores, 2 * layout.encoder_threads))
    found = [("openvino", host.precision, openvino), ("openvino", host.precision, inside)]
    if layout != reviewed:
        found.append(("onnx", FP32, layout))
    if mode.extra:
        found.append(("torchscript", FP32, layout))
        if host.precision != FP32:
            found.append(("openvino", FP32, replace(layout, idle_session=False)))
    return found


def candidate_name(fmt: str, precision: str, layout: hp.Layout) -> str:
    return f"{fmt} {precision} ({layout.describe()})"


def check_tunable(repository: Path, models: Sequence[FamilyModel]) -> None:
    """Refuse what would make the measurement wrong: missing exports, a running rollout."""
    missing = missing_exports(repository)
    if missing:
        raise hp.ProfileError(f"not exported yet: {', '.join(missing)}; run `make setup`")
    for model in models:
        for name in model.encoders.values():
            if state_of(versions.read_config(repository / name)) is not None:
                raise hp.ProfileError(f"a rollout of {name} is running: tune once it ended")


def gate_failures(repository: Path, models: Sequence[FamilyModel],
                  wanted: Sequence[tuple[str, str, hp.Layout]], gate: Gate,
                  progress: Progress) -> dict[tuple[str, str, str], Any]:
    """(model, format, precision) -> (figures, why it failed or None), for every wanted
    precision other than FP32 (the FP32 formats passed their export's gate)."""
    gates = {}
    for model in models:
        for fmt, precision, _ in wanted:
            if precision != FP32 and (model.base, fmt, precision) not in gates:
                progress(f"{model.base}: gating {fmt} at {precision} against PyTorch", 0.02)
                gates[model.base, fmt, precision] = gate(repository / model.encoder(fmt),
                                                         precision)
    return gates


def write_variants(copy: Path, models: Sequence[FamilyModel],
                   wanted: Sequence[tuple[str, str, hp.Layout]], host: hp.Host) -> None:
    """Each candidate as configs/tune<i>.pbtxt of the copy (i from 1; 0 is the reviewed)."""
    for i, (fmt, precision, layout) in enumerate(wanted, start=1):
        for model in models:
            assert model.front is not None
            write_variant(copy, model.front, model.encoders, f"tune{i}", fmt, precision, layout,
                          f"a tuning candidate on {host.model}")


def candidate_server(copy: Path, i: int, logs: Path) -> TritonServer:
    """The server of variant tune<i> (0: the reviewed configs), loading what `tmr serve`
    loads under it."""
    profile = f"tune{i}" if i else ""
    return TritonServer(ServerOptions(
        repository=copy, ports=Ports(*free_ports(3)), model_config_name=profile or None,
        load_models=tuple(startup_models(copy, profile))), log_path=logs / f"tune{i}.log")


SETTLE_S = 2.0  # an unmeasured loop per server and front before the rounds


async def warm(url: str, front: str, concurrency: int, seconds: float) -> None:
    """An unmeasured closed loop: connections, caches, the batcher's first shapes."""
    async with standard_sender(url, front) as send:
        await closed_loop(send, [(0, concurrency)], seconds, unique_texts(input_texts()))


def settle(servers: Sequence[TritonServer], models: Sequence[FamilyModel], mode: Mode) -> None:
    """Every server warmed before any is measured: a server still warming its fronts
    (front_warmup, once it has started) took cores from the first round of the others."""
    for server in servers:
        for model in models:
            asyncio.run(warm(server.http_url, str(model.front), max(mode.concurrencies),
                             SETTLE_S))
    time.sleep(SETTLE_S)


async def round_goodput(url: str, front: str, mode: Mode) -> tuple[float, list[dict]]:
    """One round on one front: a closed loop at each concurrency; (goodput, points)."""
    points, texts = [], input_texts()
    async with standard_sender(url, front) as send:
        await closed_loop(send, [(0, max(mode.concurrencies))], 1.0,
                          unique_texts(texts))  # connections, caches, the batcher's first shapes
        for concurrency in mode.concurrencies:
            outcomes = await closed_loop(send, [(0, concurrency)], mode.seconds,
                                         unique_texts(texts))
            points.append(load_point(concurrency, outcomes, mode.seconds))
    return interpolated_goodput(points, P99_OBJECTIVE_MS), [p.__dict__ for p in points]


def measure(servers: Sequence[TritonServer], models: Sequence[FamilyModel], mode: Mode,
            progress: Progress) -> tuple[dict[tuple[int, str], list[float]], list[dict]]:
    """Goodput per (server, model) per round, the rounds interleaving the servers (each
    round in a rotated order); and every point measured."""
    progress("warming every server before the rounds", 0.1)
    settle(servers, models, mode)
    goodputs: dict[tuple[int, str], list[float]] = {}
    points: list[dict] = []
    cells = mode.rounds * len(servers) * len(models)
    done = 0
    for r in range(mode.rounds):
        order = [(r + i) % len(servers) for i in range(len(servers))]
        for i in order:
            for model in models:
                progress(f"round {r + 1}/{mode.rounds}: {model.front} on candidate {i}",
                         0.1 + 0.85 * done / cells)
                rate, measured = asyncio.run(round_goodput(servers[i].http_url, str(model.front),
                                                           mode))
                goodputs.setdefault((i, model.base), []).append(rate)
                points += [{"candidate": i, "model": model.base, "round": r, **p}
                           for p in measured]
                done += 1
    return goodputs, points


def memory_by_model(server: TritonServer) -> dict[str, float]:
    """RSS MiB of the server and each model's stubs, once measured."""
    assert server.process is not None
    return {name: row["rss_mib"] for name, row in server_memory(server.process.pid).items()}


def tune(repository: Path, gate: Gate, mode_name: str = "default",
         memory_budget_mb: float = hp.DEFAULT_MEMORY_BUDGET_MB,
         progress: Progress = lambda what, done: None, logs: Path | None = None
         ) -> dict[str, Any]:
    """Measure, decide, write the profile (or remove a stale one); the record written."""
    began, host, mode = time.monotonic(), hp.Host.current(), MODES[mode_name]
    models = text_models(repository)
    check_tunable(repository, models)
    reviewed = {m.base: reviewed_candidate(repository, m) for m in models}
    first = next(iter(reviewed.values()))
    wanted = kinds(host, first.layout, mode)
    gates = gate_failures(repository, models, wanted, gate, progress)
    with tempfile.TemporaryDirectory(prefix="tmr-tune-") as tmp, ExitStack() as stack:
        copy = copy_repository([repository], Path(tmp) / "repository")
        for path in hp.profile_files(copy):
            path.unlink()
        write_variants(copy, models, wanted, host)
        servers = []
        for i in range(len(wanted) + 1):  # one after the other: each start uses every core
            progress(f"starting server {i + 1} of {len(wanted) + 1}", 0.05 + 0.05 * i)
            servers.append(stack.enter_context(candidate_server(copy, i, logs or Path(tmp))))
        goodputs, points = measure(servers, models, mode, progress)
        memory = [memory_by_model(s) for s in servers]
    rss = [sum(table.values()) for table in memory]
    decisions = {}
    for model in models:
        base = replace(reviewed[model.base], goodputs=tuple(goodputs[0, model.base]),
                       rss_mb=rss[0])
        cands = []
        for i, (fmt, precision, layout) in enumerate(wanted, start=1):
            why = gates.get((model.base, fmt, precision), ({}, None))[1]
            cands.append(hp.Candidate(candidate_name(fmt, precision, layout), fmt,
                                      precision, layout, tuple(goodputs[i, model.base]),
                                      rss[i], why))
        decisions[model.base] = (base, cands, hp.choose(base, cands, memory_budget_mb))
    names = [REVIEWED, *(candidate_name(*kind) for kind in wanted)]
    record = write_profile(repository, host, mode_name, memory_budget_mb, models, decisions,
                           gates, points, dict(zip(names, memory)), time.monotonic() - began)
    progress("done", 1.0)
    return record


def write_profile(repository: Path, host: hp.Host, mode: str, budget_mb: float,
                  models: Sequence[FamilyModel], decisions: dict[str, Any],
                  gates: dict[tuple[str, str, str], Any], points: list[dict],
                  memory: dict[str, dict[str, float]], took_s: float) -> dict[str, Any]:
    """configs/host.pbtxt of every model whose candidate won (none elsewhere), the record
    and its report."""
    for path in hp.profile_files(repository):
        path.unlink()
    fronts = {}
    for model in models:
        base, cands, decision = decisions[model.base]
        chosen = decision.chosen
        if chosen.name != REVIEWED:
            assert model.front is not None
            write_variant(repository, model.front, model.encoders, versions.HOST_PROFILE,
                          chosen.primary, chosen.precision, chosen.layout, host.describe())
        fronts[model.front] = {
            "model": model.base, "served": chosen.name, "primary": chosen.primary,
            "precision": chosen.precision, "layout": chosen.layout.__dict__,
            "reason": decision.reason, "refused": decision.refused, "ratios": decision.ratios,
            "noise": decision.noise,
            "candidates": [hp.candidate_record(c) for c in [base, *cands]]}
    names = sorted({n for m in models for n in m.models})
    record = {
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "mode": mode, "took_s": took_s,
        "host": host.__dict__ | {"flags": list(host.flags),
                                 "affinity": len(os.sched_getaffinity(0)),
                                 "cgroup_quota": hp.cgroup_cpu_limit()},
        "memory_budget_mb": budget_mb, "objective_p99_ms": P99_OBJECTIVE_MS,
        "models": names, "repository_models": hp.model_folders(repository),
        "reviewed_digest": hp.reviewed_digest(repository, names),
        "versions": hp.served_versions(repository, names),
        "profiled": sorted(f for f, d in fronts.items() if d["served"] != REVIEWED),
        "fronts": fronts,
        "gates": {f"{m} {f} {p}": {"figures": fig, "failure": why}
                  for (m, f, p), (fig, why) in gates.items()},
        "memory_mib": memory, "points": points}
    hp.write_record(repository, record)
    write_atomically(repository / hp.REPORT_FILE, report(record) + "\n")
    return record


def report(record: dict[str, Any]) -> str:
    """The profile as markdown: the host, then per front the table, the gate and the choice."""
    host = record["host"]
    lines = [f"# Host profile ({record['written_at']}, `tmr tune --{record['mode']}`, "
             f"{record['took_s']:.0f} s)", "",
             f"Host: {host['model']}, {host['cores']} usable cores (affinity "
             f"{host['affinity']}, cgroup quota {host['cgroup_quota'] or 'none'}), flags "
             f"{' '.join(host['flags']) or 'none'}; precision rule: {host['precision']}.",
             "Served versions: " + ", ".join(f"{m} v{n}" for m, n in
                                             record["versions"].items()) + ".",
             f"Goodput: requests/s at p99 <= {record['objective_p99_ms']:.0f} ms, one new "
             f"text a request; RSS: the whole server once measured (budget "
             f"{record['memory_budget_mb']:.0f} MB).", ""]
    for front, d in record["fronts"].items():
        lines += [f"## {front}: serves {d['served']}", "", d["reason"], "",
                  "| candidate | goodput (median) | rounds | vs reviewed | noise | RSS MB | "
                  "verdict |", "| --- | ---: | --- | ---: | ---: | ---: | --- |"]
        for c in d["candidates"]:
            ratio = d["ratios"].get(c["name"], 1.0)
            noise = d["noise"].get(c["name"])
            verdict = "serves" if c["name"] == d["served"] else d["refused"].get(c["name"], "")
            lines.append(f"| {c['name']} | {c['goodput']:.0f} | "
                         f"{', '.join(f'{g:.0f}' for g in c['goodputs'])} | {ratio:.2f}x | "
                         f"{'' if noise is None else f'+-{noise:.0%}'} | {c['rss_mb']:.0f} | "
                         f"{verdict} |")
        lines.append("")
    lines += ["RSS MiB by process, as each server held it after its rounds:", "",
              "| process | " + " | ".join(record["memory_mib"]) + " |",
              "| --- |" + " ---: |" * len(record["memory_mib"])]
    tables = list(record["memory_mib"].values())
    for name in sorted(set().union(*tables), key=lambda n: -max(t.get(n, 0) for t in tables)):
        lines.append(f"| {name} | " + " | ".join(f"{t.get(name, 0):.0f}" for t in tables) + " |")
    lines += ["| **total** | " + " | ".join(f"{sum(t.values()):.0f}" for t in tables) + " |", ""]
    if "amx_bf16" in host["flags"]:
        lines += ["On this AMX host Triton's native OpenVINO backend (the GPU image) runs bf16 "
                  "whatever a config says (docs/gpu_hosts.md): the bf16 gate below is what "
                  "holds for it.", ""]
    for key, gate in record["gates"].items():
        figures = ", ".join(f"{k} {val:.5f}" for k, val in gate["figures"].items())
        lines.append(f"Gate {key} vs eager PyTorch: {figures}: "
                     f"{'FAIL: ' + gate['failure'] if gate['failure'] else 'pass'}")
    return "\n".join(lines)
