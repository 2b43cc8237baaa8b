"""A host profile served by the real server: `configs/host.pbtxt` routing embed to OpenVINO
at this host's precision (bf16 where the CPU has it, FP32 elsewhere) answers like eager
PyTorch, and the rollout example of docs/releases.md works on it unchanged: export the format the
host serves, roll it out by the model's name, 0 failed requests.

The module's server is a repository copy with the profile written as `tmr tune` writes a
winner (core.families.configs.write_variant), served with --model-config-name=host."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tmr_client import Client
from tritonclient.utils import InferenceServerException

from core import host_profile as hp
from core import tune_record as tr
from core import versions
from core.cpu_policy import DEDICATED
from core.families.catalog import find
from core.families.configs import write_variant
from core.hardware import host_precision
from core.startup import startup_models
from core.variant import HOST, VARIANT_ENV
from server.launcher import TritonServer, stub_processes
from server.profile import status
from server.prometheus import metric_value
from tests.conftest import MINILM_SOURCE, REPOSITORY, start_server, stop_cleanly
from tests.integration.helpers import embed_texts, repository_of, tmr
from tests.integration.test_embed_serving import cosines, sentence_transformers_embeddings
from tests.integration.test_rollout import FAST, Load

pytestmark = pytest.mark.timeout(300)

MODELS = ("embed", "embed_interactive", "minilm_onnx", "minilm_openvino", "minilm_int8")
ENCODER = "minilm_openvino"
# Multilingual, long and short: bf16's error grows with length and with rare tokens.
TEXTS = [
    "Triton batches requests on the server.",
    "Der schnelle braune Fuchs springt über den faulen Hund, während die Warteschlange "
    "die Anfragen nach Priorität ordnet und die Instanzen ausgelastet bleiben.",
    "Les modèles sont servis par versions ; revenir en arrière est une modification du dépôt.",
    "El servidor agrupa las solicitudes dinámicamente y responde con la misma precisión.",
    "推理服务器按优先级调度请求，并在负载过高时优雅降级。",
    "モデルのバージョンを切り替えても、リクエストは失われません。",
    "Ünïcödé and emoji 🚀 survive the round trip.",
    "short",
    " ".join(["a long document about rollouts, canaries and shadow traffic"] * 12),
]


@dataclass
class Profiled:
    server: TritonServer
    repo: Path
    precision: str
    layout: hp.Layout


# Both layouts a profile may choose (server/tune.py kinds on two cores): the front calls
# OpenVINO over BLS (one encoder instance on every core), or runs it itself.
LAYOUTS = {"bls": hp.Layout(1, 0, 2, idle_session=False),
           "in-process": hp.Layout(2, 2, 1, idle_session=False, in_process=True,
                                   front_workers=2)}


@pytest.fixture(scope="module", params=list(LAYOUTS))
def profiled(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Profiled]:
    root = tmp_path_factory.mktemp("host-profile")
    repo = repository_of(root, *MODELS)
    model = find(repo, "minilm")
    assert model.front is not None
    precision, layout = host_precision(), LAYOUTS[request.param]
    write_variant(repo, model.front, model.encoders, HOST, "openvino", precision,
                  layout, "the test's host")
    server = start_server(repo, root / "tritonserver.log", variant=HOST,  # a quiet host's
                          load_models=tuple(startup_models(repo, HOST)), bulk_cpu=DEDICATED)
    yield Profiled(server, repo, precision, layout)
    stop_cleanly(server)


def runtime_calls(server: TritonServer, model: str) -> float:
    return metric_value(server.metrics_url, "tmr_backend_runtime_calls_total", model=model)


@pytest.fixture
def served_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI reads the configs this server serves, the host profile (the suite pins the
    reviewed ones; the test's repository has the profile's configs but no tuning record,
    from which `tmr serve` would choose)."""
    monkeypatch.setenv(VARIANT_ENV, HOST.name)


