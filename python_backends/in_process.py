"""An encoder run in the front's own process: the lane's primary, a profile's primary, and
every front's fallback.

On few cores the path around a fast encoder costs as much as the encoder: a BLS call is
a round trip through Triton's core, the encoder's batcher and a second stub; and each stub
is a process that holds its own Python, numpy and runtime (about 60 MB before a weight).
So a front may run an encoder's served version itself, with the same artifact, precision
and runtime as the encoder's instances (runtime/served.py served_runner):

- the primary (`primary_in_process`): an interactive lane always, a host profile where it
  measured faster; loaded at setup and kept;
- the fallback, on demand: the ladder needs it only under pressure or when the primary is
  gone, so it is loaded when the ladder first leaves level 0 (off the request path), or by
  the batch that fails over, and let go once level 0 has held `RELEASE_AFTER_S`. A front at
  rest holds no fallback and its Triton model is not loaded (core/startup.py).

The rows, buckets and dedupe stay the router's; a rollout's candidate and a pinned version
this process does not hold go over BLS; SERVED_BY names the encoder, its version and
precision, as the answer is the same. The served version is followed: when a release
changes it, calls go over BLS (Triton serves it) until the new version is loaded here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from core import versions
from core.messages import FailureKind
from core.variant import REVIEWED, Variant
from runtime.errors import ChildModelError, ErrorCode
from runtime.runners import Runner, RunnerError
from runtime.served import served_runner

RELEASE_AFTER_S = 60.0  # an on-demand encoder goes once level 0 has held this long


class LocalEncoder:
    """One version of an encoder, loaded in this process; `load` follows the served one,
    `release` lets an on-demand one go."""

    def __init__(self, repository: Path, name: str, output: str, threads: int,
                 log: Callable[[str], None], variant: Variant = REVIEWED) -> None:
        """`threads`: its runtime's intra-op threads in this process; `variant`: the
        configs the server serves (the encoder's settings as its instances have them)."""
        self.model_dir, self.name, self.output, self.log = repository / name, name, output, log
        self.variant = variant
        self.threads = threads
        self.version: int | None = None
        self.run: Runner | None = None
        self.lock = threading.Lock()  # one load at a time
        self.failed: dict[int, str] = {}  # version -> why it did not load (not retried)

    def load(self, version: int) -> bool:
        """Load `version` at the served config's settings, then serve it here; whether it
        serves `version` now."""
        with self.lock:
            if version == self.version or version in self.failed:
                return version == self.version
            try:  # in the version reader's thread: nothing may escape and stop it
                config = versions.served_config_json(self.model_dir, self.variant)
            except (OSError, ValueError):
                return False  # a config being rewritten: the next read tries again
            began = time.monotonic()
            try:
                run = served_runner(config, self.model_dir / str(version), self.threads)
            except Exception as err:  # a runtime's own errors: BLS keeps serving it
                self.failed[version] = f"{type(err).__name__}: {err}"
                self.log(f"in-process {self.name} v{version} did not load, its calls go "
                         f"over BLS: {self.failed[version]}")
                return False
            self.run, self.version = run, version
        runtime = config.get("backend") or config.get("platform")
        self.log(f"in-process {self.name} v{version} loaded in "
                 f"{time.monotonic() - began:.2f} s ({runtime}, {self.threads} thread(s))")
        return True

    def release(self, why: str) -> None:
        """Let the runtime go (a call running on it keeps its own reference to the end)."""
        with self.lock:
            if self.run is None:
                return
            self.run, self.version = None, None
        self.log(f"in-process {self.name} released: {why}")

    @property
    def loaded(self) -> bool:
        return self.run is not None

    def serves(self, version: int) -> bool:
        """Whether a call pinned to `version` (-1: the served one) runs here."""
        return self.run is not None and version in (-1, self.version)

    def __call__(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        run = self.run
        if run is None:  # released between the check and the call
            raise ChildModelError(self.name, "in-process encoder was released",
                                  FailureKind.NOT_READY, ErrorCode.UNAVAILABLE)
        try:
            return run(feeds)[self.output]
        except RunnerError as err:  # what the encoder's stub would have answered
            raise ChildModelError(self.name, f"in-process call failed: {err}") from err


class OnDemand:
    """When an on-demand encoder should be held: from the first level above 0 (or a
    failover) until level 0 has held `release_after_s` (pure; the clock is passed in)."""

    def __init__(self, release_after_s: float = RELEASE_AFTER_S) -> None:
        self.release_after_s = release_after_s
        self.held = False
        self.calm_since: float | None = None  # when level 0 came back, while held

    def wanted(self, level: int, now: float) -> bool:
        """Whether to hold it at `level` now."""
        if level > 0:
            self.held, self.calm_since = True, None
        elif self.held:
            if self.calm_since is None:
                self.calm_since = now
            self.held = now - self.calm_since < self.release_after_s
        return self.held
