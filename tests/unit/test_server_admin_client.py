"""server.admin_client without a server: its one error boundary, configs, inputs."""

from __future__ import annotations

import json

import pytest
from tmr_client.errors import ServerUnreachableError
from tritonclient.grpc import model_config_pb2 as mc

from core.families import FAMILIES
from core.paths import DEFAULT_REPOSITORY
from core.ports import free_port
from core.probes import probe_target
from core.versions import read_config
from server.admin_client import (
    AdminClient,
    IndexEntry,
    config_from_json,
    config_to_json,
    infer_inputs,
)


def test_every_call_fails_with_the_projects_typed_error_not_tritonclients() -> None:
    with AdminClient(f"localhost:{free_port()}") as admin:
        with pytest.raises(ServerUnreachableError):
            admin.index()
        with pytest.raises(ServerUnreachableError):
            admin.reload("embed", {"forced_level": "2"})


def test_a_probe_that_cannot_reach_the_server_is_a_failed_check_with_its_typed_error() -> None:
    with AdminClient(f"localhost:{free_port()}") as admin:
        check = admin.probe_model("embed")
    assert not check.ok and isinstance(check.error, ServerUnreachableError)
    assert check.detail == str(check.error)


@pytest.mark.parametrize("model", ["embed", "minilm_onnx", "digits", "health"])
def test_a_config_travels_to_the_load_api_and_back_unchanged(model: str) -> None:
    config = read_config(DEFAULT_REPOSITORY / model)
    assert config_from_json(json.loads(config_to_json(config))) == config


@pytest.mark.parametrize("model", ["embed", "minilm_onnx", "digits", "digits_onnx"])
def test_each_familys_probe_becomes_inputs_of_the_configs_datatypes(model: str) -> None:
    config = read_config(DEFAULT_REPOSITORY / model)
    target = probe_target(config)
    assert target is not None and target.family in FAMILIES.values()
    declared = {t.name: mc.DataType.Name(t.data_type).removeprefix("TYPE_")
                for t in config.input}
    wire = {"STRING": "BYTES"}
    for tensor in infer_inputs(target.inputs):
        assert tensor.datatype() == wire.get(declared[tensor.name()], declared[tensor.name()])


def test_models_outside_every_family_have_no_probe() -> None:
    assert probe_target(read_config(DEFAULT_REPOSITORY / "health")) is None


def test_an_unloaded_entry_is_told_apart_from_one_never_loaded() -> None:
    assert IndexEntry("embed", 1, "UNAVAILABLE", "unloaded").unloaded
    assert not IndexEntry("embed", 1, "UNAVAILABLE", "load failed").unloaded
    assert not IndexEntry("embed", None, "", "").unloaded
