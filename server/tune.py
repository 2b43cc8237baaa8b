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
import itertools
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from core import cpu_share, versions
from core import host_profile as hp
from core import variant as variants
from core.families import TEXT_EMBEDDING
from core.families.catalog import FamilyModel, catalog, missing_exports
from core.families.configs import encoder_spec, front_spec, write_variant
from core.files import write_atomically
from core.hardware import FP32
from core.paths import P99_OBJECTIVE_MS
from core.ports import free_ports
from core.process_memory import server_memory
from core.repository import copy_repository
from core.rollout import state_of
from core.startup import startup_models
from core.variant import HOST, Variant
from server.goodput import (
    LoadPoint,
    closed_loop,
    input_texts,
    interpolated_goodput,
    load_point,
    standard_sender,
    standard_texts_sender,
    unique_texts,
)
from server.launcher import TritonServer
from server.settings import Ports, ServerOptions

REVIEWED = "reviewed"


@dataclass(frozen=True)
class Mode:
    """How long the tuner measures: rounds, concurrencies, seconds per point."""

    rounds: int
    concurrencies: tuple[int, ...]
    seconds: float
    extra: bool  # also TorchScript and OpenVINO FP32


# Every ladder starts at one client: a lone request's p99 is what a slow host is judged by
# (core.host_profile.objective_for), and the goodput interpolates up from it.
MODES = {"quick": Mode(2, (1, 2, 4, 8), 1.5, False),
         "default": Mode(3, (1, 2, 4, 8, 16), 2.0, False),
         "full": Mode(5, (1, 2, 4, 8, 16, 32), 4.0, True)}
# A round in which other work used more than this share of the cores (steal included)
# measured the neighbours, not the candidates: it is repeated, at most MAX_REPEATS times.
BUSY_SHARE = 0.25
MAX_REPEATS = 3

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
    """(primary format, precision, layout) of each candidate beside the reviewed configs:
    OpenVINO at the host's precision in the reviewed layout, and each runtime run inside
    the fronts' own stubs (no BLS hop and no encoder process: in-process on two cores
    measured 1.35-1.68x the reviewed goodput with less memory, docs/serving.md), each
    front instance with more threads for a lone request. `--full` adds the layout of
    several encoder instances (layout_for), TorchScript, and OpenVINO at FP32."""
    layout = hp.layout_for(host.cores)
    # One front instance per encoder instance layout_for gives, each with twice an
    # instance's threads up to the cores: on two cores, two fronts with both cores each
    # (a lone request gets every core, the idle session's gain without its second copy).
    inside = replace(layout, in_process=True, idle_session=False,
                     front_instances=max(2, layout.encoder_instances),
                     encoder_threads=min(host.cores, 2 * layout.encoder_threads))
    found = [("openvino", host.precision, replace(reviewed, idle_session=False)),
             ("openvino", host.precision, inside), ("onnx", FP32, inside)]
    if mode.extra:
        if layout != reviewed:
            found.append(("onnx", FP32, layout))
        found.append(("torchscript", FP32, reviewed))
        if host.precision != FP32:
            found.append(("openvino", FP32, replace(reviewed, idle_session=False)))
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
            write_variant(copy, model.front, model.encoders, Variant(f"tune{i}"), fmt,
                          precision, layout,
                          f"a tuning candidate on {host.model}")


def candidate_server(copy: Path, i: int, logs: Path) -> TritonServer:
    """The server of variant tune<i> (0: the reviewed configs), loading what `tmr serve`
    loads under it."""
    variant = Variant(f"tune{i}") if i else variants.REVIEWED
    return TritonServer(ServerOptions(
        repository=copy, ports=Ports(*free_ports(3)), variant=variant,
        load_models=tuple(startup_models(copy, variant))), log_path=logs / f"tune{i}.log")


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


async def round_points(url: str, front: str, mode: Mode) -> list[LoadPoint]:
    """One round on one front: a closed loop at each concurrency, lowest first."""
    points, texts = [], input_texts()
    async with standard_sender(url, front) as send:
        await closed_loop(send, [(0, max(mode.concurrencies))], 1.0,
                          unique_texts(texts))  # connections, caches, the batcher's first shapes
        for concurrency in mode.concurrencies:
            outcomes = await closed_loop(send, [(0, concurrency)], mode.seconds,
                                         unique_texts(texts))
            points.append(load_point(concurrency, outcomes, mode.seconds))
    return points


