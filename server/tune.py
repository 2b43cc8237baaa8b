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
from core import tune_record as tr
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
from core.settings import WORKERS_PARAMETER, LadderSettings
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
from server.tune_report import report

REVIEWED_NAME = "reviewed"  # how the report and the record name the reviewed configs


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
# The progress bar: the servers start up to STARTED, warm up to WARMED, then the rounds.
STARTED, WARMED = 0.2, 0.25

Progress = Callable[[str, float], None]  # (what, fraction done)
# (encoder folder, precision) -> (figures, why it fails or None): export.gate.precision_gate
Gate = Callable[[Path, str], tuple[dict[str, float], str | None]]


class NothingToTime(hp.ProfileError):
    """The repository has no text front: not a failure (`tmr add` of another family into
    such a repository ends here), the other families serve their reviewed configs."""


def text_models(repository: Path) -> list[FamilyModel]:
    """The family models the tuner times through the server: text fronts."""
    return [m for m in catalog(repository) if m.family.name == TEXT_EMBEDDING.name and m.front]


def reviewed_candidate(repository: Path, model: FamilyModel) -> hp.Candidate:
    """The reviewed configs as a layout: their front's workers and its in-process
    primary's threads a call where it runs the primary itself (the family's default,
    docs/serving.md "One model, one process"), else the encoder's instances."""
    front = front_spec(versions.read_config(repository / model.front))
    fmt = front.primary or model.family.serving.primary
    spec = encoder_spec(versions.read_config(repository / model.encoder(fmt)))
    ladder = LadderSettings.from_parameters({"parameters": {
        k: {"string_value": v} for k, v in front.parameters.items()}})
    share = ladder.in_process_threads
    threads = share.count if ladder.primary_in_process and share.kind == "fixed" else spec.threads
    workers = hp.worker_count(front.parameters.get(WORKERS_PARAMETER, "0"), hp.host_cores())
    layout = hp.Layout(spec.instances, threads,
                       front.instances or model.family.serving.front_instances, spec.idle_session,
                       ladder.primary_in_process, workers)
    return hp.Candidate(REVIEWED_NAME, fmt, spec.precision, layout, reviewed=True)


def kinds(host: hp.Host, reviewed: hp.Layout, mode: Mode) -> list[hp.Kind]:
    """The candidates measured beside the reviewed configs (one front process whose
    workers share its in-process primary, docs/serving.md "One model, one process"): OpenVINO
    at the host's precision in the reviewed layout, and OpenVINO and onnxruntime with the
    workers sharing every core (a lone request gets them all; a worker per encoder
    instance layout_for gives, at least two). `--full` adds onnxruntime over BLS in the
    layout of several encoder instances (layout_for), TorchScript, and OpenVINO at FP32."""
    layout = hp.layout_for(host.cores)
    shared = replace(layout, in_process=True, idle_session=False, front_instances=1,
                     front_workers=max(2, layout.encoder_instances), encoder_threads=host.cores)
    found = [hp.Kind("openvino", host.precision, replace(reviewed, idle_session=False)),
             hp.Kind("openvino", host.precision, shared), hp.Kind("onnx", FP32, shared)]
    if mode.extra:
        found.append(hp.Kind("onnx", FP32, layout))
        found.append(hp.Kind("torchscript", FP32, reviewed))
        if host.precision != FP32:
            found.append(hp.Kind("openvino", FP32, replace(reviewed, idle_session=False)))
    return found


def check_tunable(repository: Path, models: Sequence[FamilyModel]) -> None:
    """Refuse what would make the measurement wrong: missing exports, a running rollout;
    and a repository with nothing to time (no text front: the other families serve their
    reviewed configs, docs/families.md)."""
    if not models:
        raise NothingToTime(f"nothing to time in {repository}: the tuner measures "
                            f"{TEXT_EMBEDDING.name} fronts, and it has none; every model "
                            "here serves its reviewed configs (docs/families.md)")
    missing = missing_exports(repository)
    if missing:
        raise hp.ProfileError(f"not exported yet: {', '.join(missing)}; run `make setup`")
    for model in models:
        for name in model.encoders.values():
            if state_of(versions.read_config(repository / name)) is not None:
                raise hp.ProfileError(f"a rollout of {name} is running: tune once it ended")


