"""What Triton and the front door share as processes on this host: the URLs their clients
take, and a context manager that starts one, waits until it answers and closes it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self


class LocalServer(ABC):
    """A process on this host serving HTTP on `http_port` and gRPC on `grpc_port`.

    As a context manager it starts, waits until it answers (stopped if it never does) and
    closes on exit."""

    def __init__(self, http_port: int, grpc_port: int) -> None:
        self.http_port, self.grpc_port = http_port, grpc_port

    @property
    def http_url(self) -> str:
        return f"localhost:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"localhost:{self.grpc_port}"

    @abstractmethod
    def start(self) -> None:
        """Start the process."""

    @abstractmethod
    def wait_ready(self) -> None:
        """Block until it answers; raise when it does not."""

    @abstractmethod
    def stop(self) -> int | None:
        """Stop the process; its exit code, None when it never started."""

    def close(self) -> int | None:
        """Stop, and remove what the process leaves behind; the exit code."""
        return self.stop()

    def __enter__(self) -> Self:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
