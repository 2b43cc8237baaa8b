"""The SDK on its own: `pip install ./client` into a clean venv (no system site-packages,
nothing of the project) gives `tmr_client` with tritonclient and numpy only, which calls
the session's server; a tiny `timeout=` is a client-side deadline on both protocols."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tmr_client import AsyncClient, Client, DeadlineExceededError

from core.paths import PROJECT_ROOT
from server.prometheus import metric_value

INSTALL_TIMEOUT_S = 280  # the registry's wheels, cached after the first run
LONG_TEXTS = ["a long sentence of many words " * 40] * 8  # 8 rows of 256 tokens, truncated

# Runs in the clean venv, from a folder outside the repository.
SCRIPT = textwrap.dedent("""
    import importlib.util, json, sys
    import tmr_client
    from tmr_client import Client, DeadlineExceededError

    http_url, grpc_url = sys.argv[1], sys.argv[2]
    out = {"file": tmr_client.__file__,
           "core": importlib.util.find_spec("core") is not None,
           "server": importlib.util.find_spec("server") is not None}
    texts = ["a long sentence of many words " * 40] * 8
    for name, url in (("http", "http://" + http_url), ("grpc", "grpc://" + grpc_url)):
        with Client(url, max_batch_size=8) as c:
            out[name + "_protocol"] = c.protocol
            out[name + "_shape"] = list(c.embed(["hello", "world"]).shape)
            try:
                c.embed(texts, truncate=True, timeout=0.002)
                out[name + "_deadline"] = "no error"
            except DeadlineExceededError as err:
                out[name + "_deadline"] = type(err.__cause__).__name__ + ": " + str(err)
            out[name + "_after"] = list(c.embed(["still serving"]).shape)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def sdk_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding nothing but `pip install ./client` and what it requires."""
    venv = tmp_path_factory.mktemp("sdk") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    # A copy of client/, as `pip install ./client` sees it (pip builds in the source tree).
    source = shutil.copytree(PROJECT_ROOT / "client", venv.parent / "client",
                             ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    # This venv's pip installs into the clean one (--python): no ensurepip, same resolver.
    run = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                          "--quiet", "--disable-pip-version-check", str(source)],
                         capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return python


def clean_env() -> dict[str, str]:
    """The caller's environment without anything that points at the project."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TMR_ADMIN_KEY", "TMR_URL")}
    return {**env, "PYTHONNOUSERSITE": "1"}


def test_the_installed_sdk_needs_only_tritonclient_and_numpy(sdk_python, tmp_path):
    script = ("import importlib.metadata as m; "
              "print(sorted(r.split(';')[0].strip() for r in m.requires('tmr-client')))")
    run = subprocess.run([str(sdk_python), "-c", script], cwd=tmp_path, env=clean_env(),
                         capture_output=True, text=True, timeout=60, check=True)
    assert run.stdout.strip() == "['numpy<2', 'tritonclient[all]==2.51.0']"


def test_the_installed_sdk_calls_the_server_without_the_project(sdk_python, tmp_path,
                                                                 http_url, grpc_url):
    run = subprocess.run([str(sdk_python), "-c", SCRIPT, http_url, grpc_url], cwd=tmp_path,
                         env=clean_env(), capture_output=True, text=True, timeout=120,
                         check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert not Path(out["file"]).is_relative_to(PROJECT_ROOT)  # a real copy, not the repo
    assert (out["core"], out["server"]) == (False, False)  # no project package leaks in
    for protocol in ("http", "grpc"):
        assert out[protocol + "_protocol"] == protocol
        assert out[protocol + "_shape"] == [2, 384]
        # Cut by the transport (a cause), not refused before sending.
        assert out[protocol + "_deadline"].split(": ", 1)[0] != "NoneType"
        assert "deadline exceeded" in out[protocol + "_deadline"]
        assert out[protocol + "_after"] == [1, 384]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_tiny_timeout_is_a_deadline_for_the_asyncio_client(protocol, http_url, grpc_url):
    url = f"{protocol}://{http_url if protocol == 'http' else grpc_url}"

    async def call() -> None:
        async with AsyncClient(url, max_batch_size=8) as c:
            await c.embed(["warm"])
            with pytest.raises(DeadlineExceededError, match="deadline exceeded") as caught:
                await c.embed(LONG_TEXTS, truncate=True, timeout=0.002)
            assert caught.value.__cause__ is not None  # cut in flight
            assert (await c.embed(["still serving"])).shape == (1, 384)

    asyncio.run(call())


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_client_timeout_bounds_every_call_of_the_sync_client(protocol, http_url, grpc_url):
    url = f"{protocol}://{http_url if protocol == 'http' else grpc_url}"
    with Client(url, max_batch_size=8, timeout=0.002) as c, \
            pytest.raises(DeadlineExceededError, match=r"timeout of 0\.002 s"):
        c.embed(LONG_TEXTS, truncate=True)
    with Client(url, max_batch_size=8, timeout=30) as c:
        assert c.embed(["still serving"]).shape == (1, 384)


def canceled(triton) -> float:
    """Requests to `embed` that Triton counted as cancelled by their client."""
    return metric_value(triton.metrics_url, "nv_inference_request_failure", model="embed",
                        reason="CANCELED")


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "asyncio"])
def test_a_grpc_deadline_ends_the_wait_and_never_cancels_the_request(aio, triton):
    """Triton 2.51 can lose a model reference to a gRPC call cancelled as it is answered,
    and the model never unloads (docs/reliability.md §11). So the SDK's deadline ends the
    caller's wait, the request runs to its end (or leaves the queue at its queue timeout),
    and Triton counts no cancellation."""
    url, calls = f"grpc://{triton.grpc_url}", 6
    before = canceled(triton), served(triton)

    async def run_async() -> list[BaseException | None]:
        async with AsyncClient(url, max_batch_size=8) as c:
            return [await caught(c.embed(LONG_TEXTS, truncate=True, timeout=0.002))
                    for _ in range(calls)]

    if aio:
        errors = asyncio.run(run_async())
    else:
        with Client(url, max_batch_size=8) as c:
            errors = [caught_sync(lambda: c.embed(LONG_TEXTS, truncate=True, timeout=0.002))
                      for _ in range(calls)]
    assert all(isinstance(e, DeadlineExceededError) for e in errors), errors
    # close() waited for the abandoned requests: each was served or dropped by Triton.
    assert canceled(triton) == before[0]
    assert served(triton) > before[1]


def served(triton) -> float:
    """Requests `embed` answered or refused, whatever the reason (cancelled included)."""
    return (metric_value(triton.metrics_url, "nv_inference_request_success", model="embed")
            + metric_value(triton.metrics_url, "nv_inference_request_failure", model="embed"))


async def caught(call) -> BaseException | None:
    try:
        await call
    except Exception as err:  # the test inspects it
        return err
    return None


def caught_sync(call) -> BaseException | None:
    try:
        call()
    except Exception as err:  # the test inspects it
        return err
    return None
