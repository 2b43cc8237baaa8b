"""A front's primary encoder run in the front's own process (`primary_in_process`).

On few cores the path around a fast encoder costs as much as the encoder: a BLS call is
a round trip through Triton's core, the encoder's batcher and a second stub. A host
profile (`tmr tune`, docs/serving.md#host-profile) may have the front run its
primary's served version itself: the same artifact, precision and threads as one of the
encoder's instances (tensor_model.served_runner), in the front's stub. Everything else is
unchanged: the rows, buckets and dedupe are the router's; a rollout's candidate, the
fallback and a pinned version the front does not hold go over BLS; SERVED_BY names the
encoder, its version and precision, as the answer is the same.

The served version is followed: when a release changes it, calls go over BLS (Triton
serves it) until the new version is loaded here, off the request path.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from core import versions
from core.host_profile import cgroup_cpu_limit, in_process_threads, usable_cores
from python_backends.errors import ChildModelError
from python_backends.runners import Runner, RunnerError
from python_backends.tensor_model import served_runner


class LocalPrimary:
    """One version of an encoder, loaded in this process; `load` follows the served one."""

    def __init__(self, repository: Path, name: str, output: str, threads: int,
                 log: Callable[[str], None]) -> None:
        """`threads`: the front's in_process_threads setting (core/settings.py)."""
        self.model_dir, self.name, self.output, self.log = repository / name, name, output, log
        self.threads = in_process_threads(threads, usable_cores(len(os.sched_getaffinity(0)),
                                                                 cgroup_cpu_limit()))
        self.version: int | None = None
        self.run: Runner | None = None
        self.lock = threading.Lock()  # one load at a time
        self.failed: dict[int, str] = {}  # version -> why it did not load (not retried)

    def load(self, version: int) -> None:
        """Load `version` at the served config's settings, then serve it here."""
        with self.lock:
            if version == self.version or version in self.failed:
                return
            try:  # in the version reader's thread: nothing may escape and stop it
                config = versions.served_config_json(self.model_dir)
            except (OSError, ValueError):
                return  # a config being rewritten: the next read tries again
            try:
                run = served_runner(config, self.model_dir / str(version), self.threads)
            except Exception as err:  # a runtime's own errors: BLS keeps serving it
                self.failed[version] = f"{type(err).__name__}: {err}"
                self.log(f"in-process {self.name} v{version} did not load, its calls go "
                         f"over BLS: {self.failed[version]}")
                return
            self.run, self.version = run, version
        self.log(f"in-process {self.name} v{version} loaded "
                 f"({config.get('backend') or config.get('platform')})")

    def serves(self, version: int) -> bool:
        """Whether a call pinned to `version` (-1: the served one) runs here."""
        return self.run is not None and version in (-1, self.version)

    def __call__(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        assert self.run is not None
        try:
            return self.run(feeds)[self.output]
        except RunnerError as err:  # what the encoder's stub would have answered
            raise ChildModelError(self.name, f"in-process call failed: {err}") from err
