"""Every config.pbtxt, parsed exactly as Triton parses it, against its family and the exports.

The family models' configs are generated (core/families/configs.py): each
must be exactly what its family makes of what varies per model, so no two can drift.
Every parameter any config sets must be read by some code, and every parameter the code
reads has its default in one place (a field of core/settings.py, or a named constant).
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from core.families import FAMILIES
from core.families.catalog import catalog
from core.families.configs import (
    GPU,
    encoder_config,
    encoder_spec,
    front_config,
    front_spec,
    gpu_spec,
    parameters_of,
    write_front,
)
from core.paths import DEFAULT_REPOSITORY as REPO
from core.paths import PROJECT_ROOT
from core.settings import INTERACTIVE_INPUT_SUFFIX, LadderSettings, ParameterSettings
from runtime import images

CPU_CORES = 2  # this machine's cores: CPU encoders must not oversubscribe them
MAIN_CONFIGS = sorted(REPO.glob("*/config.pbtxt"))
PROFILES = sorted(REPO.glob("*/configs/gpu.pbtxt"))  # host.pbtxt: test_host_profile.py
MODELS = catalog(REPO)
FRONTS = [m.front for m in MODELS if m.front]
ENCODERS = [name for m in MODELS for name in m.encoders.values()]


def parse(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def config(name: str) -> mc.ModelConfig:
    return parse(REPO / name / "config.pbtxt")


def folder_of(path: Path) -> str:
    return path.parent.name if path.name == "config.pbtxt" else path.parent.parent.name


def test_the_repository_holds_a_complete_model_of_every_family_it_names():
    assert MODELS, "no family model in the repository"
    for model in MODELS:
        assert model.front, f"{model.base} has no front model"
        assert set(model.encoders) == {f.name for f in model.family.formats}, model


@pytest.mark.parametrize("path", MAIN_CONFIGS + PROFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_config_parses_and_its_name_equals_its_folder(path):
    assert parse(path).name == folder_of(path)


@pytest.mark.parametrize("name", ENCODERS)
def test_encoder_config_and_gpu_profile_are_what_the_family_generates(name):
    cpu = config(name)
    spec = encoder_spec(cpu)
    assert encoder_config(spec) == cpu
    profile = REPO / name / "configs" / "gpu.pbtxt"
    if profile.exists():
        gpu = parse(profile)
        assert encoder_config(gpu_spec(spec, gpu), GPU) == gpu


@pytest.mark.parametrize("name", FRONTS)
def test_front_config_is_what_the_family_generates(name):
    front = config(name)
    assert front_config(front_spec(front)) == front
    profile = REPO / name / "configs" / "gpu.pbtxt"
    if profile.exists():
        assert front_config(front_spec(front), GPU) == parse(profile)


def test_a_front_whose_primary_is_cpu_only_gets_a_gpu_profile_routed_to_the_default(
        tmp_path):
    spec = front_spec(config("embed"))
    write_front(tmp_path, replace(spec, primary="openvino"))
    cpu, gpu = parse(tmp_path / "embed" / "config.pbtxt"), parse(
        tmp_path / "embed" / "configs" / "gpu.pbtxt")
    assert cpu.parameters["primary_model"].string_value == "minilm_openvino"
    assert gpu.parameters["primary_model"].string_value == "minilm_onnx"
    assert front_spec(cpu).primary == "openvino"
    write_front(tmp_path, replace(spec, primary=None))  # back to the default:
    gpu = parse(tmp_path / "embed" / "configs" / "gpu.pbtxt")  # its primary on the GPU,
    assert gpu.parameters["primary_model"].string_value == "minilm_onnx"  # over BLS
    assert gpu.parameters["primary_in_process"].string_value == "false"
    assert parse(tmp_path / "embed" / "config.pbtxt").parameters[
        "primary_in_process"].string_value == "true"


def test_a_front_without_an_in_process_primary_has_no_gpu_profile(tmp_path):
    spec = front_spec(config("embed"))
    parameters = {**spec.parameters, "primary_in_process": "false",
                  "in_process_threads": "instance"}
    write_front(tmp_path, replace(spec, parameters=parameters))
    assert not (tmp_path / "embed" / "configs" / "gpu.pbtxt").exists()


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_gpu_profile_differs_from_config_only_in_instance_group_and_parameters(path):
    profile, main = parse(path), parse(path.parent.parent / "config.pbtxt")
    assert profile.instance_group, f"{path} has no instance_group"
    front = "primary_model" in main.parameters  # a Python front stays on the CPU
    assert all(g.kind == (mc.ModelInstanceGroup.KIND_CPU if front else
                          mc.ModelInstanceGroup.KIND_GPU) for g in profile.instance_group)
    for message in (profile, main):
        message.ClearField("instance_group")
        message.ClearField("parameters")
    assert profile == main


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.base)
def test_front_and_encoder_tensors_are_the_familys(model):
    fam = model.family
    front = config(model.front)
    # the embedding width or the class count: what the encoders output
    dim = int(config(next(iter(model.encoders.values()))).output[0].dims[-1])
    io = [(t.name, mc.DataType.Value(t.data_type), list(t.resolved({"dim": dim})))
          for t in (*fam.contract.front_inputs, *fam.contract.front_outputs)]
    # the family's inputs, then their _INTERACTIVE twins (its ensemble lane's), every one
    # optional; then the family's outputs
    public = [t for t in front.input if not t.name.endswith(INTERACTIVE_INPUT_SUFFIX)]
    twins = [t for t in front.input if t.name.endswith(INTERACTIVE_INPUT_SUFFIX)]
    assert [t.name for t in twins] == [t.name + INTERACTIVE_INPUT_SUFFIX for t in public]
    assert all(t.optional for t in front.input)
    assert [(t.name, t.data_type, list(t.dims)) for t in (*public, *front.output)] == io
    for fmt, name in model.encoders.items():
        suffix = fam.format(fmt).output_suffix
        encoder = config(name)
        assert [t.name for t in encoder.input] == [t.name for t in fam.contract.encoder_inputs]
        assert [(t.name, list(t.dims)) for t in encoder.output] == \
            [(fam.contract.encoder_output.name + suffix, [dim])]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.base)
def test_front_calls_its_own_encoders_and_falls_back_to_the_cheaper_precision(model):
    params = parameters_of(config(model.front))
    fam = model.family
    assert params["primary_model"] == model.encoder(fam.serving.primary)
    assert params["fallback_model"] == model.encoder(fam.serving.fallback)
    assert fam.format(fam.serving.fallback).precision == "int8"


@pytest.mark.parametrize("name", FRONTS)
def test_front_degradation_settings_parse_with_the_policy_reader(name):
    from google.protobuf.json_format import MessageToDict

    settings = LadderSettings.from_parameters(MessageToDict(config(name),
                                                            preserving_proto_field_name=True))
    assert settings.forced is None  # signals decide unless an operator forces a level
    assert 0 < settings.degrade_down_ratio < 1 and 0 < settings.queue_ratio <= 1
    assert settings.min_dwell_s > settings.recover_dwell_s > 0  # rise slowly, fall fast


@pytest.mark.parametrize("name", ENCODERS)
def test_encoder_takes_a_whole_front_batch_in_one_bls_call(name):
    fronts = [m.front for m in MODELS if name in m.encoders.values()]
    assert config(name).max_batch_size >= config(fronts[0]).max_batch_size


@pytest.mark.parametrize("name", FRONTS)
def test_front_is_one_process_whose_workers_hold_the_queue(name):
    """One instance, answering after execute returns (python_backends/workers.py): the stub
    holds the queue and its bounds, so Triton's batcher has no priority levels or queue
    policy, which with one instance turn off its prefetching and stall a lone request up to
    500 ms (core r24.10; docs/serving.md, "One model, one process")."""
    front = config(name)
    assert sum(g.count for g in front.instance_group) == 1
    batching = front.dynamic_batching
    assert batching.priority_levels == 0 and not batching.priority_queue_policy
    assert not batching.HasField("default_queue_policy")
    params = parameters_of(front)
    assert params["worker_threads"] == "cores" and params["interactive_workers"] == "1"
    assert params["primary_in_process"] == "true" and params["in_process_threads"] == "1"


@pytest.mark.parametrize("name", ENCODERS)
def test_cpu_encoder_sets_its_threads_and_fits_the_machines_cores(name):
    encoder = config(name)
    params = parameters_of(encoder)
    fam = FAMILIES[params["family"]]
    key = fam.format(params["format"]).threads_parameter
    assert key in params, f"{name} has no {key} parameter"
    groups = encoder.instance_group
    assert groups and all(g.kind == mc.ModelInstanceGroup.KIND_CPU for g in groups)
    assert sum(g.count for g in groups) * int(params[key]) <= CPU_CORES


@pytest.mark.parametrize("name", FRONTS)
def test_a_front_is_served_by_its_familys_python_based_backend_with_no_model_py(name):
    front = config(name)
    assert (PROJECT_ROOT / "python_backends" / "backends" / front.backend / "model.py").is_file()
    assert not list((REPO / name).glob("*/model.py")), "a front needs no model.py shim"


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


SETTINGS = ParameterSettings.__subclasses__()  # core/settings.py and runtime.images
assert images.ImageSpec in SETTINGS


def python_files(*folders: str) -> list[tuple[Path, ast.AST]]:
    return [(path, ast.parse(path.read_text())) for folder in folders
            for path in sorted((PROJECT_ROOT / folder).rglob("*.py"))]


def keys_read_by_code() -> set[str]:
    """Every settings field (core/settings.py: a config parameter of that name), and the
    string literals the code reads with: a call argument (params.get("key")), a subscript
    (params["key"]), a membership test ("key" in p), or a class attribute or module
    constant naming the key code reads (`threads_parameter = "KEY"`,
    `IDLE_THREADS_PARAMETER = "key"`). Other literal dict keys (the families' gates) are
    definitions, not reads."""
    read = {key for cls in SETTINGS for key in cls.parameter_keys()}
    for _, tree in python_files("core", "runtime", "python_backends", "server", "export", "perf",
                                "cli"):
        for node in ast.walk(tree):
            values: list[ast.AST] = []
            if isinstance(node, ast.Call):
                values = list(node.args)
            elif isinstance(node, ast.Subscript):
                values = [node.slice]
            elif isinstance(node, ast.Compare):
                values = [node.left, *node.comparators]
            elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id.lower().endswith("_parameter")
                    for t in node.targets):
                values = [node.value]
            read |= {v.value for v in values
                     if isinstance(v, ast.Constant) and isinstance(v.value, str)}
    return read


def test_every_parameter_a_config_sets_is_read_by_some_code():
    read = keys_read_by_code()
    unread = {f"{folder_of(path)}: {key}" for path in MAIN_CONFIGS + PROFILES
              for key in parse(path).parameters if key not in read}
    assert unread == set(), "parameters set in configs but read nowhere"


def parameter_calls() -> list[tuple[str, ast.Call]]:
    """Every `parameter(config, key, default, cast)` call of the stub side and core."""
    return [(f"{path.relative_to(PROJECT_ROOT)}:{node.lineno}", node)
            for path, tree in python_files("core", "runtime", "python_backends")
            for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", None)) == "parameter"]


def test_every_parameter_the_code_reads_has_its_default_in_one_place():
    """The reverse of the test above: a key is a field of one settings class (its default
    written there), or read by `parameter()` with a named constant as its default."""
    owners: dict[str, list[str]] = {}
    for cls in SETTINGS:
        for key in cls.parameter_keys():
            owners.setdefault(key, []).append(cls.__name__)
    assert {k: v for k, v in owners.items() if len(v) > 1} == {}, "a key in two settings"
    calls = parameter_calls()
    assert calls, "no parameter() call found: the scan is broken"
    twice = [f"{where}: {call.args[1].value}" for where, call in calls
             if isinstance(call.args[1], ast.Constant) and call.args[1].value in owners]
    assert twice == [], "keys of a settings class read again beside it"
    literal = [f"{where}: {ast.unparse(call.args[2])}" for where, call in calls
               if where.split(":")[0] != "core/settings.py"
               and isinstance(call.args[2], ast.Constant)]
    assert literal == [], "parameter() defaults typed in place: name them, or use a setting"


def names_used(tree: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | \
        {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


@pytest.mark.parametrize("cls", SETTINGS, ids=lambda c: c.__name__)
def test_every_settings_class_is_parsed_by_the_stub_side_and_each_field_is_read(cls):
    stub = set().union(*(names_used(tree) for _, tree in python_files("python_backends",
                                                                      "runtime")))
    core = set().union(*(names_used(tree) for _, tree in python_files("core")))
    assert cls.__name__ in stub, f"no stub code reads {cls.__name__}"
    assert set(cls.parameter_keys()) - (stub | core) == set(), "settings fields no code reads"


def test_settings_render_into_parameters_and_parse_back_to_equal_settings():
    for cls in SETTINGS:
        default = cls()
        rendered = {k: {"string_value": v} for k, v in default.to_parameters().items()}
        assert cls.from_parameters({"parameters": rendered}) == default, cls.__name__
    for fam in FAMILIES.values():
        config = {"parameters": {k: {"string_value": v}
                                 for k, v in fam.serving.front_parameters.items()}}
        for settings in fam.serving.front_settings:
            assert type(settings).from_parameters(config) == settings, (fam.name, settings)


def test_a_bad_setting_is_a_config_error_naming_its_key():
    from core.params import ConfigError

    bad = {"parameters": {"small_batch_rows": {"string_value": "0"}}}
    with pytest.raises(ConfigError, match="parameter 'small_batch_rows'='0' is invalid"):
        LadderSettings.from_parameters(bad)
