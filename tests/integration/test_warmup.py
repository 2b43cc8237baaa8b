"""Ready means warm: every family model is served with its model_warmup, and every one of
its instances ran every warmup sample before the model was READY, at a start and at a
reload; at a start a front warms up to its encoder call (Triton takes no BLS call then),
once the server has started through its encoder.

The proof is in Triton's own records: its verbose log starts every sample's every run on
every instance before it logs the model loaded, and the per-model statistics of a model
no request has reached count exactly the warmup's executions and requests; the models'
own warmup lines (python_backends/warmup.py) say what each run went through. No timing is
asserted (docs/serving.md, "Ready means warm", has the figures)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from google.protobuf import json_format

from core.families.catalog import catalog
from core.families.warmup import without_warmup
from core.repository import copy_repository
from core.versions import read_config
from server.admin_client import AdminClient
from server.launcher import TritonServer
from tests.conftest import REPOSITORY, start_server, stop_cleanly
from tests.integration.helpers import model_counts

pytestmark = pytest.mark.timeout(300)

# every family model with a process of its own: a lane is an ensemble into its front's
# process, warmed with it (tests/unit/test_warmup.py checks that its front has samples)
FAMILY_MODELS = [name for model in catalog(REPOSITORY) for name in model.models
                 if read_config(REPOSITORY / name).platform != "ensemble"]
FRONT, ENCODER, OTHER_ENCODER = "embed", "minilm_onnx", "minilm_int8"  # one text model
WARMUP_LINE = re.compile(r'"(?P<model>\w+)/\d+: warmup (?P<done>\d+)/(?P<total>\d+) on '
                         r'(?P<instance>\w+): (?P<rest>[^\n]*)')


def warmup_lines(log: str, name: str, saying: str = "") -> list[re.Match]:
    """The model's warmup log lines (python_backends/warmup.py), those `saying` a text."""
    return [m for m in WARMUP_LINE.finditer(log) if m["model"] == name and saying in m["rest"]]


def instances(name: str) -> list[str]:
    """Triton's instance names of a model's CPU instance group: <name>_0_<i>."""
    config = read_config(REPOSITORY / name)
    return [f"{name}_0_{i}" for i in range(sum(g.count for g in config.instance_group))]


def expected_counts(name: str) -> tuple[int, int]:
    """(executions, requests) the warmup runs on all of a model's instances."""
    samples = read_config(REPOSITORY / name).model_warmup
    runs = [(max(s.count, 1), s.batch_size) for s in samples if s.batch_size > 0]
    n = len(instances(name))
    return n * sum(r for r, _ in runs), n * sum(r * b for r, b in runs)


def warmed(log: str, name: str) -> dict[str, int]:
    """Instance -> the most warmup executions it logged (every sample's runs, when it
    warmed fully). The stub's lines reach Triton's log asynchronously, so their order
    against Triton's own lines says nothing: `triton_warmups` has that."""
    done: dict[str, int] = {}
    for match in warmup_lines(log, name):
        done[match["instance"]] = max(done.get(match["instance"], 0), int(match["done"]))
    return done


TRITON_WARMUP = re.compile(r"model '(?P<model>\w+)' instance (?P<instance>\w+) is running "
                           r"warmup sample '(?P<sample>\w+)' for iteration (?P<run>\d+)")


def triton_warmups(log: str, name: str) -> set[tuple[str, str, int]]:
    """(instance, sample, run) of every warmup run Triton started (its own verbose log
    line, core backend_model_instance.cc) before it logged the model loaded."""
    loaded = log.index(f"successfully loaded '{name}'")
    return {(m["instance"], m["sample"], int(m["run"]))
            for m in TRITON_WARMUP.finditer(log[:loaded]) if m["model"] == name}


def every_run(name: str) -> set[tuple[str, str, int]]:
    samples = read_config(REPOSITORY / name).model_warmup
    return {(i, s.name, run) for i in instances(name) for s in samples
            for run in range(1, max(s.count, 1) + 1)}


