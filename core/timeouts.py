"""Every timeout of the project in one table, each named by what it bounds (pure).

Four kinds, never mixed under one name:

- queue: how long a request may wait in a model's queue before Triton refuses it (503,
  `Request timeout expired`), per priority level; a client may ask for less
  (`--queue-timeout-s`, the SDK's `timeout_ms`);
- deadline: how long a client waits for one call, retries included (the SDK's `timeout=`);
- wait: how long a command waits for the server to reach a state it asked for (a new
  version to answer, a level to be reported; `--wait-s`);
- proxy: how long the front door waits on Triton, which must be above every queue timeout
  plus an execution.

The values the SDK needs are its own (tmr_client.contract: the SDK installs alone); this
table imports them, so each is written once. docs/cli.md and docs/sdk.md show `markdown()`
(tests/unit/test_timeouts.py keeps them equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tmr_client.contract import MAX_RETRY_AFTER_S, NETWORK_TIMEOUT_S, READY_WAIT_S


class Kind(StrEnum):
    """What a timeout bounds."""

    QUEUE = "queue"
    DEADLINE = "deadline"
    WAIT = "wait"
    PROXY = "proxy"


@dataclass(frozen=True)
class Timeout:
    """One timeout: its name, kind, seconds, what it bounds and where it is set."""

    name: str
    kind: Kind
    seconds: float
    bounds: str
    set_by: str

    @property
    def microseconds(self) -> int:
        return round(self.seconds * 1_000_000)


QUEUE_PRIORITY_1 = Timeout("queue, priority 1", Kind.QUEUE, 10.0,
                           "a priority-1 request's wait in a front's queue",
                           "the front's `dynamic_batching` (core/settings.py FRONT_BATCHING)")
QUEUE_PRIORITY_2 = Timeout("queue, priority 2", Kind.QUEUE, 2.0,
                           "a priority-2 (bulk, the default) request's wait: the starvation rule",
                           "the front's `dynamic_batching`")
CALL_DEADLINE = Timeout("call deadline", Kind.DEADLINE, 0.0,
                        "one SDK call, its chunks and retries together (0: none)",
                        "`Client(timeout=)` or a call's `timeout=`")
NETWORK = Timeout("HTTP socket", Kind.DEADLINE, NETWORK_TIMEOUT_S,
                  "an HTTP connection without a `timeout=`", "the SDK (tmr_client.transport)")
RETRY_AFTER = Timeout("longest Retry-After", Kind.DEADLINE, MAX_RETRY_AFTER_S,
                      "a Retry-After the SDK waits out; a longer one raises",
                      "`RetryPolicy(max_retry_after_s=)`")
READY_WAIT = Timeout("ready wait", Kind.WAIT, READY_WAIT_S,
                     "`wait_ready()`: until the server (or a model) is ready",
                     "`wait_ready(timeout_s=)`")
RELEASE_WAIT = Timeout("release wait", Kind.WAIT, 90.0,
                       "`tmr promote|rollback`: until the new version answers",
                       "`--wait-s`")
LEVEL_WAIT = Timeout("level wait", Kind.WAIT, 30.0,
                     "`tmr degrade`: until the front reports the level", "`--wait-s`")
PROXY_READ = Timeout("front door read", Kind.PROXY, 60.0,
                     "nginx waiting on Triton's answer: above the longest queue timeout plus "
                     "an execution", "server/settings.py FrontDoorSettings")

TABLE: tuple[Timeout, ...] = (QUEUE_PRIORITY_1, QUEUE_PRIORITY_2, CALL_DEADLINE, NETWORK,
                              RETRY_AFTER, READY_WAIT, RELEASE_WAIT, LEVEL_WAIT, PROXY_READ)


def markdown() -> str:
    """The table as docs/cli.md and docs/sdk.md show it."""
    rows = ["| timeout | kind | default | bounds | set by |", "| --- | --- | ---: | --- | --- |"]
    rows += [f"| {t.name} | {t.kind} | {f'{t.seconds:g} s' if t.seconds else 'none'} | "
             f"{t.bounds} | {t.set_by} |" for t in TABLE]
    return "\n".join(rows)
