"""Whether bulk work yields the CPU to interactive work: one decision per server start,
for every host and every served variant (reviewed, host profile, GPU).

Triton never preempts an execution, but the kernel does. The shared path of a front (the
front itself and its encoders: where bulk batches run) lowers its threads under the
server's `BulkCpu`; an interactive lane stays at normal priority
(python_backends/cpu_priority.py applies it, core/families/lanes.py writes the lane's
"normal"). Two settings, never none:

    idle   SCHED_IDLE: bulk threads run only on a core no normal thread wants, so a lane
           takes a core the moment it wakes. Beside a co-tenant that keeps the cores busy
           they get almost nothing: CFS weighs SCHED_IDLE at 3 against nice 0's 1024
           (docs/serving.md measures the bound).
    nice   nice 10: bulk threads keep about a tenth of a contended core (weight 110
           against 1024), so a busy neighbour slows them but cannot starve them.

`decide` chooses idle on a host whose other processes leave the cores idle, and nice
where they do not, where that cannot be read, and for a fleet's replicas on one host.
`tmr serve` samples the host before it starts the server and prints the choice with its
reason; `--bulk-cpu` overrides it. The choice reaches the stubs in BULK_CPU_ENV, which
the launcher sets; a stub started without it (Triton run by hand, compose) takes NICE,
the setting that is safe everywhere, and so does a server the launcher starts without a
decision (UNDECIDED: tests, scripts).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

from core import cpu_share
from core.variant import GPU, Variant

IDLE, NICE = "idle", "nice"
POLICIES = (IDLE, NICE)
BULK_NICE = 10  # nice 10: CFS weight 110 against nice 0's 1024
BULK_CPU_ENV = "TMR_BULK_CPU"  # the launcher's word to the stubs: "idle" or "nice:10"
# Other processes' share of all cores above which SCHED_IDLE could starve bulk work.
CO_TENANT_SHARE = 0.25
SAMPLE_S = 1.0  # how long `tmr serve` watches the host before deciding


@dataclass(frozen=True)
class BulkCpu:
    """How the shared path's threads yield: `policy` (IDLE or NICE, at `nice`) and why."""

    policy: str = NICE
    nice: int = BULK_NICE
    reason: str = ""

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"bulk CPU policy {self.policy!r}: expected one of {POLICIES}")

    def describe(self) -> str:
        """"SCHED_IDLE" or "nice 10"."""
        return "SCHED_IDLE" if self.policy == IDLE else f"nice {self.nice}"

    def line(self) -> str:
        """What `tmr serve` prints beside its profile line."""
        return f"bulk work yields the CPU: {self.describe()} ({self.reason})"

    def env_value(self) -> str:
        return self.policy if self.policy == IDLE else f"{NICE}:{self.nice}"

    @classmethod
    def parse(cls, raw: str, reason: str = "") -> BulkCpu:
        """"idle", "nice" or "nice:N" (ValueError otherwise)."""
        policy, _, level = raw.strip().partition(":")
        nice = int(level) if level else BULK_NICE
        if not 1 <= nice <= 19:
            raise ValueError(f"bulk CPU nice {nice} is outside 1..19")
        return cls(policy, nice, reason)

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> BulkCpu:
        """The server's choice, read once where a stub starts; NICE without one."""
        raw = (os.environ if env is None else env).get(BULK_CPU_ENV, "")
        if not raw:
            return cls(NICE, BULK_NICE, f"no ${BULK_CPU_ENV}: the setting safe on any host")
        return cls.parse(raw, f"${BULK_CPU_ENV}")


DEDICATED = BulkCpu(IDLE, BULK_NICE, "a dedicated host")
# A server started without a decision (the launcher's default: tests, scripts): its host
# is shared with whoever started it, so the setting safe on any host.
UNDECIDED = BulkCpu(NICE, BULK_NICE, "no decision where it started: the setting safe on any host")


def decide(variant: Variant, others_share: float | None, asked: str | None = None,
           replicas: int = 1) -> BulkCpu:
    """The bulk CPU policy of a server serving `variant` on a host whose other processes
    use `others_share` of all cores (0..1; None: unknown), unless `asked` names one.
    Replicas on one host are each other's co-tenants: one loading or restarting would
    starve the others' bulk work under SCHED_IDLE."""
    where = "the GPU profile's CPU side (tokenizing, pooling)" if variant == GPU \
        else variant.describe()
    if asked:
        return BulkCpu.parse(asked, f"--bulk-cpu, for {where}")
    if replicas > 1:
        return BulkCpu(NICE, BULK_NICE, f"{replicas} replicas on this host are each other's "
                                        f"co-tenants; for {where}")
    if others_share is None:
        return BulkCpu(NICE, BULK_NICE, f"the host's load could not be read; for {where}")
    used = f"other processes use {others_share:.0%} of the cores"
    if others_share >= CO_TENANT_SHARE:
        return BulkCpu(NICE, BULK_NICE, f"{used}: under SCHED_IDLE bulk work could starve "
                                        f"beside them; nice keeps it a share; for {where}")
    return BulkCpu(IDLE, BULK_NICE, f"{used}: bulk work takes the idle cores and a lane "
                                    f"a core the moment it wakes; for {where}")


def others_share(seconds: float = SAMPLE_S) -> float | None:
    """The share (0..1) of all cores that processes outside this one's tree used over
    `seconds`; None where /proc cannot be read."""
    try:
        before = cpu_share.read()
        time.sleep(seconds)
        return cpu_share.foreign_share(before, cpu_share.read())
    except OSError:
        return None