@pytest.mark.parametrize("name", FAMILY_MODELS)
def test_the_server_runs_every_family_model_with_its_warmup(http_url: str, name: str) -> None:
    with AdminClient(http_url) as admin:
        served = admin.config(name)
    on_disk = read_config(REPOSITORY / name)
    assert served.model_warmup, f"{name} is served without model_warmup"
    assert [json_format.MessageToDict(s) for s in served.model_warmup] == \
        [json_format.MessageToDict(s) for s in on_disk.model_warmup]


@pytest.mark.parametrize("name", FAMILY_MODELS)
def test_every_instance_of_every_family_model_ran_its_warmup(triton: TritonServer,
                                                             name: str) -> None:
    executions, _ = expected_counts(name)
    per_instance = executions // len(instances(name))
    assert warmed(triton.log_text(), name) == {i: per_instance for i in instances(name)}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """A server of one front and its primary encoder only, on a copy (no other traffic),
    logging verbosely (Triton's own line for each warmup run)."""
    root = tmp_path_factory.mktemp("warmup")
    repo = copy_repository([REPOSITORY], root / "repository")
    server = start_server(repo, root / "tritonserver.log", load_models=(FRONT, ENCODER),
                          log_verbose=1)
    yield server
    stop_cleanly(server)


def test_triton_ran_every_sample_on_every_instance_before_ready(small: TritonServer) -> None:
    for name in (ENCODER, FRONT):
        assert triton_warmups(small.log_text(), name) == every_run(name), name


def test_the_statistics_count_exactly_the_warmup_on_every_instance(small: TritonServer) -> None:
    """Before any request: the encoder counts its own warmup and nothing else, so the
    front's warmup at the start stopped before the encoder call; the front counts its own."""
    for name in (ENCODER, FRONT):
        counts = model_counts(small.http_url, name)
        assert (counts.execution_count, counts.inference_count) == expected_counts(name), name
        assert counts.success_count == counts.inference_count


def test_a_front_loads_warm_without_its_fallback_encoder(small: TritonServer) -> None:
    """The front runs its primary in its own process: its warmup goes the whole path at
    the server's start, no BLS call needed, and its fallback is not loaded."""
    with AdminClient(small.http_url) as admin:
        assert admin.ready_models() == sorted([FRONT, ENCODER])
    assert f"successfully loaded '{OTHER_ENCODER}'" not in small.log_text()
    inside = warmup_lines(small.log_text(), FRONT, f"(through {ENCODER} in process)")
    assert {m["instance"] for m in inside} == set(instances(FRONT))


def test_a_front_reloaded_once_the_server_started_warms_through_its_encoder(
        small: TritonServer) -> None:
    before = model_counts(small.http_url, ENCODER).inference_count
    with AdminClient(small.http_url) as admin:
        admin.reload(FRONT)
    through = warmup_lines(small.log_text(), FRONT, f"(through {ENCODER} in process)")
    assert {m["instance"] for m in through} == set(instances(FRONT))
    assert len(through) == 2 * expected_counts(FRONT)[0]  # at the start, and again now
    # the front's own copy ran every row: the encoder model saw none of them
    assert model_counts(small.http_url, ENCODER).inference_count == before


def test_a_reload_warms_the_new_instances_and_a_config_without_warmup_does_not(
        small: TritonServer) -> None:
    with AdminClient(small.http_url) as admin:
        admin.reload(ENCODER)  # new instances, new statistics
        counts = model_counts(small.http_url, ENCODER)
        assert (counts.execution_count, counts.inference_count) == expected_counts(ENCODER)
        lines = warmup_lines(small.log_text(), ENCODER)
        assert len(lines) == 2 * expected_counts(ENCODER)[0]  # the start's and the reload's
        cold = admin.config(ENCODER)
        without_warmup(cold)
        admin.load(ENCODER, cold)  # the cold baseline, no warmup
        counts = model_counts(small.http_url, ENCODER)
        assert (counts.execution_count, counts.inference_count) == (0, 0)
        admin.load(ENCODER, read_config(small.opts.repository / ENCODER))
        assert model_counts(small.http_url, ENCODER).execution_count == \
            expected_counts(ENCODER)[0]