@dataclass
class Rounds:
    """What the rounds measured: per (server, model) the points of each clean round, and
    the share of the cores other work used in each round left out as busy."""

    points: dict[tuple[int, str], list[list[LoadPoint]]] = field(default_factory=dict)
    busy: list[float] = field(default_factory=list)

    def busy_reason(self) -> str | None:
        if not self.busy:
            return None
        return (f"other work used up to {max(self.busy):.0%} of the cores (steal included) "
                f"in {len(self.busy)} round(s), over the {BUSY_SHARE:.0%} a round may "
                "leave to it, so they were left out")

    def goodputs(self, key: tuple[int, str], objective_ms: float) -> tuple[float, ...]:
        return tuple(interpolated_goodput(p, objective_ms) for p in self.points.get(key, []))

    def lone_p99s(self, key: tuple[int, str]) -> list[float]:
        """The p99 at the lowest concurrency, round by round."""
        return [min(p, key=lambda x: x.concurrency).p99_ms
                for p in self.points.get(key, []) if p]


def measure(servers: Sequence[TritonServer], models: Sequence[FamilyModel], mode: Mode,
            progress: Progress) -> Rounds:
    """The points of every (server, model) per round, the rounds interleaving the servers
    (each round in a rotated order); a round in which other work took more than
    BUSY_SHARE of the cores is measured again, at most MAX_REPEATS times in all."""
    progress("warming every server before the rounds", 0.1)
    settle(servers, models, mode)
    rounds, attempt, cells = Rounds(), 0, mode.rounds * len(servers) * len(models)
    clean = 0
    while clean < mode.rounds and attempt < mode.rounds + MAX_REPEATS:
        order = [(attempt + i) % len(servers) for i in range(len(servers))]
        measured: dict[tuple[int, str], list[LoadPoint]] = {}
        before = cpu_share.read()
        for n, i in enumerate(order):
            for model in models:
                progress(f"round {clean + 1}/{mode.rounds}: {model.front} on candidate {i}",
                         0.1 + 0.85 * min(1.0, (clean * len(servers) + n) * len(models)
                                          / cells))
                measured[i, model.base] = asyncio.run(round_points(
                    servers[i].http_url, str(model.front), mode))
        attempt += 1
        foreign = cpu_share.foreign_share(before, cpu_share.read())
        if foreign > BUSY_SHARE:
            rounds.busy.append(foreign)
            continue
        clean += 1
        for key, points in measured.items():
            rounds.points.setdefault(key, []).append(points)
    return rounds


BULK_ROWS = 16  # the memory round's requests: rows a bulk client sends (the SDK's chunk x 2)
LONG_TEXT_WORDS = 240  # ... and a long text (one token a word here), under max_tokens (256)


async def memory_round(url: str, front: str, seconds: float = 3.0) -> None:
    """What a server holds is read after the shapes it will meet, not only after one text
    a request: two clients of BULK_ROWS texts and one of long texts, closed loop. A
    runtime keeps memory for the largest shapes it ran (OpenVINO's intermediate buffers,
    allocators' free lists): a profile judged on single texts alone held 1,471 MB after
    its rounds and 1,560 after a mixed load (docs/serving.md)."""
    base, long_text = input_texts(), " ".join(["serving"] * LONG_TEXT_WORDS)
    texts = unique_texts(base)
    async with standard_texts_sender(url, front) as send:
        await closed_loop(lambda text, p: send([text, *itertools.islice(texts, BULK_ROWS - 1)],
                                               p), [(0, 2)], seconds, texts)
        await closed_loop(lambda text, p: send([text], p), [(0, 1)], seconds,
                          unique_texts([long_text]))


def memory_by_model(server: TritonServer) -> dict[str, float]:
    """RSS MiB of the server and each model's stubs, once measured."""
    assert server.process is not None
    return {name: row.rss_mib for name, row in server_memory(server.process.pid).items()}