def gate_failures(repository: Path, models: Sequence[FamilyModel],
                  wanted: Sequence[hp.Kind], gate: Gate,
                  progress: Progress) -> dict[tuple[str, str, str], Any]:
    """(model, format, precision) -> (figures, why it failed or None), for every wanted
    precision other than FP32 (the FP32 formats passed their export's gate)."""
    gates = {}
    for model in models:
        for kind in wanted:
            key = (model.base, kind.primary, kind.precision)
            if kind.precision != FP32 and key not in gates:
                progress(f"{model.base}: gating {kind.primary} at {kind.precision} against "
                         "PyTorch", 0.02)
                gates[key] = gate(repository / model.encoder(kind.primary), kind.precision)
    return gates


def write_variants(copy: Path, models: Sequence[FamilyModel],
                   wanted: Sequence[hp.Kind], host: hp.Host) -> None:
    """Each candidate as configs/tune<i>.pbtxt of the copy (i from 1; 0 is the reviewed)."""
    for i, kind in enumerate(wanted, start=1):
        for front, model in text_fronts(models):
            write_variant(copy, front, model.encoders, Variant(f"tune{i}"), kind.primary,
                          kind.precision, kind.layout,
                          f"a tuning candidate on {host.model}")


def candidate_server(copy: Path, i: int, logs: Path, fronts: Sequence[str] = ()
                     ) -> TritonServer:
    """The server of variant tune<i> (0: the reviewed configs), loading what `tmr serve`
    loads under it (`fronts`: what `tmr serve --models` loads for them)."""
    variant = Variant(f"tune{i}") if i else variants.REVIEWED
    return TritonServer(ServerOptions(
        repository=copy, ports=Ports(*free_ports(3)), variant=variant,
        load_models=tuple(startup_models(copy, variant, wanted=fronts))),
        log_path=logs / f"tune{i}.log")


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
    progress("warming every server before the rounds", STARTED)
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
                         WARMED + (0.95 - WARMED) * min(
                             1.0, (clean * len(servers) + n) * len(models) / cells))
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
    return {name: row.rss_mib for name, row in server_memory(server.pid).items()}


