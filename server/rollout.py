"""`tmr rollout`: the controller that takes a candidate version through its steps.

The routers split and measure (python_backends/rollout_traffic.py); this process judges
(server/rollout_judge.py) and edits the repository: the encoder's `rollout` parameter and
version policy (with_state), applied with the load API where the policy changes. Every
decision is one structured log line (logger `server.rollout`, its figures as fields) and
one line of `rollout_log.jsonl` in the model's folder.

One controller per model, held by a lock file (`.rollout.lock` in the model folder): a
second `tmr rollout` is refused, and `tmr rollout resume` takes over a rollout whose
controller is gone. Servers: one or more replicas sharing the repository; the controller
sums their counters and applies each change to every one (docs/scaling.md).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tmr_client import TritonClientError

from core import config_edit, rollout, versions
from core.families import family
from core.families.catalog import UnknownModelError
from core.model_config import mc
from core.variant import Variant
from server import rollout_judge
from server.admin_client import UNLOADED, AdminClient, ModelState
from server.errors import ReleaseError
from server.prometheus import samples
from server.release import check_candidate, states_of

log = logging.getLogger("server.rollout")
LOCK_FILE = ".rollout.lock"  # held by the model's controller while it runs
EDIT_LOCK_FILE = ".rollout.edit.lock"  # held for each read-modify-write of the state
LOG_FILE = "rollout_log.jsonl"
TRACE_FILE = "rollout_trace.csv"  # rows each version took, per look of the controller


@dataclass(frozen=True)
class Replica:
    """One server of the fleet: its HTTP host:port and its metrics URL."""

    url: str
    metrics_url: str


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# -- the repository side ----------------------------------------------------------------------
def read_state(model_dir: Path) -> rollout.RolloutState | None:
    return rollout.state_of(versions.read_config(model_dir))


def with_state(state: rollout.RolloutState | None, last: Mapping[str, Any] | None = None
               ) -> Callable[[mc.ModelConfig], None]:
    """A config change (core.config_edit) selecting the versions the state serves (both
    during a rollout; `last["served"]` once it ended) and setting or clearing it."""
    def change(config: mc.ModelConfig) -> None:
        config.version_policy.Clear()
        if state is not None:
            selected = sorted({state.stable, state.version})
            config.parameters[rollout.STATE_PARAMETER].string_value = state.to_json()
        else:
            selected = [int(last["served"])] if last else []
            if rollout.STATE_PARAMETER in config.parameters:
                del config.parameters[rollout.STATE_PARAMETER]
        config.version_policy.specific.versions.extend(selected)
        if last is not None:
            config.parameters[rollout.LAST_PARAMETER].string_value = json.dumps(
                dict(last), sort_keys=True, separators=(",", ":"))
    return change


def write_state(model_dir: Path, state: rollout.RolloutState | None,
                last: dict[str, Any] | None = None) -> None:
    """The state (and policy) into every config file of the model, the profiles too."""
    for path in versions.config_files(model_dir):
        config_edit.edit_file(path, with_state(state, last))


def record(model_dir: Path, event: str, state: rollout.RolloutState, reason: str,
           figures: dict[str, Any] | None = None, level: int = logging.INFO) -> dict[str, Any]:
    """One decision: a structured log line and a line of the model's rollout log."""
    line = {"at": now_iso(), "event": event, "model": model_dir.name, "rollout": state.id,
            "version": state.version, "stable": state.stable, "step": state.step,
            "step_name": state.current.describe(), "reason": reason,
            "figures": figures or {}}
    log.log(level, f"rollout {model_dir.name} v{state.version}: {event} "
                   f"({state.current.describe()}): {reason}", extra=line)
    with (model_dir / LOG_FILE).open("a", encoding="utf-8") as f:
        f.write(json.dumps(line, sort_keys=True) + "\n")
    return line


def read_log(model_dir: Path, rollout_id: str | None = None) -> list[dict[str, Any]]:
    """The decisions of the model's rollouts (of one, given its id)."""
    path = model_dir / LOG_FILE
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [line for line in lines if rollout_id is None or line.get("rollout") == rollout_id]


