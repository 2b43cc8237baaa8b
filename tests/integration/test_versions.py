"""Releasing model versions under continuous load: rollback, promote, refusals, the gate."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient

from core import config_edit, versions
from server.launcher import TritonServer
from tests.conftest import start_server, stop_cleanly
from tests.integration.helpers import add_version, noisy_copy, repository_of, tmr

MODEL = "minilm_onnx"
IDS = np.array([[101, 2023, 2003, 1037, 3231, 102]], dtype=np.int64)


def encoder_repository(root: Path) -> Path:
    """A copy of the repository holding only minilm_onnx (version 1 serves)."""
    return repository_of(root, MODEL)


def release_repository(root: Path) -> Path:
    """Only minilm_onnx, with version 2 = a copy of version 1, promoted (2 serves)."""
    repo = encoder_repository(root)
    add_version(repo / MODEL, 2, (repo / MODEL / "1" / "model.onnx").resolve())
    config_edit.set_version(repo / MODEL, 2)
    return repo


@pytest.fixture(scope="module")
def explicit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TritonServer, Path]]:
    root = tmp_path_factory.mktemp("release_explicit")
    repo = release_repository(root)
    server = start_server(repo, root / "tritonserver.log")
    yield server, repo
    stop_cleanly(server)


def release(server: TritonServer, repo: Path, mode: str, *args: str) -> str:
    out = tmr(*args, "--url", server.http_url, "--repository", str(repo), "--control-mode",
              mode)
    assert out.returncode == 0, out.stderr + out.stdout
    return out.stdout


def encoder_inputs(protocol: ModuleType) -> list:
    """IDS and its mask as `protocol.InferInput`s (tritonclient's http or grpc module)."""
    inputs = []
    for name, array in (("input_ids", IDS), ("attention_mask", np.ones_like(IDS))):
        tensor = protocol.InferInput(name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


async def unversioned_load(server: TritonServer, stop: asyncio.Event) -> list:
    """gRPC and HTTP clients sending unversioned requests back to back: (t, version|error)."""
    seen: list = []

    async def grpc_worker() -> None:
        client = grpcaio.InferenceServerClient(server.grpc_url)
        inputs = encoder_inputs(grpcaio)
        while not stop.is_set():
            try:
                result = await client.infer(MODEL, inputs)
                seen.append((time.monotonic(), result.get_response().model_version))
            except Exception as err:  # every failure counts
                seen.append((time.monotonic(), err))
        await client.close()

    def http_worker() -> None:
        client = httpclient.InferenceServerClient(server.http_url)
        inputs = encoder_inputs(httpclient)
        while not stop.is_set():
            try:
                seen.append((time.monotonic(),
                             client.infer(MODEL, inputs).get_response()["model_version"]))
            except Exception as err:  # every failure counts
                seen.append((time.monotonic(), err))
        client.close()

    await asyncio.gather(grpc_worker(), grpc_worker(), asyncio.to_thread(http_worker))
    return seen


def roll_under_load(server: TritonServer, repo: Path, mode: str) -> tuple[list, list]:
    """2 -> 1 -> 2 while clients send requests; returns (seen, switch marks)."""
    marks: list = []

    async def scenario() -> list:
        stop = asyncio.Event()
        load = asyncio.ensure_future(unversioned_load(server, stop))
        await asyncio.sleep(1.0)
        for args, want in ((("rollback", MODEL, "--to", "1"), "1"),
                           (("promote", MODEL, "2", "--no-gate"), "2")):
            began = time.monotonic()
            out = await asyncio.to_thread(release, server, repo, mode, *args)
            marks.append((began, time.monotonic(), want, out))
            await asyncio.sleep(1.0)
        stop.set()
        return await load

    return asyncio.run(scenario()), marks


def assert_clean_roll(seen: list, marks: list) -> None:
    failures = [s for s in seen if not isinstance(s[1], str)]
    assert failures == [], failures[:3]
    for _, ended, want, _ in marks:
        after = [ver for t, ver in seen if t > ended + 0.5]
        before_next = [ver for t, ver in seen if ended < t]
        assert before_next and after[:1] == [want] if after else True
    served = {ver for _, ver in seen}
    assert served == {"1", "2"}, served


def test_explicit_mode_rolls_2_1_2_under_load_with_zero_failed_requests(explicit) -> None:
    server, repo = explicit
    seen, marks = roll_under_load(server, repo, "explicit")
    assert_clean_roll(seen, marks)
    switch_s = [ended - began for began, ended, _, _ in marks]
    print(f"\nexplicit: {len(seen)} requests, 0 failed, switches took {switch_s}")
    assert "minilm_onnx v1 is serving (rollback, explicit mode)" in marks[0][3]
    for began, ended, _, out in marks:
        assert_honest_timing(out, ended - began)


def assert_honest_timing(output: str, wall_s: float) -> None:
    """The reported switch counts the load API and the first answer, within the command."""
    found = re.search(r"switched in ([\d.]+) s \(load API ([\d.]+) s, then the first "
                      r"answer ([\d.]+) s later\); the whole command ([\d.]+) s", output)
    assert found, output
    total, load, answer, command = map(float, found.groups())
    assert load > 0 and answer >= 0 and abs(total - (load + answer)) < 0.02, output
    assert total <= command <= wall_s, (output, wall_s)


def test_request_pinned_to_a_removed_version_gets_not_ready_503(explicit) -> None:
    server, repo = explicit
    release(server, repo, "explicit", "rollback", MODEL, "--to", "1")
    client = httpclient.InferenceServerClient(server.http_url)
    inputs = [httpclient.InferInput("input_ids", [1, 6], "INT64"),
              httpclient.InferInput("attention_mask", [1, 6], "INT64")]
    inputs[0].set_data_from_numpy(IDS)
    inputs[1].set_data_from_numpy(np.ones_like(IDS))
    try:
        with pytest.raises(Exception,
                           match=r"'minilm_onnx' version 2 is not at ready state") as info:
            client.infer(MODEL, inputs, model_version="2")
    finally:
        client.close()  # an open keep-alive connection holds Triton's shutdown
    assert info.value.status() == "503"
    release(server, repo, "explicit", "promote", MODEL, "2", "--no-gate")


def test_rollback_twice_returns_to_the_original_version(explicit) -> None:
    server, repo = explicit
    start = versions.selected_versions(
        versions.parse_config((repo / MODEL / "config.pbtxt").read_text()),
        versions.versions_on_disk(repo / MODEL))
    first = release(server, repo, "explicit", "rollback", MODEL)
    second = release(server, repo, "explicit", "rollback", MODEL)
    assert f"v{start[-1]} is serving" in second and "is serving" in first
    history = [e.version for e in versions.read_history(repo / MODEL)]
    assert history[-1] == start[-1] and history[-2] != start[-1]


def test_missing_or_corrupt_version_is_refused_before_anything_changes(explicit) -> None:
    server, repo = explicit
    before = (repo / MODEL / "config.pbtxt").read_text()
    missing = tmr("promote", MODEL, "9", "--no-gate", "--url", server.http_url,
                  "--repository", str(repo))
    assert missing.returncode == 1 and "has no version 9 on disk" in missing.stderr
    tampered = add_version(repo / MODEL, 4, (repo / MODEL / "1" / "model.onnx").resolve())
    with (tampered / "model.onnx").open("ab") as f:
        f.write(b"tampered")
    corrupt = tmr("promote", MODEL, "4", "--no-gate", "--url", server.http_url,
                  "--repository", str(repo))
    assert corrupt.returncode == 1 and "sha256 differs from provenance.json" in corrupt.stderr
    assert (repo / MODEL / "config.pbtxt").read_text() == before
    shutil.rmtree(tampered)


def test_candidate_that_fails_to_load_never_takes_traffic(explicit) -> None:
    server, repo = explicit
    before = (repo / MODEL / "config.pbtxt").read_text()
    current = versions.selected_versions(versions.parse_config(before),
                                         versions.versions_on_disk(repo / MODEL))[-1]
    broken = add_version(repo / MODEL, 5, b"not an onnx graph at all")
    out = tmr("promote", MODEL, "5", "--no-gate", "--url", server.http_url,
              "--repository", str(repo))
    assert out.returncode == 1
    assert "failed to load" in out.stderr or "Triton refused" in out.stderr, out.stderr
    assert (repo / MODEL / "config.pbtxt").read_text() == before
    from server.release import serves

    assert serves(server.http_url, MODEL, current)
    shutil.rmtree(broken)


def test_gate_refuses_a_degraded_candidate(explicit) -> None:
    server, repo = explicit
    source = (repo / MODEL / "1" / "model.onnx").resolve()
    add_version(repo / MODEL, 6, noisy_copy(source, 0.1))
    refused = tmr("promote", MODEL, "6", "--url", server.http_url, "--repository", str(repo))
    assert refused.returncode == 1, refused.stdout
    assert "refused by the gate" in refused.stderr and "quality vs reference" in refused.stdout
    assert json.loads((repo / MODEL / "6" / "gate.json").read_text())["passed"] is False


def served_versions(url: str) -> tuple[list[int], str]:
    """(READY versions in the index, the version that answered an unversioned request)."""
    from server.release import index_states

    client = httpclient.InferenceServerClient(url)
    try:
        answered = client.infer(MODEL, encoder_inputs(httpclient)).get_response()
    finally:
        client.close()
    ready = sorted(n for n, (state, _) in index_states(url, MODEL).items() if state == "READY")
    return ready, answered["model_version"]


@pytest.mark.timeout(600)  # a real export, two server starts and the gate
def test_a_new_export_takes_no_traffic_until_promoted_and_is_gated_against_the_served(
        tmp_path) -> None:
    repo = encoder_repository(tmp_path)
    poll = start_server(repo, tmp_path / "poll.log", control_mode="poll")
    try:
        exported = tmr("export", "minilm", "--format", "onnx", "--force", "--repository",
                       str(repo))
        assert exported.returncode == 0, exported.stderr
        assert (repo / MODEL / "2" / "provenance.json").exists()
        time.sleep(3 * 2 + 1)  # three poll scans (2 s each) saw the new folder
        assert served_versions(poll.http_url) == ([1], "1")
    finally:
        stop_cleanly(poll)
    explicit = start_server(repo, tmp_path / "explicit.log")  # a restart loads what is named
    try:
        assert served_versions(explicit.http_url) == ([1], "1")
    finally:
        stop_cleanly(explicit)
    gated = tmr("gate", MODEL, "2", "--repository", str(repo))
    assert gated.returncode == 0, gated.stdout + gated.stderr
    assert "against v1, the served version" in gated.stdout
    report = json.loads((repo / MODEL / "2" / "gate.json").read_text())
    assert report["current"] == 1 and report["passed"] is True
    assert set(report["quality"]) == {"reference", "current"}
    assert report["performance"]["throughput_ratio"] > 0


def test_poll_mode_rolls_2_1_2_under_load_with_zero_failed_requests(tmp_path) -> None:
    repo = release_repository(tmp_path)
    server = start_server(repo, tmp_path / "tritonserver.log", control_mode="poll")
    try:
        seen, marks = roll_under_load(server, repo, "poll")
    finally:
        stop_cleanly(server)
    assert_clean_roll(seen, marks)
    print(f"\npoll: {len(seen)} requests, 0 failed, switches took "
          f"{[round(e - b, 1) for b, e, _, _ in marks]}")


def test_tmr_versions_shows_disk_policy_provenance_and_server_state(explicit) -> None:
    server, repo = explicit
    out = tmr("versions", MODEL, "--url", server.http_url, "--repository", str(repo))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    selected = versions.selected_versions(
        versions.parse_config((repo / MODEL / "config.pbtxt").read_text()),
        versions.versions_on_disk(repo / MODEL))
    assert lines[0] == f"minilm_onnx: selected {selected}"  # no DRIFT: the server agrees
    row = next(line for line in lines if line.strip().startswith(f"v{selected[-1]} "))
    assert "*" in row and "READY" in row and "parity max|diff|" in row