def test_the_profile_serves_the_hosts_precision_and_matches_eager_pytorch(profiled) -> None:
    reference = sentence_transformers_embeddings(MINILM_SOURCE, TEXTS)
    with Client(profiled.server.grpc_url, protocol="grpc") as client:
        result = client.embed_with_info(TEXTS)
    assert result.served_by == [f"{ENCODER}:1:{profiled.precision}:L0"] * len(TEXTS)
    found = cosines(result.embeddings, reference)
    print(f"\n{ENCODER} at {profiled.precision}: cosine vs sentence-transformers mean "
          f"{found.mean():.6f} min {found.min():.6f}")
    assert found.mean() >= 0.9999 and found.min() >= 0.999
    assert np.allclose(np.linalg.norm(result.embeddings, axis=1), 1.0, atol=1e-3)


def test_where_the_primary_runs_is_the_layouts_choice(profiled) -> None:
    """In process, the front's calls never reach the encoder model's stub; over BLS, each
    batch is one of its runtime calls. The answers say the same encoder either way."""
    before = runtime_calls(profiled.server, ENCODER)
    with Client(profiled.server.http_url) as client:
        for i in range(5):
            served = client.embed_with_info([f"where does it run {i}"]).served_by
            assert served == [f"{ENCODER}:1:{profiled.precision}:L0"]
    calls = runtime_calls(profiled.server, ENCODER) - before
    assert calls == (0 if profiled.layout.in_process else 5)
    config = versions.served_config(profiled.repo / ENCODER, HOST)
    assert sum(g.count for g in config.instance_group) == (
        1 if profiled.layout.in_process else profiled.layout.encoder_instances)


def test_the_lane_name_answers_raw_kserve_and_refuses_bad_input_with_a_400(profiled) -> None:
    """Raw KServe to the lane's name, as a client without the SDK calls it: on a workers
    profile an ensemble into the front's interactive worker, else a model of its own; the
    same vector as the front's, and a bad text refused with a 400 that names it."""
    url = profiled.server.http_url
    text = ["a raw call to the lane"]
    assert float(np.dot(embed_texts(url, text, "embed_interactive")[0],
                        embed_texts(url, text, "embed")[0])) > 0.99999
    for model in ("embed_interactive", "embed"):
        with httpclient.InferenceServerClient(url) as client:
            data = httpclient.InferInput("TEXT", [1, 1], "BYTES")
            data.set_data_from_numpy(np.array([[b"\xff\xfe"]], dtype=np.object_))
            with pytest.raises(InferenceServerException) as err:
                client.infer(model, [data])
        assert err.value.status() == "400" and "UTF-8" in err.value.message(), model
    assert embed_texts(url, ["still serving"], "embed_interactive").shape == (1, 384)


def test_only_the_profiles_primary_is_loaded_at_start(profiled) -> None:
    """Over BLS the profile's primary is loaded and the reviewed one is not; in process
    neither is (the fronts hold it); the INT8 fallback runs in the fronts on demand."""
    from server.admin_client import AdminClient

    with AdminClient(profiled.server.http_url) as admin:
        ready = set(admin.ready_models())
    assert {"embed", "embed_interactive"} <= ready
    assert (ENCODER in ready) is not profiled.layout.in_process
    assert "minilm_onnx" not in ready and "minilm_int8" not in ready
    encoder = stub_processes(profiled.server.process.pid).get(ENCODER, [])
    # the shared path: every thread but the stub's own (its health beat, its messages)
    assert {c for pid in encoder for c in scheduling_classes(pid)} <= {"IDL", "TS"}
    assert all("IDL" in scheduling_classes(pid) for pid in encoder)