@contextmanager
def controller_lock(model_dir: Path) -> Iterator[None]:
    """Held for a controller's lifetime; a second controller of the model is refused."""
    path = model_dir / LOCK_FILE
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise rollout.RolloutError(f"a rollout controller of {model_dir.name} already runs "
                                   f"({holder})") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} since {now_iso()}")
    handle.flush()
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


@contextmanager
def state_edit(model_dir: Path) -> Iterator[None]:
    """One read-modify-write of the rollout state at a time (the controller's step, an
    operator's pause or abort): without it a pause written between the controller's read
    and its write of the next step was lost."""
    with (model_dir / EDIT_LOCK_FILE).open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def controller_running(model_dir: Path) -> bool:
    """Whether a controller holds the model's lock now."""
    path = model_dir / LOCK_FILE
    if not path.exists():
        return False
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def routing_fronts(repository: Path, encoder: str, variant: Variant) -> list[str]:
    """The front models whose primary encoder is `encoder` in the configs `variant` serves."""
    fronts = []
    for config_path in sorted(repository.glob("*/config.pbtxt")):
        try:
            params = versions.served_config(config_path.parent, variant).parameters
        except (OSError, ValueError):
            continue
        if "primary_model" in params and params["primary_model"].string_value == encoder:
            fronts.append(config_path.parent.name)
    return fronts


def thresholds_of(model_dir: Path) -> rollout_judge.Thresholds:
    """The candidate's thresholds: its family's agreement keys, its gate parameters."""
    params = {k: p.string_value for k, p in versions.read_config(model_dir).parameters.items()}
    try:
        fam = family(params.get("family", ""))
    except (KeyError, UnknownModelError) as err:
        raise rollout.RolloutError(f"{model_dir.name} is not a family encoder: {err}") from err
    return rollout_judge.thresholds(params, *fam.rollout.agreement_gates)


def check_start(model_dir: Path, version: int, variant: Variant) -> int:
    """Refuse a rollout that cannot run, before anything changes; the stable version."""
    if not (model_dir / "config.pbtxt").exists():
        raise rollout.RolloutError(f"unknown model {model_dir.name!r}: "
                                   f"no {model_dir}/config.pbtxt")
    running = read_state(model_dir)
    if running is not None:
        raise rollout.RolloutError(f"a rollout of {model_dir.name} v{running.version} is "
                                   f"running ({running.current.describe()}): `tmr rollout "
                                   f"abort {model_dir.name}` or let it finish first")
    if not routing_fronts(model_dir.parent, model_dir.name, variant):
        raise rollout.RolloutError(f"no front model routes to {model_dir.name} as its "
                                   "primary encoder, so no live traffic could judge it: use "
                                   "`tmr promote`")
    check_candidate(model_dir, version)
    stable = versions.served_version(model_dir)
    if stable is None:
        raise rollout.RolloutError(f"{model_dir.name} serves no version to compare a "
                                   "candidate with")
    if stable == version:
        raise rollout.RolloutError(f"{model_dir.name} already serves v{version}")
    thresholds_of(model_dir)
    return stable


# -- the server side ------------------------------------------------------------------------
def apply(replicas: list[Replica], model_dir: Path, variant: Variant) -> None:
    """Hand the served on-disk config to every replica (it loads or unloads versions)."""
    config = versions.served_config(model_dir, variant)
    for replica in replicas:
        try:
            with AdminClient(replica.url) as admin:
                admin.load(model_dir.name, config)
        except TritonClientError as err:
            raise ReleaseError(f"{replica.url} refused to load {model_dir.name}: {err}") from err


def wait_versions(replicas: list[Replica], model: str, want: set[int], timeout_s: float
                  ) -> None:
    """Until every replica holds exactly `want` READY and answers a probe of each."""
    deadline = time.monotonic() + timeout_s
    for replica in replicas:
        with AdminClient(replica.url) as admin:
            while True:
                states = states_of(admin, model)
                failed = [f"v{n}: {why}" for n, (s, why) in states.items()
                          if n in want and s == ModelState.UNAVAILABLE and why
                          and why != UNLOADED]
                if failed:
                    raise ReleaseError(f"{model} failed to load on {replica.url}: "
                                       f"{'; '.join(failed)}")
                ready = {n for n, (s, _) in states.items() if s == ModelState.READY}
                if ready == want and all(admin.probe_model(model, str(n)).ok for n in want):
                    break
                if time.monotonic() > deadline:
                    raise ReleaseError(f"{model} on {replica.url}: READY {sorted(ready)}, "
                                       f"expected {sorted(want)} after {timeout_s:.0f} s")
                time.sleep(0.25)


