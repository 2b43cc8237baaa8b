"""Warmup: the samples a family generates, the executions a Python model counts, the data
files of the repository (what export/warmup.py makes from real inputs)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format
from PIL import Image
from tritonclient.grpc import model_config_pb2 as mc

from core.families import IMAGE_CLASSIFICATION, TEXT_EMBEDDING, Tensor
from core.families.catalog import catalog
from core.families.warmup import (
    WARMUP_FOLDER,
    WarmupPlan,
    data_files,
    elements,
    executions,
    samples,
    serialized,
    without_warmup,
)
from core.paths import DEFAULT_REPOSITORY as REPO
from core.settings import INTERACTIVE_INPUT_SUFFIX
from core.versions import read_config
from export import image_classification as image_recipe
from export import text_embedding as text_recipe
from export import warmup as export_warmup
from export.recipe import recipe_module
from python_backends.pb import Log
from python_backends.warmup import WarmupRuns, listening_inodes, server_started, socket_inodes

pytestmark = pytest.mark.timeout(60)

MODELS = catalog(REPO)
NAMES = [name for model in MODELS for name in model.models]
IDS = Tensor("input_ids", "TYPE_INT64", (-1,))
PIXELS = Tensor("pixel_values", "TYPE_FP32", ("channels", "height", "width"))


def test_a_sample_per_batch_size_every_input_from_its_file_variable_dims_given():
    plan = WarmupPlan(front_batches=(1,), encoder_batches=(1, 8), encoder_runs=2, tokens=32)
    made = samples(plan, [IDS, PIXELS], {"channels": 3, "height": 224, "width": 224},
                   plan.encoder_batches, plan.encoder_runs)
    assert [(s["name"], s["batch_size"], s["count"]) for s in made] == [
        ("real_batch_1", 1, 2), ("real_batch_8", 8, 2)]
    assert made[0]["inputs"] == {
        "input_ids": {"data_type": "TYPE_INT64", "dims": [32], "input_data_file": "input_ids"},
        "pixel_values": {"data_type": "TYPE_FP32", "dims": [3, 224, 224],
                         "input_data_file": "pixel_values"}}


def test_a_variable_dim_without_a_warmup_length_is_refused():
    with pytest.raises(ValueError, match="input_ids"):
        WarmupPlan(front_batches=(1,), encoder_batches=(1,)).dims(IDS, {})


@pytest.mark.parametrize(("warmup", "expected"), [
    ([], 0),
    ([{"batch_size": 1, "count": 2}, {"batch_size": 8, "count": 2}], 4),
    ([{"batch_size": 1}, {"batch_size": 4, "count": 0}], 2),  # Triton runs count 0 once
    ([{"batch_size": 0, "count": 3}, {"batch_size": 1, "count": 1}], 1),  # batch 0: skipped
])
def test_executions_are_what_triton_runs_on_each_instance(warmup, expected):
    assert executions({"model_warmup": warmup}) == expected


def test_bytes_elements_are_serialized_as_triton_reads_them():
    assert serialized([b"ab", b""]) == struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0)


def test_a_serialized_file_reads_back_as_its_elements():
    items = [b"ab", b"", "caf\u00e9".encode()]
    assert elements(serialized(items)) == items
    with pytest.raises(ValueError, match="an element of 9 bytes at byte 0 of 6"):
        elements(struct.pack("<I", 9) + b"ab")
    with pytest.raises(ValueError, match="a truncated length at byte 6"):
        elements(serialized([b"ab"]) + b"\x01")


def test_the_runs_count_down_and_log_one_line_each(caplog):
    runs = WarmupRuns({"model_warmup": [{"batch_size": 1, "count": 2}]}, Log("m/1"), "m_0_1")
    seen = []
    with caplog.at_level("INFO"):
        while runs.active:
            runs.note = "both sessions"
            runs.finished(requests=1, took_s=0.0123)
            seen.append(runs.done)
    assert seen == [1, 2] and not runs.active
    assert [r.getMessage() for r in caplog.records] == [
        "warmup 1/2 on m_0_1: 1 request(s) in 12.3 ms (both sessions)",
        "warmup 2/2 on m_0_1: 1 request(s) in 12.3 ms (both sessions)"]


@pytest.mark.parametrize("name", NAMES)
def test_every_family_model_warms_every_input_from_a_file_of_its_size(name):
    config = read_config(REPO / name)
    if config.platform == "ensemble":  # a lane in its front's process: the front warms it
        (step,) = config.ensemble_scheduling.step
        assert read_config(REPO / step.model_name).model_warmup
        return
    assert config.model_warmup, f"{name} has no model_warmup"
    required = {i.name for i in config.input if not i.name.endswith(INTERACTIVE_INPUT_SUFFIX)}
    for sample in config.model_warmup:  # the _INTERACTIVE twins: the same path, not warmed
        assert sample.batch_size >= 1 and set(sample.inputs) == required
        for tensor, spec in sample.inputs.items():
            data = (REPO / name / WARMUP_FOLDER / spec.input_data_file).read_bytes()
            kind = mc.DataType.Name(spec.data_type)
            if kind == "TYPE_STRING":  # Triton's BYTES: one serialized element
                (length,) = struct.unpack_from("<I", data)
                assert len(data) == 4 + length, f"{name}: {tensor} is not one element"
            else:
                itemsize = {"TYPE_INT64": 8, "TYPE_FP32": 4}[kind]
                assert len(data) == itemsize * int(np.prod(spec.dims)), (name, tensor)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.base)
def test_the_encoders_warmup_folders_link_to_the_fronts(model):
    front = REPO / model.front / WARMUP_FOLDER
    assert front.is_dir() and not front.is_symlink()
    for name in model.encoders.values():
        link = REPO / name / WARMUP_FOLDER
        assert link.is_symlink() and link.resolve() == front.resolve(), name


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.base)
def test_the_checked_in_data_is_what_export_makes_from_the_real_inputs(model):
    made = recipe_module(model.family).warmup_files(REPO, model)
    folder = REPO / model.front / WARMUP_FOLDER
    assert {p.name for p in folder.iterdir()} == set(made)
    for name, data in made.items():
        assert (folder / name).read_bytes() == data, f"{model.front}/warmup/{name} is stale: " \
                                                     "run python -m export.warmup"


def test_the_text_sample_is_a_real_text_with_its_real_token_ids():
    model = next(m for m in MODELS if m.family is TEXT_EMBEDDING)
    folder = REPO / model.front / WARMUP_FOLDER
    text = (folder / "TEXT").read_bytes()[4:].decode()
    assert text in export_warmup.client_inputs(model)
    ids = np.frombuffer((folder / "input_ids").read_bytes(), "<i8")
    mask = np.frombuffer((folder / "attention_mask").read_bytes(), "<i8")
    real = text_recipe.warmup_feeds(REPO, model, [text])["input_ids"][0]
    assert mask.sum() == len(real) and (ids[:len(real)] == real).all()
    assert len(real) > TEXT_EMBEDDING.serving.warmup.tokens // 2, "not a typical text"


def test_the_image_sample_is_a_real_image_and_its_preprocessed_pixels(tmp_path: Path):
    model = next(m for m in MODELS if m.family is IMAGE_CLASSIFICATION)
    folder = REPO / model.front / WARMUP_FOLDER
    image = (folder / "IMAGE").read_bytes()[4:]
    (tmp_path / "sample").write_bytes(image)
    with Image.open(tmp_path / "sample") as opened:
        assert min(opened.size) >= 28
    pixels = np.frombuffer((folder / "pixel_values").read_bytes(), "<f4")
    expected = image_recipe.warmup_feeds(REPO, model, image)["pixel_values"]
    assert np.array_equal(pixels, expected.reshape(-1)) and pixels.std() > 0


def test_without_warmup_strips_every_sample():
    config = read_config(REPO / NAMES[0])
    assert data_files(config)
    without_warmup(config)
    assert not config.model_warmup and not data_files(config)
    assert "model_warmup" not in json_format.MessageToDict(config)


def test_write_warmup_links_and_leaves_unchanged_files_alone(tmp_path: Path):
    from core.repository import copy_repository

    model = next(m for m in MODELS if m.family is TEXT_EMBEDDING)
    repo = copy_repository([REPO], tmp_path / "repo")
    for name in model.models:  # a copy holds real folders: back to none
        target = repo / name / WARMUP_FOLDER
        for item in target.iterdir():
            item.unlink()
        target.rmdir()
    changed = export_warmup.write_warmup(repo, model)
    assert {p.name for p in changed} == {"TEXT", "input_ids", "attention_mask", WARMUP_FOLDER}
    assert all((repo / n / WARMUP_FOLDER / "TEXT").exists() for n in model.models)
    assert export_warmup.write_warmup(repo, model) == []


TCP = """  sl local_address rem_address st tx_queue rx_queue tr tm->when retrnsmt uid timeout inode
   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1
   1: 0100007F:1F40 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 222 1
"""


def test_only_listening_sockets_count_and_only_the_processs_own():
    assert listening_inodes([TCP, TCP.splitlines()[0]]) == {"111"}
    assert socket_inodes(["socket:[111]", "pipe:[5]", "/dev/null", ""]) == {"111"}


def test_a_server_has_started_once_it_listens(tmp_path: Path):
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "tcp").write_text(TCP)
    fds = proc / "42" / "fd"
    fds.mkdir(parents=True)
    (fds / "3").symlink_to("socket:[222]")  # connected, not listening: still starting
    assert not server_started(42, proc)
    (fds / "4").symlink_to("socket:[111]")
    assert server_started(42, proc)
    assert not server_started(43, proc)  # no such process
