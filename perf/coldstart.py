"""The first requests after a start, a reload and a promotion, against the steady p50.

    python -m perf.coldstart [--rounds 3] [--first 3] [--steady 40] [--repository DIR]

For the default front of each family (embed, efficientnet_lite0) and the encoder it
routes to, on a copy of the repository served as `tmr serve` serves it, twice: as the
configs are ("warm": their model_warmup) and with model_warmup stripped from every config
of the copy ("cold", core.families.warmup.without_warmup). Each variant runs, `--rounds`
times:

  start      a fresh server: the fronts' first requests; then a second fresh server: the
             encoders' first requests, called directly (no front request warmed them)
  steady     on each server, `--steady` more requests of each model one at a time: the
             p50 that every ratio of that server divides by
  reload     on the second server, each model's running config sent back through the
             load API (new instances, server.admin_client reload): its first requests
  promotion  a copy of the encoder's version 1 as a new version, promoted as `tmr promote`
             does it without its probe request (the policy edited on the copy's disk, the
             config handed to the load API, until it alone is READY): the front's first
             requests (through the new version); then another copy: the encoder's own

Reloads and promotions are followed by SETTLE_S (2 s) before the first request: the
replaced instances are torn down and the fronts route to the new version by then.

Each request is one real input, one at a time over one HTTP connection opened before:
a text of 16 to 30 tokens, or a 600x400 JPEG photo (perf/inputs, not the warmup's own
input); an encoder gets what its front makes of it. The ratio is the first request's
latency over the steady p50 (median over the rounds, and the worst round); the last column
takes the slowest of the first `--first` (a model has two or three instances, and a later
request may reach a cold one that the first did not). The CPU and its flags and each
server's time to ready head the report (perf/results/coldstart-*/coldstart.md).
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from core import config_edit
from core.families import IMAGE_CLASSIFICATION, TEXT_EMBEDDING
from core.families.catalog import FamilyModel, catalog, default_front, find
from core.families.warmup import without_warmup
from core.hardware import host_cpu
from core.paths import DEFAULT_REPOSITORY
from core.repository import copy_repository, edit_config
from core.versions import read_config
from export.warmup import client_inputs, image_feeds, text_feeds
from perf import harness
from server.admin_client import AdminClient, infer_inputs

TEXT_TOKENS = (16, 30)  # the request text's token count: typical, and not the warmup's 32
VARIANTS = ("warm", "cold")
# After a reload or a promotion, before the first request: the replaced instances' teardown
# and the fronts' reading of the served version (every second, router.py) are over.
SETTLE_S = 2.0
EVENTS = ("start", "reload", "promotion")


@dataclass(frozen=True)
class Subject:
    """One model as the measurement calls it: its name and one request's inputs."""

    model: str
    inputs: dict[str, np.ndarray]
    encoder: bool


@dataclass(frozen=True)
class Row:
    """First requests against the steady p50, for one model after one event."""

    variant: str
    event: str
    model: str
    first_ms: float
    worst_ms: float
    p50_ms: float

    @property
    def ratio(self) -> float:
        return self.first_ms / self.p50_ms

    @property
    def worst_ratio(self) -> float:
        return self.worst_ms / self.p50_ms


def request_text(repository: Path, model: FamilyModel) -> str:
    """A client text of TEXT_TOKENS tokens (the first such one of the perf inputs)."""
    texts = client_inputs(model)
    ids = text_feeds(repository, model, texts)["attention_mask"].sum(axis=1)
    return next(t for t, n in zip(texts, ids) if TEXT_TOKENS[0] <= n <= TEXT_TOKENS[1])


def subjects(repository: Path) -> list[tuple[Subject, Subject]]:
    """(front, its primary encoder) of each family's default front, with one request."""
    pairs = []
    for fam in (TEXT_EMBEDDING, IMAGE_CLASSIFICATION):
        model = find(repository, default_front(repository, fam.name))
        if fam is TEXT_EMBEDDING:
            raw = request_text(repository, model).encode()
            feeds = text_feeds(repository, model, [raw.decode()])
        else:
            raw = base64.b64decode(client_inputs(model)[1])  # the first is the warmup's
            feeds = image_feeds(repository, model, raw)
        front = {fam.front_inputs[0].name: np.array([[raw]], dtype=np.object_)}
        pairs.append((Subject(model.front, front, False),
                      Subject(model.encoder(model.primary), feeds, True)))
    return pairs


def latencies(client: httpclient.InferenceServerClient, subject: Subject, n: int) -> list[float]:
    """`n` requests of `subject`, one after the other; each one's milliseconds."""
    inputs = infer_inputs(subject.inputs)
    out = []
    for _ in range(n):
        began = time.perf_counter()
        client.infer(subject.model, inputs)
        out.append((time.perf_counter() - began) * 1000)
    return out


class Run:
    """One variant's measurements: its rows, and the p50s each server measured."""

    def __init__(self, variant: str, first: int, steady: int) -> None:
        self.variant, self.first, self.steady = variant, first, steady
        self.rows: list[Row] = []
        self.ready_s: list[float] = []

    @contextmanager
    def served(self, repository: Path, log: Path
               ) -> Iterator[tuple[httpclient.InferenceServerClient, str]]:
        """A fresh server as `tmr serve` loads it (its time to ready recorded): an HTTP
        client whose connection is open before any timed request, and the server's URL."""
        server = harness.server(repository, log, load_all=False)
        began = time.monotonic()
        with server:
            self.ready_s.append(time.monotonic() - began)
            client = httpclient.InferenceServerClient(server.http_url)
            client.is_server_live()
            yield client, server.http_url

    def firsts(self, client: httpclient.InferenceServerClient, event: str,
               measured: list[Subject]) -> dict[str, tuple[str, list[float]]]:
        """The first requests of each subject, kept for the rows once the p50 is known."""
        return {s.model: (event, latencies(client, s, self.first)) for s in measured}

    def p50s(self, client: httpclient.InferenceServerClient,
             measured: list[Subject]) -> dict[str, float]:
        return {s.model: statistics.median(latencies(client, s, self.steady))
                for s in measured}

    def add(self, firsts: dict, p50: dict[str, float]) -> None:
        for model, (event, ms) in firsts.items():
            self.rows.append(Row(self.variant, event, model, ms[0], max(ms), p50[model]))


