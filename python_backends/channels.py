"""How a front reaches each encoder, chosen once at setup: over BLS, or in its own process.

A channel is a call `(feeds, version) -> outputs` (version -1: the served one). The front
builds one per encoder when it starts (python_backends/front.py `_channels`): the primary
over BLS, or in process where `primary_in_process` says so (a lane, a host profile); the
fallback in process, on demand (python_backends/in_process.py). A local channel still goes
over BLS for a version it does not hold: a rollout's candidate, a promotion in flight.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from core.messages import FailureKind
from python_backends.bls import bls_infer
from python_backends.in_process import LocalEncoder
from runtime.errors import ChildModelError

Channel = Callable[[Mapping[str, np.ndarray], int], np.ndarray]


class BlsChannel:
    """The encoder model over BLS, pinned to the version asked for: during a release
    Triton may hold two versions, and an unpinned call goes to the newest. A pinned version
    Triton does not hold yet (a promotion being applied) falls back to an unpinned call."""

    def __init__(self, name: str, output: str) -> None:
        self.name, self.output = name, output

    def __call__(self, feeds: Mapping[str, np.ndarray], version: int = -1) -> np.ndarray:
        try:
            return bls_infer(self.name, feeds, [self.output], version)[self.output]
        except ChildModelError as err:
            if version < 0 or err.kind not in (FailureKind.NOT_FOUND, FailureKind.NOT_READY):
                raise
        return bls_infer(self.name, feeds, [self.output])[self.output]


class LocalChannel:
    """The encoder in this process where it holds the version asked for; `ensure`, when
    given, loads it on the request path first (an on-demand fallback the batch needs now);
    any other version over BLS."""

    def __init__(self, local: LocalEncoder, bls: BlsChannel,
                 ensure: Callable[[], bool] | None = None) -> None:
        self.local, self.bls, self.ensure = local, bls, ensure

    def __call__(self, feeds: Mapping[str, np.ndarray], version: int = -1) -> np.ndarray:
        if self.local.serves(version) or (self.ensure is not None and version < 0
                                          and self.ensure()):
            return self.local(dict(feeds))
        return self.bls(feeds, version)