def test_the_readme_rollout_example_works_on_a_profile_that_routes_to_openvino(
        profiled, served_here) -> None:
    repo, server = profiled.repo, profiled.server
    out = tmr("export", "minilm", "--format", "primary", "--force", "--repository", str(repo),
              timeout_s=280)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "minilm_openvino" in out.stdout and versions.versions_on_disk(repo / ENCODER) == [1, 2]
    # Exporting made a version and changed no routing: v1 still serves, the front unchanged.
    front = versions.served_config(repo / "embed", HOST).parameters["primary_model"].string_value
    assert front == ENCODER and versions.served_version(repo / ENCODER) == 1
    args = ["--url", server.http_url, "--metrics-url", server.metrics_url,
            "--repository", str(repo), *FAST, "--max-p99-ratio", "3"]
    with Load(server.http_url, server.grpc_url) as load:
        done = tmr("rollout", "minilm", "2", *args, timeout_s=250)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "minilm_openvino" in done.stdout
    assert load.requests > 0 and load.failures == []
    # Promoted in every config the model has, the host profile's too, which still serves
    # the host's precision.
    for path in versions.config_files(repo / ENCODER):
        assert "versions: [ 2 ]" in path.read_text(), path
    with Client(server.http_url) as client:
        served = client.embed_with_info(["after the rollout"]).served_by
        laned = client.embed_with_info(["after the rollout, priority 1"], priority=1).served_by
    assert served == laned == [f"{ENCODER}:2:{profiled.precision}:L0"]  # the lane in step


def test_the_lane_follows_a_rollback_and_a_promote(profiled) -> None:
    """After the rollout above (v2 serves): `tmr promote` v1, then `tmr rollback` (to v2,
    the version before it in the history) of the encoder the profile serves; each time
    the front and its lane answer from the same version."""
    repo, server = profiled.repo, profiled.server
    assert versions.served_version(repo / ENCODER) == 2, "runs after the rollout example"
    args = ["--url", server.http_url, "--repository", str(repo)]
    for command, version in ((["promote", ENCODER, "1", "--no-gate"], 1),
                             (["rollback", ENCODER], 2)):
        out = tmr(*command, *args)
        assert out.returncode == 0, out.stdout + out.stderr
        expected = [f"{ENCODER}:{version}:{profiled.precision}:L0"]
        deadline = time.monotonic() + 30  # each front reads the served version every second
        with Client(server.http_url) as client:
            while True:
                served = client.embed_with_info(["after " + command[0]]).served_by
                laned = client.embed_with_info(["after " + command[0] + ", priority 1"],
                                               priority=1).served_by
                if served == laned == expected or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        assert served == laned == expected, (command, served, laned)


def record_before_the_rollouts(repo: Path, layout: hp.Layout, precision: str) -> None:
    """A tuning record as `tmr tune` would have written it before this module's rollouts:
    this host, the reviewed configs, the profile's candidate chosen, the encoder at v1."""
    names = tuple(m for m in MODELS if m != "embed_interactive")
    base = hp.Candidate("reviewed", "onnx", "fp32", layout, (100.0,), 500.0, reviewed=True)
    chosen = hp.Candidate(f"openvino {precision}", "openvino", precision, layout, (150.0,),
                          500.0)
    choice = tr.FrontChoice("minilm", hp.Verdict.SERVES, "measured", 60.0, "the test's",
                            (base, chosen), chosen.name, {chosen.name: 1.5})
    tr.write_record(repo, tr.TuneRecord(
        "2026-12-07T00:00", "default", 1.0, hp.Host.current(), 2, None, 1024.0, names,
        tuple(tr.model_folders(repo)), tr.reviewed_digest(repo, names),
        {**tr.served_versions(repo, names), ENCODER: 1}, {"embed": choice}))


