"""A front model's warmup: the whole path once the server has started, its own stage before.

A front's warmup sample (a real text or image, core/families/warmup.py) goes the whole
path a request takes, decoding, the router, the BLS call to its primary encoder and the
answer, when it can: on a reload, a promotion or any load once the server has started,
with the encoder READY. At a server's start it cannot: Triton 2.51 loads the models of a
start in parallel (explicit mode, `--load-model`; only an ensemble's steps are ordered
after their models) and takes no BLS call, not even a readiness question, until every one
of them is loaded ("Server not ready"); that error path of the Python backend's
model-readiness message crashed the whole server here (boost::interprocess::lock_exception
with a three-instance front). So the front first asks the operating system whether Triton
has started (python_backends/warmup.py `server_started`: it listens only then), and
otherwise runs everything but the call: decoding, tokenizing or preprocessing into its
buffers, the encoder's input tensors, and the answer built from zero outputs. The encoders
warm themselves with their own samples (the same real input, as the front makes it), so
an encoder that is not loaded never fails its front's load. A primary the front runs in
process (python_backends/in_process.py) needs no call: its samples go the whole path at
any time. The log line of each sample says which path it took.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core import versions
from python_backends.bls import is_loaded
from python_backends.router import FamilyRouter
from python_backends.warmup import server_started

WARMUP_SERVED_BY = "warmup"  # what an answer built without the encoder says served it


class WarmedRouter(FamilyRouter):
    """A family's front (FamilyRouter) whose warmup samples go through its primary encoder
    when the server has started and the encoder is READY, up to it otherwise."""

    def setup(self, args: dict[str, str]) -> None:
        super().setup(args)
        config = versions.served_config(self.model_dir.parent / self.encoders["primary"].name)
        self.encoder_width = int(config.output[0].dims[-1])  # the zero outputs' width

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        if not self.warmup.active:
            return super().execute_requests(requests)
        primary = self.encoders["primary"].name
        started = server_started()
        level = self.levels[self.policy.level]
        # A primary run in process needs no BLS call, so no started server (unless a
        # rollout's candidate would take a share of the sample).
        local = self.local is not None and self.local.serves(-1) and self.rollout.state is None
        if level.encoder == "primary" and (local or (started and is_loaded(primary))):
            responses = super().execute_requests(requests)
            if not any(r.has_error() for r in responses):
                self.warmup.note = f"through {primary}{' in process' * local}"
                return responses
            why = "the answer through it failed"
        elif not started:
            why = "the server is starting"
        elif level.encoder != "primary":
            why = f"level {level.number} ({level.name}) does not call it"
        else:
            why = f"{primary} is not loaded"
        # A warmup sample answered with an error fails the load, and Triton 2.51 crashed
        # on it here (a reload at level 4): the sample is answered up to the encoder call.
        self.warmup.note = f"up to the encoder call: {why}"
        responses, valid = self.front.prepare_requests(requests)
        for i, request in valid.items():
            self.front.feeds(request.rows)
            zeros = np.zeros((len(request.rows), self.encoder_width), dtype=np.float32)
            responses[i] = self.front.respond(request, zeros,
                                              [WARMUP_SERVED_BY] * len(request.rows))
        return responses