def promote_copy(admin: AdminClient, repository: Path, model: str, version: int) -> None:
    """`version` of `model`, a copy of version 1, promoted as `tmr promote` does it but
    without its probe request: the version policy edited on disk (the fronts route to the
    version the repository serves), the config handed to the load API, then the wait until
    it alone is READY."""
    (repository / model / str(version)).symlink_to((repository / model / "1").resolve())
    config_edit.set_version(repository / model, version)
    admin.load(model, read_config(repository / model))
    deadline = time.monotonic() + 120
    while {e.version for e in admin.index() if e.name == model and e.state == "READY"} != {
            version}:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{model} version {version} did not become the only one READY")
        time.sleep(0.1)


def measure(variant: str, source: Path, out: Path, first: int, steady: int,
            rounds: int) -> Run:
    """Every event of one variant (see the module docstring), `rounds` times, on its own
    copy."""
    run = Run(variant, first, steady)
    with tempfile.TemporaryDirectory(prefix="tmr-coldstart-") as tmp:
        repository = copy_repository([source], Path(tmp) / "repository")
        if variant == "cold":
            for name in (m for model in catalog(repository) for m in model.models):
                edit_config(repository, name, without_warmup)
        pairs = subjects(repository)
        fronts, encoders = [f for f, _ in pairs], [e for _, e in pairs]
        versions = iter(range(2, 2 + 2 * len(pairs) * rounds))
        for n in range(rounds):
            with run.served(repository, out / f"{variant}-{n}-fronts.log") as (client, _):
                run.add(run.firsts(client, "start", fronts), run.p50s(client, fronts))
            with run.served(repository, out / f"{variant}-{n}.log") as (client, url):
                started = run.firsts(client, "start", encoders)
                p50 = run.p50s(client, fronts + encoders)
                run.add(started, p50)
                with AdminClient(url) as admin:
                    for subject in encoders + fronts:
                        admin.reload(subject.model)
                        time.sleep(SETTLE_S)
                        run.add(run.firsts(client, "reload", [subject]), p50)
                    for front, encoder in pairs:
                        for measured in (front, encoder):
                            promote_copy(admin, repository, encoder.model, next(versions))
                            time.sleep(SETTLE_S)
                            run.add(run.firsts(client, "promotion", [measured]), p50)
    return run


def table(rows: list[Row]) -> str:
    """One line per event, model and variant: medians over the rounds, and the worst."""
    lines = ["| event | model | variant | first ms | steady p50 ms | first / p50 | "
             "worst first / p50 | worst of first / p50 |", "| --- | --- | --- |" + " ---: |" * 5]
    groups: dict[tuple[str, str, str], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.event, row.model, row.variant), []).append(row)
    for (event, model, variant), group in sorted(groups.items(), key=lambda kv: (
            EVENTS.index(kv[0][0]), kv[0][1], VARIANTS.index(kv[0][2]))):
        med = statistics.median
        lines.append(f"| {event} | {model} | {variant} | {med(r.first_ms for r in group):.1f} | "
                     f"{med(r.p50_ms for r in group):.1f} | "
                     f"**{med(r.ratio for r in group):.2f}** | "
                     f"{max(r.ratio for r in group):.2f} | "
                     f"{max(r.worst_ratio for r in group):.2f} |")
    return "\n".join(lines)


def report(runs: list[Run], first: int, steady: int, rounds: int,
           load: tuple[float, float]) -> str:
    cpu = host_cpu()
    ready = "; ".join(f"{run.variant} {' / '.join(f'{s:.0f}' for s in run.ready_s)} s"
                      for run in runs)
    return "\n".join([
        "## First request after a start, a reload and a promotion", "",
        f"CPU: {cpu['model']}, {cpu['cores']} cores, flags of note: "
        f"{', '.join(cpu['flags']) or 'none'}. {rounds} rounds; in each, the first {first} "
        f"requests of each model after each event, then {steady} more for the steady p50 "
        f"(one at a time). Columns: the medians over the rounds, the worst first request "
        f"over them, and the worst of all first {first}. Server start to ready: {ready}. "
        f"Load average (1 min) at the start and the end: {load[0]:.1f}, {load[1]:.1f}.",
        "", table([r for run in runs for r in run.rows])])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.coldstart", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--first", type=int, default=3, help="first requests kept per event")
    parser.add_argument("--steady", type=int, default=40, help="requests for the steady p50")
    parser.add_argument("--rounds", type=int, default=3, help="starts, reloads, promotions each")
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    args = parser.parse_args(argv)
    out = harness.run_dir("coldstart")
    began = os.getloadavg()[0]  # the host is shared: how busy it was is part of the result
    runs = [measure(v, args.repository, out, args.first, args.steady, args.rounds)
            for v in VARIANTS]
    load = (began, os.getloadavg()[0])
    data = {"cpu": host_cpu(), "load_average": load,
            "ready_s": {r.variant: r.ready_s for r in runs},
            "rows": [asdict(r) | {"ratio": r.ratio, "worst_ratio": r.worst_ratio}
                     for run in runs for r in run.rows]}
    harness.write_report(out, "coldstart",
                         report(runs, args.first, args.steady, args.rounds, load), data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
