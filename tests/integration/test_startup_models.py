"""A server started as `tmr serve` starts it (core.startup's rule): exactly the rule's
models loaded, every front answering, health healthy with the other encoders marked not
loaded, and `tmr promote` loading one of those on demand. One server, on a copy of the
repository (promote edits it); the tests run in file order, promote last."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmr_client import Client

from core.families.catalog import catalog
from core.process_memory import server_memory, summary, total
from core.repository import copy_repository
from core.startup import repository_parameters, routed_models, startup_models
from core.variant import REVIEWED
from core.versions import read_config
from server.admin_client import AdminClient
from server.launcher import TritonServer
from server.serve import example_calls
from server.watchdog import Watchdog
from tests.conftest import REPOSITORY, start_server, stop_cleanly
from tests.integration.helpers import http_post, tmr

ON_DEMAND = "minilm_torchscript"  # an encoder no front routes to


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    root = tmp_path_factory.mktemp("startup")
    repo = copy_repository([REPOSITORY], root / "repository")
    started = start_server(repo, root / "tritonserver.log",
                           load_models=tuple(startup_models(repo, REVIEWED)))
    yield started
    stop_cleanly(started)


def ready_models(server: TritonServer) -> list[str]:
    with AdminClient(server.http_url) as admin:
        return admin.ready_models()


def health_report(server: TritonServer) -> dict:
    body = json.dumps({"inputs": [{"name": "QUERY", "datatype": "BYTES", "shape": [1],
                                   "data": ["go"]}]}).encode()
    status, answer = http_post(server.http_url, "/v2/models/health/infer", body)
    assert status == 200, answer
    return json.loads(json.loads(answer)["outputs"][0]["data"][0])


def on_demand(repository: Path) -> list[str]:
    return sorted(set(repository_parameters(repository, REVIEWED))
                  - set(startup_models(repository, REVIEWED)))


@pytest.mark.timeout(300)
def test_exactly_the_rules_models_are_loaded_and_watched(server: TritonServer) -> None:
    repo = server.opts.repository
    assert ON_DEMAND in on_demand(repo) and ON_DEMAND not in startup_models(repo, REVIEWED)
    assert ready_models(server) == startup_models(repo, REVIEWED)
    with AdminClient(server.http_url) as admin:
        index = {e.name for e in admin.index()}
        watched = {t.model for t in Watchdog(server.http_url, server.metrics_url).watched(admin)}
    assert set(on_demand(repo)) <= index  # listed, not loaded
    family = {name for model in catalog(repo) for name in model.models}
    assert watched == family & set(startup_models(repo, REVIEWED))


@pytest.mark.timeout(120)
def test_every_front_answers(server: TritonServer) -> None:
    fronts = [m.front for m in catalog(server.opts.repository) if m.front]
    answers = example_calls(server)
    assert [line.split(" answered: ")[0] for line in answers] == fronts, answers
    # each sends its tracked warmup sample and says so: the banner's cat is a real photo
    for front, line in zip(fronts, answers):
        assert f"{front}/warmup/" in line, line
    (cat,) = [line for line in answers if line.startswith("efficientnet_lite0 answered")]
    assert "cat) p=" in cat and "JPEG" in cat, cat


@pytest.mark.timeout(120)
def test_deep_health_is_healthy_with_the_other_encoders_marked_not_loaded(
        server: TritonServer) -> None:
    repo = server.opts.repository
    report = health_report(server)
    assert report["healthy"] is True, report
    loaded = {n for n, m in report["models"].items() if m["loaded"]}
    assert loaded == set(routed_models(repository_parameters(repo, REVIEWED)))
    idle = {n: m for n, m in report["models"].items() if not m["loaded"]}
    family = {n for n, p in repository_parameters(repo, REVIEWED).items() if "family" in p}
    assert set(idle) == set(on_demand(repo)) & family  # stub_env is no family model
    assert all(m == {"ok": True, "loaded": False, "ms": 0.0, "error": ""} for m in idle.values())
    out = tmr("health", "--url", server.http_url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("OK  ") == len(loaded)
    listed = ", ".join(on_demand(repo))  # stub_env too: tmr health lists every model
    assert f"not loaded (on demand, not probed): {listed}\n" in out.stdout


MEMORY_CEILING_MIB = 1024  # docs/serving.md: the whole repository as `tmr serve` starts it
LONG_TEXT = " ".join(f"word{i % 97}" for i in range(3000))  # about 12 windows when chunked


async def mixed_load(server: TritonServer, seconds: float) -> int:
    """Both families at once for `seconds`: texts (one, a batch of 16, a chunked long
    document) and photos to each image front, through the async SDK; the answers counted
    (a low-priority request the queue gave up on after its 2 s is not: the load is over
    what two cores serve, on purpose)."""
    from tmr_client import NO_RETRY, AsyncClient, DeadlineExceededError

    photo = (server.opts.repository / "efficientnet_lite0" / "warmup" / "IMAGE").read_bytes()[4:]
    digit = (server.opts.repository / "digits" / "warmup" / "IMAGE").read_bytes()[4:]
    deadline, answers = time.monotonic() + seconds, 0

    async def loop(call) -> None:
        nonlocal answers
        while time.monotonic() < deadline:
            try:
                await call()
            except DeadlineExceededError:
                continue
            answers += 1

    async with AsyncClient(server.http_url, retry=NO_RETRY) as client:
        await asyncio.gather(
            *(loop(lambda i=i: client.embed([f"text {i} {time.monotonic()}"]))
              for i in range(4)),
            loop(lambda: client.embed([f"bulk {k} {time.monotonic()}" for k in range(16)])),
            loop(lambda: client.embed([LONG_TEXT + str(time.monotonic())], truncate="chunk")),
            loop(lambda: client.classify([photo], model="efficientnet_lite0")),
            loop(lambda: client.classify([digit], model="digits")))
    return answers


@pytest.mark.timeout(180)
def test_the_whole_server_holds_within_its_memory_ceiling_under_a_mixed_load(
        server: TritonServer) -> None:
    """The regression ceiling of docs/benchmarks.md's memory table: after both families'
    traffic (a long document's 64-row calls included) the server's RSS, every stub and
    tritonserver, stays under 1 GiB; the health model and `tmr health --json` report it."""
    answered = asyncio.run(mixed_load(server, 20.0))
    assert answered > 50
    time.sleep(1.0)  # the last calls' arenas handed back
    whole = total(server_memory(server.process.pid))
    assert whole.rss_mib <= MEMORY_CEILING_MIB, summary(server_memory(server.process.pid))
    reported = health_report(server)["memory"]
    started = startup_models(server.opts.repository, REVIEWED)
    # one process per model: a lane is an ensemble into its front's process
    processes = [m for m in started
                 if read_config(server.opts.repository / m).platform != "ensemble"]
    assert set(reported["by_model"]) == {"tritonserver", *processes}
    assert reported["total"]["rss_mib"] == pytest.approx(whole.rss_mib, rel=0.15)
    out = tmr("health", "--url", server.http_url, "--json")
    memory = json.loads(out.stdout)["memory"]
    assert memory["by_model"]["embed"]["processes"] == 1
    assert "minilm_onnx" not in memory["by_model"]  # embed holds the one copy
    print(f"\nthe whole server after the mixed load: {summary(server_memory(server.process.pid))}")
    assert 0 < memory["by_model"]["embed"]["pss_mib"] <= memory["by_model"]["embed"]["rss_mib"]


@pytest.mark.timeout(180)
def test_a_degraded_front_runs_its_fallback_in_its_own_process(server: TritonServer) -> None:
    """The INT8 fallback's Triton model is not loaded at start: a front that needs it
    (here an operator's level 2) loads it in its own stub and serves from it."""
    assert "minilm_int8" not in ready_models(server)
    forced = tmr("degrade", "--level", "2", "--url", server.http_url)
    try:
        assert forced.returncode == 0, forced.stdout + forced.stderr
        assert "embed now reports: minilm_int8:1:int8:L2" in forced.stdout
        with Client(server.http_url) as client:
            info = client.embed_with_info(["served by the in-process fallback"])
        assert info.served_by == ["minilm_int8:1:int8:L2"]
        assert "minilm_int8" not in ready_models(server)  # no Triton model was loaded
        log = server.log_text()
        assert "embed/1: in-process minilm_int8 v1 loaded" in log
    finally:
        restored = tmr("degrade", "--level", "auto", "--url", server.http_url)
        assert restored.returncode == 0, restored.stdout + restored.stderr
    assert "minilm_onnx:1:fp32:L0" in restored.stdout


@pytest.mark.timeout(300)
def test_promote_loads_an_encoder_on_demand_and_it_answers(server: TritonServer) -> None:
    out = tmr("promote", ON_DEMAND, "1", "--no-gate", "--url", server.http_url,
              "--repository", str(server.opts.repository))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{ON_DEMAND} v1 is serving" in out.stdout
    assert ON_DEMAND in ready_models(server)
    with AdminClient(server.http_url) as admin:
        check = admin.probe_model(ON_DEMAND)
    assert check.ok, check
    entry = health_report(server)["models"][ON_DEMAND]
    assert entry["ok"] and entry["loaded"], entry
