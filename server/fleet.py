"""A fleet on one machine: replicas of the real server behind the front door.

Each replica is a `tritonserver` on ports of its own (`replica_ports`), all serving the
same repository; the front door (nginx) sends requests to the replicas in service.
What is planned goes through here and costs no request:
- `drain(i)` takes replica i out of the front door's upstreams first (an nginx reload:
  its in-flight requests finish where they are), then stops it with SIGTERM, which lets
  the requests it accepted finish;
- `restart(i)` starts it again on the same ports, waits until it is ready (every model
  loaded and warmed), and only then puts it back;
- `rolling_restart()` does both, one replica at a time;
- `heal()` starts again a replica that died; one that does not come back (it exits
  again, its port is taken, it is not ready in time) is stopped, stays in the upstream
  (nginx skips it while it refuses connections) and is tried again after a backoff
  (`restart_backoff_s`: 5 s, doubling, at most 5 minutes), while the others serve.
What is not planned is nginx's: a replica that dies (SIGKILL, a crash) refuses or drops
its connections, and the request goes to the next replica (`proxy_next_upstream`); a
replica sent SIGTERM by someone else is retried past by the front door's njs. The
per-client rate limit is the front door's, so it holds across replicas; every queue
bound, the interactive lanes included, is per replica (docs/scaling.md).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from server.errors import ServerStartError
from server.front_door import RELOAD_SETTLE_S, FrontDoor
from server.launcher import TritonServer
from server.settings import FrontDoorSettings, Ports, ServerOptions

PORT_STEP = 10  # replica i listens on the base ports + i * PORT_STEP (8000, 8010, ...)
FIRST_RETRY_S, LAST_RETRY_S = 5.0, 300.0  # a replica that did not come back: its backoff


def restart_backoff_s(failures: int) -> float:
    """How long to wait before starting again a replica whose last `failures` starts (1 or
    more) failed: 5 s, doubling, at most 5 minutes."""
    return min(FIRST_RETRY_S * 2 ** max(failures - 1, 0), LAST_RETRY_S)


def replica_ports(base: Ports, index: int) -> Ports:
    step = index * PORT_STEP
    return Ports(http=base.http + step, grpc=base.grpc + step, metrics=base.metrics + step)


class Fleet:
    """`count` replicas of `options` (replica i on `ports[i]`, by default replica_ports of
    the options' ports) and a front door over them; a context manager."""

    def __init__(self, options: ServerOptions, count: int, log_dir: Path,
                 door: FrontDoorSettings | None = None,
                 api_keys: Mapping[str, str] | None = None,
                 ports: list[Ports] | None = None) -> None:
        if count < 1:
            raise ValueError(f"a fleet needs at least one replica, not {count}")
        self.options, self.log_dir = options, log_dir
        self.ports = ports or [replica_ports(options.ports, i) for i in range(count)]
        self.starts = [0] * count  # how many times each replica was started (its log name)
        self.replicas = [self._server(i) for i in range(count)]
        self.in_service: list[int] = []
        self.failed_starts = [0] * count  # in a row, since each replica last came back
        self.retry_at = [0.0] * count  # monotonic: when heal() tries a failed one again
        self.door = FrontDoor([], [], door, api_keys, repository=options.repository)

    def _server(self, index: int) -> TritonServer:
        self.starts[index] += 1
        log = self.log_dir / f"replica-{index}-start-{self.starts[index]}.log"
        return TritonServer(replace(self.options, ports=self.ports[index]), log_path=log)

    def upstreams(self) -> tuple[list[str], list[str]]:
        """The HTTP and gRPC addresses of the replicas in service."""
        return ([f"127.0.0.1:{self.ports[i].http}" for i in self.in_service],
                [f"127.0.0.1:{self.ports[i].grpc}" for i in self.in_service])

    def start(self) -> None:
        """Every replica started at once, each waited for, then the front door over them."""
        for server in self.replicas:
            server.start()
        for server in self.replicas:
            server.wait_ready()
        self.in_service = list(range(len(self.replicas)))
        self.door.upstreams = self.upstreams()
        self.door.start()
        self.door.wait_ready()

    def drain(self, index: int) -> int | None:
        """Out of the front door, then SIGTERM: replica `index` stops without failing a
        request; its exit code."""
        if self.in_service == [index]:
            raise ValueError("the last replica in service cannot be drained")
        self.in_service = [i for i in self.in_service if i != index]
        self.door.route_to(*self.upstreams())
        time.sleep(RELOAD_SETTLE_S)  # nginx's new workers take over from the old ones
        return self.replicas[index].stop()

    def restart(self, index: int) -> None:
        """Replica `index` started again (after a drain or a death), ready, back in. After
        a death it never left the upstream (nginx skips it while it refuses connections),
        so nginx is not reloaded: a reload closes clients' kept-alive connections, and a
        request sent on one as it closes fails at the client (docs/scaling.md)."""
        self.replicas[index].stop()  # reaps a dead process; a no-op when already stopped
        self.replicas[index] = self._server(index)
        try:
            self.replicas[index].start()
            self.replicas[index].wait_ready()
        except ServerStartError:
            self.replicas[index].stop()  # not half-started: dead, as before the restart
            raise
        routed = self.upstreams()
        self.in_service = sorted({*self.in_service, index})
        if self.upstreams() != routed:
            self.door.route_to(*self.upstreams())

    def dead(self) -> list[int]:
        """The replicas in service whose process has exited (killed, crashed) or that
        did not start again (`heal`)."""
        return [i for i in self.in_service if self.replicas[i].process is None
                or self.replicas[i].process.poll() is not None]

    def heal(self) -> list[str]:
        """Start again every replica that died and is due (`restart_backoff_s` after a
        failed start); what happened, a line each, for the log."""
        said = []
        for index in self.dead():
            if time.monotonic() < self.retry_at[index]:
                continue
            process = self.replicas[index].process
            said.append(f"replica {index} exited with code {process.poll()}; starting it "
                        "again" if process else f"replica {index}: starting it again")
            try:
                self.restart(index)
            except ServerStartError as err:
                self.failed_starts[index] += 1
                wait = restart_backoff_s(self.failed_starts[index])
                self.retry_at[index] = time.monotonic() + wait
                said.append(f"replica {index} did not come back ({err}); the others serve; "
                            f"trying again in {wait:.0f} s")
                continue
            self.failed_starts[index], self.retry_at[index] = 0, 0.0
            said.append(f"replica {index} is back in service")
        return said

    def rolling_restart(self) -> None:
        for index in range(len(self.replicas)):
            self.drain(index)
            self.restart(index)

    def stop(self) -> list[int | None]:
        """Readiness first: the front door answers 503 to new requests while those in
        flight finish, then every replica stops, then the door."""
        if self.door.process is not None and self.door.process.poll() is None:
            self.door.refuse_new()
        codes = [server.stop() for server in self.replicas]
        self.door.close(keep_logs_in=self.log_dir)  # nginx's logs beside the replicas'
        return codes

    def __enter__(self) -> Fleet:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