def tune(repository: Path, gate: Gate, mode_name: str = "default",
         memory_budget_mb: float = hp.DEFAULT_MEMORY_BUDGET_MB,
         progress: Progress = lambda what, done: None, logs: Path | None = None,
         objective_ms: float | None = None) -> dict[str, Any]:
    """Measure, decide, write the profile (or remove a stale one); the record written.
    `objective_ms`: score every candidate at this p99 (default: objective_for's)."""
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
        rounds = measure(servers, models, mode, progress)
        progress("bulk and long texts on every server, then their memory", 0.97)
        for server in servers:
            for model in models:
                asyncio.run(memory_round(server.http_url, str(model.front)))
        memory = [memory_by_model(s) for s in servers]
    rss = [sum(table.values()) for table in memory]
    busy = rounds.busy_reason()
    decisions, objectives = {}, {}
    for model in models:
        objective = hp.objective_for(rounds.lone_p99s((0, model.base)), objective_ms,
                                     P99_OBJECTIVE_MS)
        objectives[model.base] = objective
        base = replace(reviewed[model.base], goodputs=rounds.goodputs((0, model.base),
                                                                      objective), rss_mb=rss[0])
        cands = []
        for i, (fmt, precision, layout) in enumerate(wanted, start=1):
            why = gates.get((model.base, fmt, precision), ({}, None))[1]
            cands.append(hp.Candidate(candidate_name(fmt, precision, layout), fmt,
                                      precision, layout,
                                      rounds.goodputs((i, model.base), objective), rss[i], why))
        decision = hp.choose(base, cands, memory_budget_mb, busy=busy)
        if busy and decision.verdict != hp.Verdict.HOST_BUSY:
            decision = replace(decision, reason=f"{decision.reason} ({busy})")
        decisions[model.base] = (base, cands, decision)
    names = [REVIEWED, *(candidate_name(*kind) for kind in wanted)]
    points = [{"candidate": i, "model": base, "round": r, **p.__dict__}
              for (i, base), per_round in rounds.points.items()
              for r, round_points_ in enumerate(per_round) for p in round_points_]
    record = write_profile(repository, host, mode_name, memory_budget_mb, models, decisions,
                           gates, points, dict(zip(names, memory)), time.monotonic() - began,
                           objectives, objective_ms is not None)
    progress("done", 1.0)
    return record


def write_profile(repository: Path, host: hp.Host, mode: str, budget_mb: float,
                  models: Sequence[FamilyModel], decisions: dict[str, Any],
                  gates: dict[tuple[str, str, str], Any], points: list[dict],
                  memory: dict[str, dict[str, float]], took_s: float,
                  objectives: dict[str, float], fixed_objective: bool = False
                  ) -> dict[str, Any]:
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
            write_variant(repository, model.front, model.encoders, HOST,
                          chosen.primary, chosen.precision, chosen.layout, host.describe())
        fronts[model.front] = {
            "model": model.base, "served": chosen.name, "primary": chosen.primary,
            "verdict": decision.verdict.name, "objective_p99_ms": objectives[model.base],
            "objective_source": objective_source(objectives[model.base], fixed_objective),
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
        "memory_budget_mb": budget_mb,
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


def objective_source(objective_ms: float, fixed: bool) -> str:
    """Where a front's objective came from, for the report."""
    if fixed:
        return "as `--objective-ms` asked"
    if objective_ms == P99_OBJECTIVE_MS:
        return "the standard objective"
    return (f"twice the reviewed configs' p99 with one client: the standard "
            f"{P99_OBJECTIVE_MS:.0f} ms leaves no room on this host")


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
             "Goodput: requests/s at the p99 objective of each front (below), one new text a "
             "request, interpolated between the concurrencies around it; 0 when even one "
             "client's p99 passed it. RSS: the whole server once measured (budget "
             f"{record['memory_budget_mb']:.0f} MB, a ceiling).", ""]
    for front, d in record["fronts"].items():
        lines += [f"## {front}: serves {d['served']}", "",
                  f"{hp.Verdict[d['verdict']].value[0].upper()}"
                  f"{hp.Verdict[d['verdict']].value[1:]}: {d['reason']}.", "",
                  f"Objective: p99 <= {d['objective_p99_ms']:.3g} ms "
                  f"({d['objective_source']}).", "",
                  "| candidate | goodput (median) | rounds | vs reviewed | noise | RSS MB | "
                  "verdict |", "| --- | ---: | --- | ---: | ---: | ---: | --- |"]
        for c in d["candidates"]:
            ratio = 1.0 if c["name"] == REVIEWED else d["ratios"].get(c["name"])
            noise = d["noise"].get(c["name"])
            verdict = "serves" if c["name"] == d["served"] else d["refused"].get(c["name"], "")
            lines.append(f"| {c['name']} | {c['goodput']:.0f} | "
                         f"{', '.join(f'{g:.0f}' for g in c['goodputs']) or 'none'} | "
                         f"{'-' if ratio is None else f'{ratio:.2f}x'} | "
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
