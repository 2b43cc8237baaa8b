"""Every config.pbtxt, parsed exactly as Triton parses it, against contracts.py and the exports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from python_backends import contracts
from server.settings import DEFAULT_REPOSITORY as REPO

CPU_CORES = 2  # this machine's cores: CPU encoders must not oversubscribe them
MAIN_CONFIGS = sorted(REPO.glob("*/config.pbtxt"))
PROFILES = sorted(REPO.glob("*/configs/*.pbtxt"))
THREAD_KEYS = {"onnxruntime": "intra_op_thread_count", "pytorch": "INTRA_OP_THREAD_COUNT"}


def parse(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def config(name: str) -> mc.ModelConfig:
    return parse(REPO / name / "config.pbtxt")


def folder_of(path: Path) -> str:
    return path.parent.name if path.name == "config.pbtxt" else path.parent.parent.name


def test_the_repository_has_configs_for_embed_and_every_encoder():
    expected = {contracts.EMBED_MODEL, *contracts.ENCODER_MODELS}
    assert {p.parent.name for p in MAIN_CONFIGS} >= expected


@pytest.mark.parametrize("path", MAIN_CONFIGS + PROFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_config_parses_and_its_name_equals_its_folder(path):
    assert parse(path).name == folder_of(path)


def test_embed_io_matches_contracts():
    embed = config(contracts.EMBED_MODEL)
    assert [(t.name, t.data_type, list(t.dims)) for t in embed.input] == \
        [(contracts.TEXT_INPUT, mc.TYPE_STRING, [1])]
    assert [(t.name, t.data_type, list(t.dims)) for t in embed.output] == \
        [(contracts.EMBEDDING_OUTPUT, mc.TYPE_FP32, [contracts.EMBEDDING_DIM]),
         (contracts.SERVED_BY_OUTPUT, mc.TYPE_STRING, [1])]


def test_embed_primary_and_fallback_are_known_encoders_and_differ():
    params = config("embed").parameters
    primary = params["primary_model"].string_value
    fallback = params["fallback_model"].string_value
    assert {primary, fallback} <= set(contracts.ENCODER_MODELS) and primary != fallback
    assert contracts.PRECISION[fallback] == "int8"  # the cheaper model of the ladder


def test_embed_degradation_settings_parse_with_the_policy_reader():
    from google.protobuf.json_format import MessageToDict

    from python_backends.degradation import PolicySettings

    settings = PolicySettings.from_config(MessageToDict(config("embed"),
                                                        preserving_proto_field_name=True))
    assert settings.forced_level is None  # signals decide unless an operator forces a level
    assert 0 < settings.down_ratio < 1 and 0 < settings.queue_ratio <= 1
    assert settings.min_dwell_s > settings.recover_dwell_s > 0  # rise slowly, fall fast


@pytest.mark.parametrize("name", contracts.ENCODER_MODELS)
def test_encoder_io_matches_contracts(name):
    encoder = config(name)
    assert [(t.name, t.data_type, list(t.dims)) for t in encoder.input] == \
        [(n, mc.TYPE_INT64, [-1]) for n in contracts.ENCODER_INPUTS]
    assert [(t.name, t.data_type, list(t.dims)) for t in encoder.output] == \
        [(contracts.ENCODER_OUTPUTS[name], mc.TYPE_FP32, [contracts.EMBEDDING_DIM])]


@pytest.mark.parametrize("name", contracts.ENCODER_MODELS)
def test_encoder_takes_a_whole_embed_batch_in_one_bls_call(name):
    assert config(name).max_batch_size >= config("embed").max_batch_size


def test_embed_has_priority_levels_each_with_a_timeout_policy_and_low_sheds_first():
    batching = config("embed").dynamic_batching
    levels = batching.priority_levels
    assert levels >= 2
    assert 1 <= batching.default_priority_level <= levels
    policies = batching.priority_queue_policy
    assert set(policies) == set(range(1, levels + 1))
    for level, policy in policies.items():
        assert policy.default_timeout_microseconds > 0, level
        assert policy.allow_timeout_override, level
    assert policies[levels].max_queue_size < policies[1].max_queue_size


def test_embed_has_at_least_two_instances_because_one_stalls_with_priorities_on_2_51():
    assert sum(g.count for g in config("embed").instance_group) >= 2


@pytest.mark.parametrize("name", contracts.ENCODER_MODELS)
def test_cpu_encoder_sets_its_threads_and_fits_the_machines_cores(name):
    encoder = config(name)
    key = THREAD_KEYS["pytorch" if encoder.platform == "pytorch_libtorch" else encoder.backend]
    assert key in encoder.parameters, f"{name} has no {key} parameter"
    threads = int(encoder.parameters[key].string_value)
    groups = encoder.instance_group
    assert groups and all(g.kind == mc.ModelInstanceGroup.KIND_CPU for g in groups)
    instances = sum(g.count for g in groups)
    assert instances * threads <= CPU_CORES


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_gpu_profile_differs_from_config_only_in_instance_group_and_parameters(path):
    profile, main = parse(path), parse(path.parent.parent / "config.pbtxt")
    assert profile.instance_group, f"{path} has no instance_group"
    assert all(g.kind == mc.ModelInstanceGroup.KIND_GPU for g in profile.instance_group)
    for message in (profile, main):
        message.ClearField("instance_group")
        message.ClearField("parameters")
    assert profile == main


@pytest.mark.parametrize("path", [p for p in MAIN_CONFIGS if parse(p).backend == "python"],
                         ids=lambda p: p.parent.name)
def test_python_model_is_a_shim_importing_triton_python_model_from_python_backends(path):
    shim = path.parent / "1" / "model.py"
    assert shim.is_file(), f"{shim} is missing"
    source = shim.read_text()
    assert len([line for line in source.splitlines() if line.strip()]) <= 8
    imported = {
        (node.module, alias.asname or alias.name)
        for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert any(module and module.split(".")[0] == "python_backends" and bound == "TritonPythonModel"
               for module, bound in imported), imported


@pytest.mark.parametrize("path", [p for p in MAIN_CONFIGS if parse(p).backend == "onnxruntime"],
                         ids=lambda p: p.parent.name)
def test_onnx_export_graph_names_equal_the_configs(path):
    import onnx

    exports = sorted(path.parent.glob("[0-9]*/model.onnx"))
    assert exports, f"no exported {path.parent.name}/<n>/model.onnx; run `make setup`"
    cfg = parse(path)
    for export in exports:
        graph = onnx.load(str(export), load_external_data=False).graph
        initializers = {i.name for i in graph.initializer}
        assert [i.name for i in graph.input if i.name not in initializers] == \
            [t.name for t in cfg.input], export
        assert [o.name for o in graph.output] == [t.name for t in cfg.output], export
