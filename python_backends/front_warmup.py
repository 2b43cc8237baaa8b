"""A front model's warmup: its samples warm its own stage, never its encoders (no BLS).

A front's warmup sample (a real text or image, core/families/warmup.py) is decoded,
validated and tokenized or preprocessed into the front's buffers exactly as a request is,
and answered without outputs, which is all Triton's warmup asks. It does not go on to the
encoder over BLS, because at a server's start it cannot: Triton 2.51 loads the models of
a start in parallel (explicit mode, `--load-model`; only an ensemble's steps are ordered
after their models) and takes no BLS call, not even a readiness question, until every
one of them is loaded ("Server not ready"); and that error path of the Python backend's
model-readiness message crashed the whole server here (boost::interprocess::lock_exception
with a three-instance front). The encoders warm themselves with their own samples (the
same real input, as the front makes it), so a front is READY warm and independent of
them: an encoder that is not loaded never fails its front's load.
"""

from __future__ import annotations

from typing import Any

from python_backends.base import ok_response
from python_backends.router import FamilyRouter


class WarmedRouter(FamilyRouter):
    """A family's front (FamilyRouter) whose warmup samples stop before the encoder."""

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        if not self.warmup.active:
            return super().execute_requests(requests)
        responses, _ = self.front.prepare_requests(requests)
        self.warmup.note = "the front's own stage; its encoders warm with their own samples"
        return [r if r is not None else ok_response({}) for r in responses]
