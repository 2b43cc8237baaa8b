"""A front model's warmup: each sample takes a request's whole path through the primary
encoder when the encoder can answer, and everything but the encoder call otherwise.

The encoder can answer when it runs in process, or when Triton has started and it is READY.
While Triton starts it takes no BLS call, not even a readiness question, and such a call can
crash the server, so the front asks the operating system first (python_backends/warmup.py
`server_started`) and otherwise answers from zero outputs. The log line of each sample says
which path it took.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core import versions
from python_backends.bls import is_loaded
from python_backends.front import FamilyRouter
from python_backends.warmup import server_started

WARMUP_SERVED_BY = "warmup"  # what an answer built without the encoder says served it


class WarmedRouter(FamilyRouter):
    """A family's front (FamilyRouter) whose warmup samples go through its primary encoder
    when the server has started and the encoder is READY, up to it otherwise."""

    def setup(self, args: dict[str, str]) -> None:
        super().setup(args)
        config = versions.served_config(self.model_dir.parent / self.encoders["primary"].name,
                                        self.variant)
        self.encoder_width = int(config.output[0].dims[-1])  # the zero outputs' width

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        if not self.warmup.active:
            return super().execute_requests(requests)
        primary = self.encoders["primary"].name
        started = server_started()
        level = self.levels[self.policy.level]
        # A primary run in process needs no BLS call, so no started server (unless a
        # rollout's candidate would take a share of the sample).
        in_process = self.local.get(primary)
        local = in_process is not None and in_process.serves(-1) and self.rollout.state is None
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
