"""The front door: real nginx (Debian's, with its njs module) in front of the session's Triton.

Each front door here runs on free ports with two clients of its own keys, and must stop
with exit code 0. The rate-limit test uses a front door of its own at 1 request a minute
(burst 1), so that "over its rate" does not depend on how fast this machine is.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tmr_client import NO_RETRY, AccessDeniedError, Client, RateLimitedError, UnavailableError
from tmr_client.auth import ADMIN_KEY_ENV, API_KEY_ENV

from core.paths import PROJECT_ROOT
from core.ports import free_port
from server import front_door
from server.front_door import FrontDoor, render
from server.launcher import TritonServer
from server.serve import start_front_door
from server.settings import API_KEYS_ENV, FrontDoorSettings, admin_key
from tests.conftest import REPOSITORY
from tests.integration.helpers import assert_serving, fresh, http_post, vm_rss_bytes

ADMIN = {"admin-key": admin_key()}
GRPC_ADMIN = {"triton-grpc-protocol-admin-key": admin_key()}
EMBED = "/v2/models/embed/infer"


def text_body(*texts: str) -> bytes:
    return json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES",
                                   "shape": [len(texts), 1], "data": list(texts)}]}).encode()


def new_keys() -> dict[str, str]:
    return {"alice": f"alice-{secrets.token_hex(8)}", "bob": f"bob-{secrets.token_hex(8)}"}


def open_front_door(triton: TritonServer, **settings: int) -> FrontDoor:
    ports = {"http_port": free_port(), "grpc_port": free_port()}
    door = FrontDoor(f"127.0.0.1:{triton.opts.ports.http}",
                     f"127.0.0.1:{triton.opts.ports.grpc}",
                     replace(FrontDoorSettings(), **ports, **settings), new_keys(),
                     repository=triton.opts.repository)
    door.start()
    try:
        door.wait_ready()
    except BaseException:
        door.stop()
        raise
    return door


@pytest.fixture(scope="module")
def door(triton: TritonServer) -> Iterator[FrontDoor]:
    """The production settings, on free ports."""
    door = open_front_door(triton)
    yield door
    assert door.close() == 0, door.error_log_text()


def key(door: FrontDoor, client: str = "alice") -> dict[str, str]:
    return {"x-api-key": door.api_keys[client]}


# -- authentication -----------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("headers", [{}, {"x-api-key": "not-a-known-key"}],
                         ids=["missing", "unknown"])
def test_a_request_without_a_known_api_key_gets_401_and_health_stays_open(door, headers):
    status, answer = http_post(door.http_url, EMBED, text_body("hello"), headers)
    assert (status, json.loads(answer)) == (
        401, {"error": "missing or unknown API key: send the header x-api-key"})
    status, _ = http_post(door.http_url, "/v2/health/ready", None, headers)
    assert status == 200


@pytest.mark.timeout(60)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_sdk_embeds_through_the_front_door_with_its_api_key(door, protocol):
    url = door.http_url if protocol == "http" else door.grpc_url
    with Client(url, protocol=protocol, api_key=door.api_keys["bob"]) as client:
        result = client.embed_with_info(fresh("through the front door", "second text"))
    assert result.embeddings.shape == (2, 384)
    assert np.allclose(np.linalg.norm(result.embeddings, axis=1), 1.0, atol=1e-3)
    with Client(url, protocol=protocol, retry=NO_RETRY) as client, \
            pytest.raises(AccessDeniedError, match="missing or unknown API key"):
        client.embed(["no key"])


@pytest.mark.timeout(60)
def test_grpc_infer_goes_through_the_proxy_and_refuses_a_missing_key(door):
    client = grpcclient.InferenceServerClient(door.grpc_url)
    tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[b"grpc through nginx"]], dtype=np.object_))
    try:
        result = client.infer("embed", [tensor], headers=key(door))
        assert result.as_numpy("EMBEDDING").shape == (1, 384)
        assert client.is_server_ready()  # health needs no key on gRPC either
        with pytest.raises(Exception, match="missing or unknown API key") as info:
            client.infer("embed", [tensor])
        assert info.value.status() == "StatusCode.UNAUTHENTICATED"
    finally:
        client.close()


# -- malformed JSON: 400, a genuine 500 stays 500 ------------------------------------------


@pytest.mark.timeout(60)
def test_malformed_json_gets_400_with_tritons_message_instead_of_500(door, triton):
    body = b'{"inputs": ['
    direct, direct_answer = http_post(triton.http_url, EMBED, body)
    status, answer = http_post(door.http_url, EMBED, body, key(door))
    assert direct == 500  # Triton 2.51 itself
    assert status == 400
    assert answer == direct_answer
    assert json.loads(answer)["error"].startswith("failed to parse the request JSON buffer")


@pytest.mark.timeout(60)
def test_a_genuine_server_error_stays_500(door, triton):
    # A token id outside the vocabulary fails inside onnxruntime: a real server-side 500.
    body = json.dumps({"inputs": [
        {"name": "input_ids", "datatype": "INT64", "shape": [1, 2], "data": [101, 999999]},
        {"name": "attention_mask", "datatype": "INT64", "shape": [1, 2], "data": [1, 1]},
    ]}).encode()
    status, answer = http_post(door.http_url, "/v2/models/minilm_onnx/infer", body, key(door))
    assert status == 500, answer
    assert "indices element out of data bounds, idx=999999" in json.loads(answer)["error"]
    assert_serving(triton.http_url)


@pytest.mark.timeout(180)
def test_a_503_from_triton_reaches_the_caller_with_retry_after(door, triton):
    """A refusal the caller may retry (here the router out of service; a full priority
    queue and a queue timeout are the same 503) says when to come back."""
    import urllib.error
    import urllib.request

    from core.messages import degraded_level
    from server.admin import force_level_explicit
    from tests.integration.helpers import reset_router

    force_level_explicit(triton.http_url, 4)
    try:
        request = urllib.request.Request(f"http://{door.http_url}{EMBED}",
                                         data=text_body("retry me later"), headers=key(door))
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 503
        assert refused.value.headers["Retry-After"] == "1"
        assert degraded_level(json.loads(refused.value.read())["error"]) == 4
    finally:
        reset_router(triton.http_url)
    assert_serving(triton.http_url)


# -- body limits ----------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_an_oversized_body_gets_413_and_tritons_memory_is_unaffected(door, triton):
    body = b" " * (2 * door.settings.max_body_bytes)  # 46 MiB
    rss_before = vm_rss_bytes(triton.process.pid)
    status, answer = http_post(door.http_url, EMBED, body, key(door))
    rss_after = vm_rss_bytes(triton.process.pid)
    assert (status, json.loads(answer)) == (413, {
        "error": f"request body over the front door limit of {door.settings.max_body_bytes} "
                 "bytes"})
    assert rss_after - rss_before < len(body) // 4, (rss_before, rss_after)
    assert_serving(triton.http_url)
    status, _ = http_post(door.http_url, EMBED, text_body(*fresh("after the big one")), key(door))
    assert status == 200


@pytest.mark.timeout(120)
def test_an_oversized_grpc_message_is_refused_not_hung(door, triton):
    client = grpcclient.InferenceServerClient(door.grpc_url)
    tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    big = b"x" * (door.settings.max_grpc_body_bytes + 1024 * 1024)
    tensor.set_data_from_numpy(np.array([[big]], dtype=np.object_))
    try:
        with pytest.raises(Exception, match="request over the front door limit") as info:
            client.infer("embed", [tensor], headers=key(door), client_timeout=60)
        assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    finally:
        client.close()
    assert_serving(triton.http_url)


# -- rate limits ----------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_client_over_its_rate_gets_429_while_another_is_served(triton, tmp_path):
    door = open_front_door(triton, rate_per_minute=1)  # 1 request a minute, burst 1
    try:
        metadata = "/v2/models/embed"
        statuses = [http_post(door.http_url, metadata, None, key(door))[0] for _ in range(4)]
        assert statuses[:2] == [200, 200] and statuses[2:] == [429, 429]  # rate + burst
        status, answer = http_post(door.http_url, metadata, None, key(door))
        assert (status, json.loads(answer)) == (429, {
            "error": "rate limit exceeded for this API key: 1 requests per minute, burst 1; "
                     "retry later"})
        with Client(door.grpc_url, protocol="grpc", api_key=door.api_keys["alice"],
                         max_batch_size=64, retry=NO_RETRY) as alice, \
                pytest.raises(RateLimitedError, match="rate limit exceeded"):
            alice.metadata()  # one bucket per key, HTTP and gRPC together
        assert http_post(door.http_url, metadata, None, key(door, "bob"))[0] == 200
        with Client(door.grpc_url, protocol="grpc", api_key=door.api_keys["bob"]) as bob:
            assert bob.metadata().name == "embed"
    finally:
        assert door.close(keep_logs_in=tmp_path) == 0, door.error_log_text()
    # nginx's logs outlive its runtime folder where asked (a fleet keeps them): the 429s
    assert " 429 " in (tmp_path / "front-door-access.log").read_text()
    assert (tmp_path / "front-door-error.log").exists()


# -- the restricted admin APIs --------------------------------------------------------------


ADMIN_CALLS = [
    ("GET", "/v2/models/embed/config"),
    ("POST", "/v2/repository/index"),
    ("GET", "/v2/models/embed/stats"),
    ("GET", "/v2/systemsharedmemory/status"),
    ("GET", "/v2/trace/setting"),
    ("GET", "/v2/logging"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("method", "path"), ADMIN_CALLS, ids=[c[1] for c in ADMIN_CALLS])
def test_http_admin_calls_need_the_admin_key_through_the_front_door(door, method, path):
    body = b"{}" if method == "POST" else None
    status, answer = http_post(door.http_url, path, body, key(door), method=method)
    assert (status, json.loads(answer)) == (
        403, {"error": "This API is restricted, expecting header 'admin-key'"})
    status, answer = http_post(door.http_url, path, body, {**key(door), **ADMIN}, method=method)
    assert status == 200, answer


@pytest.mark.timeout(60)
def test_grpc_admin_calls_need_the_admin_key_through_the_front_door(door):
    client = grpcclient.InferenceServerClient(door.grpc_url)
    try:
        for call in (lambda h: client.get_model_config("embed", headers=h),
                     lambda h: client.get_model_repository_index(headers=h),
                     lambda h: client.get_inference_statistics("embed", headers=h)):
            with pytest.raises(Exception, match="This protocol is restricted, expecting header "
                                                "'triton-grpc-protocol-admin-key'") as info:
                call(key(door))
            assert info.value.status() == "StatusCode.UNAVAILABLE"
            assert call({**key(door), **GRPC_ADMIN}) is not None
        config = client.get_model_config("embed", headers={**key(door), **GRPC_ADMIN})
        assert config.config.max_batch_size == 64
    finally:
        client.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_sdk_without_the_admin_key_falls_back_to_metadata(door, protocol):
    url = door.http_url if protocol == "http" else door.grpc_url
    texts = fresh("one", "two", "three")
    with Client(url, protocol=protocol, api_key=door.api_keys["bob"], admin_key="",
                     retry=NO_RETRY) as client:
        with pytest.raises(AccessDeniedError, match="is restricted"):
            client.model_config()
        result = client.embed_with_info(texts)
        assert client.max_batch_size() == 1 and len(result.request_ids) == 3
    with Client(url, protocol=protocol, api_key=door.api_keys["bob"], admin_key="",
                     max_batch_size=64) as client:
        again = client.embed_with_info(texts)
    assert len(again.request_ids) == 1 and again.served_by and result.served_by
    assert np.allclose(again.embeddings, result.embeddings, atol=1e-5)


@pytest.mark.timeout(120)
def test_tmr_versions_sends_the_admin_key_through_the_front_door(door):
    env = {**os.environ, API_KEY_ENV: door.api_keys["alice"]}
    command = [sys.executable, "-m", "cli.main", "versions", "minilm_onnx", "--url",
               door.http_url, "--repository", str(REPOSITORY)]
    out = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                         timeout=90)
    assert out.returncode == 0, out.stderr
    assert "READY" in out.stdout and "no server state" not in out.stdout, out.stdout
    env[ADMIN_KEY_ENV] = "a-wrong-admin-key"
    out = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                         timeout=90)
    assert out.returncode == 1 and "READY" not in out.stdout, out.stdout
    assert "refused the key (This API is restricted" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


# -- the config itself ----------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_envsubst_renders_the_template_exactly_as_the_cpu_path_does(door):
    values = door.template_values()
    out = subprocess.run(["envsubst", front_door.envsubst_variables()],
                         input=front_door.TEMPLATE.read_text(), env={**os.environ, **values},
                         capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout == render(front_door.TEMPLATE.read_text(), values)
    assert out.stdout == (door.workdir / "nginx.conf").read_text()


@pytest.mark.timeout(60)
def test_tmr_serve_front_door_prints_the_urls_and_serves(triton, monkeypatch):
    monkeypatch.setenv(API_KEYS_ENV, "carol:carol-key-123456")
    args = argparse.Namespace(front_door=True, front_door_http_port=free_port(),
                              front_door_grpc_port=free_port())
    said: list[str] = []
    door = start_front_door(triton, args, said.append)
    try:
        printed = "\n".join(said)
        assert f"front door  http://localhost:{args.front_door_http_port}" in printed
        assert f"gRPC localhost:{args.front_door_grpc_port}" in printed
        assert "x-api-key: carol-key-123456" in printed
        status, _ = http_post(door.http_url, EMBED, text_body(*fresh("serve")),
                              {"x-api-key": "carol-key-123456"})
        assert status == 200
    finally:
        assert door.close() == 0


# -- faults ---------------------------------------------------------------------------------
def traffic_through(door: FrontDoor, seconds: float, during: object) -> list:
    """HTTP and gRPC SDK clients (no retries) sending back to back through `door` while
    `during()` runs in this thread; returns every outcome (a served row count or an error)."""
    import threading
    import time

    stop, outcomes = threading.Event(), []

    def client_loop(protocol: str, url: str, n: int) -> None:
        with Client(url, protocol=protocol, retry=NO_RETRY, api_key=door.api_keys["alice"],
                         max_batch_size=64) as client:
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    outcomes.append(len(client.embed([f"reload {protocol} {n} {i}"])))
                except Exception as err:  # every failure counts
                    outcomes.append(err)

    threads = [threading.Thread(target=client_loop, args=(p, u, n)) for n in range(2)
               for p, u in (("http", door.http_url), ("grpc", door.grpc_url))]
    for t in threads:
        t.start()
    time.sleep(0.5)
    try:
        during()
        time.sleep(seconds)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    return outcomes


def test_nginx_reload_under_traffic_loses_no_request(triton):
    import time

    door = open_front_door(triton, rate_per_minute=600_000)

    def reload_three_times() -> None:
        for _ in range(3):
            door.reload()
            time.sleep(0.7)

    try:
        outcomes = traffic_through(door, 1.0, reload_three_times)
    finally:
        code = door.close()
    failures = [o for o in outcomes if not isinstance(o, int)]
    assert failures == [], failures[:3]
    assert len(outcomes) > 20 and code == 0


@pytest.mark.parametrize("path", [EMBED, "/v2/models/embed", "/v2/health/ready"])
def test_with_triton_down_callers_get_a_json_503_not_nginxs_page(path):
    dead = FrontDoor(f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}",
                     FrontDoorSettings(http_port=free_port(), grpc_port=free_port()), new_keys())
    with dead:
        status, body = http_post(dead.http_url, path, text_body("x") if path == EMBED else None,
                                 key(dead))
        with Client(dead.grpc_url, protocol="grpc", retry=NO_RETRY,
                         api_key=dead.api_keys["bob"], max_batch_size=64) as client, \
                pytest.raises(UnavailableError, match="behind the front door is unavailable"):
            client.embed(["x"])
    assert status == 503, body
    assert json.loads(body) == {"error": "the inference server behind the front door is "
                                         "unavailable (not running or not answering); retry later"}


def test_a_stopping_door_refuses_new_requests_with_503_readiness_first(triton):
    """`tmr serve` and a fleet stop readiness first (FrontDoor.refuse_new): from then on
    every new request, readiness included, gets the JSON 503 with Retry-After, while
    Triton, still running, is no longer sent anything."""
    import urllib.error
    import urllib.request

    door = open_front_door(triton)
    try:
        assert http_post(door.http_url, EMBED, text_body(*fresh("before")), key(door))[0] == 200
        door.refuse_new()
        for path in (EMBED, "/v2/health/ready"):
            request = urllib.request.Request(
                f"http://{door.http_url}{path}", headers=key(door),
                data=text_body("after") if path == EMBED else None)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            refused.value.close()  # its socket
            assert refused.value.code == 503 and refused.value.headers["Retry-After"] == "1"
        with Client(door.grpc_url, protocol="grpc", retry=NO_RETRY,
                         api_key=door.api_keys["bob"], max_batch_size=64) as client, \
                pytest.raises(UnavailableError, match="behind the front door is unavailable"):
            client.embed(["after"])
    finally:
        assert door.close() == 0
    assert_serving(triton.http_url)