def tune(repository: Path, gate: Gate, mode_name: str = "default",
         memory_budget_mb: float = hp.DEFAULT_MEMORY_BUDGET_MB,
         progress: Progress = lambda what, done: None, logs: Path | None = None,
         objective_ms: float | None = None, only: Sequence[str] = ()) -> tr.TuneRecord:
    """Measure, decide, write the profile (or remove a stale one); the record written.
    `objective_ms`: score every candidate at this p99 (default: objective_for's). `only`
    (`tmr add`): the models just added, measured alone where the record fits but for
    them, the record's choices for the others kept (tune_record.merged)."""
    began, host, mode = time.monotonic(), hp.Host.current(), MODES[mode_name]
    old = tr.read_record(repository) if only else None
    added = tr.only_added(old, host, repository)
    models = [m for m in text_models(repository) if not added or m.base in only]
    if added and not models:  # nothing of the added to time: the others' choices stand
        tr.write_record(repository, tr.merged(old, old, repository))  # type: ignore[arg-type]
        raise NothingToTime(f"nothing to time among {', '.join(only)}: the host profile "
                            "of the other models stands")
    check_tunable(repository, models)
    reviewed = {m.base: reviewed_candidate(repository, m) for m in models}
    first = next(iter(reviewed.values()))
    wanted = kinds(host, first.layout, mode)
    gates = gate_failures(repository, models, wanted, gate, progress)
    with tempfile.TemporaryDirectory(prefix="tmr-tune-") as tmp, ExitStack() as stack:
        copy = copy_repository([repository], Path(tmp) / "repository")
        for path in tr.profile_files(copy):
            path.unlink()
        write_variants(copy, models, wanted, host)
        servers = []
        for i in range(len(wanted) + 1):  # one after the other: each start uses every core
            progress(f"starting server {i + 1} of {len(wanted) + 1}",
                     STARTED * i / (len(wanted) + 1))
            servers.append(stack.enter_context(candidate_server(
                copy, i, logs or Path(tmp), [m.front for m in models] if added else ())))
        rounds = measure(servers, models, mode, progress)
        progress("bulk and long texts on every server, then their memory", 0.97)
        for server in servers:
            for model in models:
                asyncio.run(memory_round(server.http_url, str(model.front)))
        memory = [memory_by_model(s) for s in servers]
    rss = [sum(table.values()) for table in memory]
    busy = rounds.busy_reason()
    fronts = {}
    for front, model in text_fronts(models):
        objective = hp.objective_for(rounds.lone_p99s((0, model.base)), objective_ms,
                                     P99_OBJECTIVE_MS)
        base = replace(reviewed[model.base], goodputs=rounds.goodputs((0, model.base),
                                                                      objective), rss_mb=rss[0])
        cands = [hp.Candidate(kind.name, kind.primary, kind.precision, kind.layout,
                              rounds.goodputs((i, model.base), objective), rss[i],
                              gates.get((model.base, kind.primary, kind.precision),
                                        ({}, None))[1])
                 for i, kind in enumerate(wanted, start=1)]
        decision = hp.choose(base, cands, memory_budget_mb, busy=busy)
        if busy and decision.verdict != hp.Verdict.HOST_BUSY:
            decision = replace(decision, reason=f"{decision.reason} ({busy})")
        fronts[front] = tr.FrontChoice(
            model.base, decision.verdict, decision.reason, objective,
            objective_source(objective, objective_ms is not None), (base, *cands),
            decision.chosen.name, decision.ratios, decision.noise, decision.refused)
    names = sorted({n for m in models for n in m.models})
    record = tr.TuneRecord(
        written_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), mode=mode_name,
        took_s=time.monotonic() - began, host=host, affinity=len(os.sched_getaffinity(0)),
        cgroup_quota=hp.cgroup_cpu_limit(), memory_budget_mb=memory_budget_mb,
        models=tuple(names), repository_models=tuple(tr.model_folders(repository)),
        reviewed_digest=tr.reviewed_digest(repository, names),
        versions=tr.served_versions(repository, names), fronts=fronts,
        gates={f"{m} {f} {p}": {"figures": fig, "failure": why}
               for (m, f, p), (fig, why) in gates.items()},
        memory_mib=dict(zip([REVIEWED_NAME, *(k.name for k in wanted)], memory)),
        points=tuple({"candidate": i, "model": base, "round": r, **p.__dict__}
                     for (i, base), per_round in rounds.points.items()
                     for r, round_points_ in enumerate(per_round) for p in round_points_))
    if added:
        record = tr.merged(old, record, repository)  # type: ignore[arg-type]
    write_profile(repository, record, models, keep_others=added)
    progress("done", 1.0)
    return record


def text_fronts(models: Sequence[FamilyModel]) -> list[tuple[str, FamilyModel]]:
    """(front, model) of each model that has a front (text_models finds only such)."""
    return [(m.front, m) for m in models if m.front]


def write_profile(repository: Path, record: tr.TuneRecord,
                  models: Sequence[FamilyModel], keep_others: bool = False) -> None:
    """configs/host.pbtxt of every model whose candidate won (none elsewhere; with
    `keep_others`, the other models' files as they are), the record and its report."""
    ours = {name for m in models for name in m.models}
    for path in tr.profile_files(repository):
        if not keep_others or path.parent.parent.name in ours:
            path.unlink()
    for front, model in text_fronts(models):
        chosen = record.fronts[front].chosen
        if not chosen.reviewed:
            write_variant(repository, front, model.encoders, HOST, chosen.primary,
                          chosen.precision, chosen.layout, record.host.describe())
    tr.write_record(repository, record)
    write_atomically(repository / tr.REPORT_FILE, report(record) + "\n")


def objective_source(objective_ms: float, fixed: bool) -> str:
    """Where a front's objective came from, for the report."""
    if fixed:
        return "as `--objective-ms` asked"
    if objective_ms == P99_OBJECTIVE_MS:
        return "the standard objective"
    return (f"twice the reviewed configs' p99 with one client: the standard "
            f"{P99_OBJECTIVE_MS:.0f} ms leaves no room on this host")