def test_rollouts_and_a_rollback_serve_on_the_profile_they_made_stale(
        profiled, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 56: after the rollout, promote and rollback above, the tuning record names v1
    while v2 serves. The profile still fits this host, so the operations run at once, on
    the profile's configs, under one load with no failed request: rollout v3, rollout v4,
    rollback (to v3), rollout v5, each rollout measured with the same steps as the first
    (the BLS layout, whose encoder is a model of its own, only the first: the sequence
    costs a minute a layout);
    `tmr tune --show` and `tmr health` name the change, and `tmr tune --if-stale` would
    measure it."""
    repo, server = profiled.repo, profiled.server
    monkeypatch.delenv(VARIANT_ENV, raising=False)  # the CLI selects from the record
    record_before_the_rollouts(repo, profiled.layout, profiled.precision)
    fits, why = status(repo)
    assert fits and "served versions changed: minilm_openvino v1->v2" in why, why
    shown = tmr("tune", "--show", "--repository", str(repo))
    assert "serving the host profile" in shown.stdout and "v1->v2" in shown.stdout, shown
    for version in (3, 4, 5):  # the same weights as v2
        shutil.copytree(repo / ENCODER / "2", repo / ENCODER / str(version))
    args = ["--url", server.http_url, "--metrics-url", server.metrics_url,
            "--repository", str(repo), *FAST, "--max-p99-ratio", "20"]
    plans, served = [], []
    steps = ("3", "4", "rollback", "5") if profiled.layout.in_process else ("3",)
    with Load(server.http_url, server.grpc_url) as load:
        for step in steps:
            if step == "rollback":
                done = tmr("rollback", "minilm", "--url", server.http_url,
                           "--repository", str(repo))
            else:
                done = tmr("rollout", "minilm", step, *args, timeout_s=250)
                plans.append(done.stdout.splitlines()[0].rsplit(": ", 1)[-1])  # its steps
            assert done.returncode == 0, (step, done.stdout + done.stderr)
            served.append({versions.parse_config(p.read_text()).version_policy.specific
                           .versions[0] for p in versions.config_files(repo / ENCODER)})
    assert load.requests > 0 and load.failures == []
    assert served == [{3}, {4}, {3}, {5}][:len(steps)], served
    assert len(set(plans)) == 1, plans  # the n-th rollout is stepped as the first
    assert f"v1->v{steps[-1]}" in status(repo)[1]


def scheduling_classes_list(pid: int) -> list[str]:
    """The scheduling class of every thread of `pid` as `ps -Lo cls` names it (TS: normal,
    IDL: SCHED_IDLE); none for a process that has exited since it was listed (a version
    unloaded by the rollouts before)."""
    out = subprocess.run(["ps", "-Lo", "cls=", "-p", str(pid)], capture_output=True,
                         text=True).stdout
    return out.split()


def scheduling_classes(pid: int) -> set[str]:
    return set(scheduling_classes_list(pid))


def test_the_shared_path_yields_to_the_kernel_and_its_lane_does_not(profiled) -> None:
    """The profile's shared path, the front and its encoders' stubs (every thread but the
    stub's own), under SCHED_IDLE once warmed; the lane at normal priority
    (docs/serving.md#priority-lanes)."""
    stubs = stub_processes(profiled.server.process.pid)
    shared = stubs.get("embed", [])  # its fallback runs in it, and in process its primary
    lane = stubs.get("embed_interactive", [])
    # One front process on either layout: its bulk workers and runtime's threads yield;
    # the interactive worker its ensemble lane feeds, and the thread that hands requests
    # over, do not. Over BLS the encoder's stub yields whole but for the stub's own
    # threads (its health beat, its messages). A stub that exited since it was listed (an
    # old version the rollouts unloaded) shows no thread and is passed over.
    assert len(shared) == profiled.layout.front_instances and not lane, sorted(stubs)
    for pid in shared:
        classes = scheduling_classes_list(pid)
        assert "IDL" in classes and "TS" in classes, classes
    for encoder in set(stubs) - {"embed", "health"}:
        for pid in stubs[encoder]:
            classes = scheduling_classes(pid)
            assert not classes or classes == {"IDL", "TS"}, (encoder, classes)


def test_the_profile_make_setup_tuned_here_fits_this_host() -> None:
    """`make setup` ran `tmr tune --if-stale` on this host: its record fits, whatever it
    chose (the reviewed configs or a profile)."""
    fits, why = status(REPOSITORY)
    assert fits, why
    record = tr.read_record(REPOSITORY)
    assert record is not None and record.host.cores == hp.Host.current().cores