def scrape(replicas: list[Replica], encoder: str, state: rollout.RolloutState,
           trace: Path | None = None) -> rollout_judge.Window:
    """The rollout's counters summed over the replicas; with `trace`, a line per version
    and path of the rows so far is appended to that CSV."""
    every: list = []
    for replica in replicas:
        try:
            every += samples(replica.metrics_url)
        except OSError as err:  # one replica down holds the step: no verdict on part of it
            raise OSError(f"{replica.metrics_url} unreachable ({err})") from err
    if trace is not None:
        rows: dict[tuple[str, str], float] = {}
        for s in every:
            if s.name == "tmr_rollout_rows_total" and s.labels.get("encoder") == encoder:
                key = (s.labels.get("version", ""), s.labels.get("path", ""))
                rows[key] = rows.get(key, 0.0) + s.value
        with trace.open("a", encoding="utf-8") as f:
            f.writelines(f"{state.id},{time.time():.3f},{state.step},{version},{path},{n:g}\n"
                         for (version, path), n in sorted(rows.items()))
    return rollout_judge.window_from(every, encoder, state)


# -- the controller -----------------------------------------------------------------------------
@dataclass
class Controller:
    """Runs one model's rollout to its end: promoted, rolled back or aborted."""

    model_dir: Path
    replicas: list[Replica]
    variant: Variant  # the configs the replicas serve (core/variant.py)
    poll_s: float = 1.0
    load_timeout_s: float = 120.0
    server_timeout_s: float = 300.0  # how long the servers may be unreachable (a restart)

    @property
    def model(self) -> str:
        return self.model_dir.name

    def start(self, state: rollout.RolloutState) -> rollout.RolloutState:
        """Write the first step, load the candidate beside the stable version, wait until
        both answer. A candidate that fails to load never takes traffic: the state goes."""
        state = replace(state, id=now_iso())
        write_state(self.model_dir, state)
        record(self.model_dir, "start", state, f"v{state.version} beside v{state.stable}",
               {"fronts": ", ".join(routing_fronts(self.model_dir.parent, self.model,
                                                   self.variant))})
        try:
            apply(self.replicas, self.model_dir, self.variant)
            wait_versions(self.replicas, self.model, {state.stable, state.version},
                          self.load_timeout_s)
        except ReleaseError as err:
            self.finish(state, rollout.ROLLED_BACK, f"the candidate did not load: {err}", {})
            raise
        return state

    def finish(self, state: rollout.RolloutState, outcome: str, reason: str,
               figures: dict[str, Any]) -> str:
        """End the rollout: the candidate serves (promoted) or the stable one does. When
        someone else ended it meanwhile (an abort), theirs is the outcome."""
        served = state.version if outcome == rollout.PROMOTED else state.stable
        last = {"id": state.id, "version": state.version, "stable": state.stable,
                "served": served, "outcome": outcome, "reason": reason, "at": now_iso()}
        with state_edit(self.model_dir):
            current = read_state(self.model_dir)
            if current is None or current.id != state.id:
                ended = rollout.last_of(versions.read_config(self.model_dir)) or {}
                return str(ended.get("outcome", rollout.ABORTED))
            if outcome == rollout.PROMOTED and not versions.read_history(self.model_dir):
                versions.append_history(self.model_dir, state.stable, "initial")
            write_state(self.model_dir, None, last)
            if outcome == rollout.PROMOTED:
                versions.append_history(self.model_dir, served, "rollout")
        record(self.model_dir, outcome, current, reason, figures,
               logging.INFO if outcome == rollout.PROMOTED else logging.WARNING)
        try:
            apply(self.replicas, self.model_dir, self.variant)
            wait_versions(self.replicas, self.model, {served}, self.load_timeout_s)
        except ReleaseError as err:  # the repository says it: a restart or reload applies it
            log.error(f"rollout {self.model}: {outcome} written to the repository, not yet "
                      f"applied: {err}", extra={"model": self.model, "rollout": state.id})
        return outcome

    def run(self, state: rollout.RolloutState) -> str:
        """Judge the steps until the end; the outcome."""
        thresholds = thresholds_of(self.model_dir)
        base, began, unreachable_since = None, time.monotonic(), None
        step, rechecking = state.step, False
        while True:
            time.sleep(self.poll_s)
            current = read_state(self.model_dir)
            if current is None or current.id != state.id:
                last = rollout.last_of(versions.read_config(self.model_dir)) or {}
                return str(last.get("outcome", rollout.ABORTED))  # `tmr rollout abort` ended it
            state = current
            try:
                totals = scrape(self.replicas, self.model, state,
                                self.model_dir / TRACE_FILE)
            except OSError as err:
                if unreachable_since is None:
                    unreachable_since = time.monotonic()
                    record(self.model_dir, "held", state,
                           f"{err}: the step waits, unjudged, until every replica answers "
                           f"(at most {self.server_timeout_s:.0f} s)", {},
                           logging.WARNING)
                if time.monotonic() - unreachable_since > self.server_timeout_s:
                    raise ReleaseError(f"servers unreachable for {self.server_timeout_s:.0f} "
                                       f"s ({err}); the rollout holds at "
                                       f"{state.current.describe()}: `tmr rollout resume "
                                       f"{self.model}` continues it") from err
                continue
            if unreachable_since is not None:  # every replica answers again
                unreachable_since = None
                record(self.model_dir, "window restarted", state,
                       "every replica answers again: the step is measured afresh (a "
                       "replica that restarted counts from zero)")
                base, began = totals, time.monotonic()
                continue
            if state.step != step:  # resumed elsewhere, or a new step
                base, began, step, rechecking = None, time.monotonic(), state.step, False
            delta = rollout_judge.minus(totals, base) if base is not None else None
            if delta is None:  # first look at this step, or a server restarted
                if base is not None:
                    record(self.model_dir, "window restarted", state,
                           "a server's counters went back to zero (a restart)")
                base, began = totals, time.monotonic()
                continue
            verdict = rollout_judge.judge(state, delta, thresholds, time.monotonic() - began,
                                          rechecking)
            if verdict.action is rollout_judge.Action.RECHECK:  # measure again before a verdict
                record(self.model_dir, "recheck", state, verdict.reason, verdict.figures)
                base, began, rechecking = totals, time.monotonic(), True
                continue
            if verdict.action is rollout_judge.Action.ROLLBACK:
                return self.finish(state, rollout.ROLLED_BACK, verdict.reason, verdict.figures)
            if verdict.action is not rollout_judge.Action.ADVANCE:
                continue
            if state.last_step:
                return self.finish(state, rollout.PROMOTED, verdict.reason, verdict.figures)
            with state_edit(self.model_dir):
                current = read_state(self.model_dir)
                if current != state:  # paused, resumed or ended meanwhile: look again
                    continue
                record(self.model_dir, "advance", state, verdict.reason, verdict.figures)
                state = state.advanced()
                write_state(self.model_dir, state)
            base, began, step, rechecking = totals, time.monotonic(), state.step, False


def abort(model_dir: Path, replicas: list[Replica], reason: str,
          variant: Variant) -> rollout.RolloutState:
    """End the running rollout at once: the stable version takes all traffic."""
    state = read_state(model_dir)
    if state is None:
        raise rollout.RolloutError(f"no rollout of {model_dir.name} is running")
    Controller(model_dir, replicas, variant).finish(state, rollout.ABORTED, reason, {})
    return state


def set_paused(model_dir: Path, paused: bool) -> rollout.RolloutState:
    """Hold (or release) the current step; breaches still roll back while paused."""
    with state_edit(model_dir):
        state = read_state(model_dir)
        if state is None:
            raise rollout.RolloutError(f"no rollout of {model_dir.name} is running")
        state = replace(state, paused=paused)
        write_state(model_dir, state)
    record(model_dir, "paused" if paused else "resumed", state, "operator")
    return state

