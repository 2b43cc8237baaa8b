"""Each front's interactive lane (core/families/lanes.py) is what its front's configs
derive, file by file, and shares the front's version folder and warmup inputs."""

from __future__ import annotations

import os

import pytest

from core.families.catalog import catalog
from core.families.configs import GPU, render
from core.families.lanes import (
    LANE_INSTANCES,
    LANE_PARAMETER,
    LANE_QUEUE,
    LINKED,
    lane_config,
    lane_header,
    with_lane_inputs,
)
from core.host_profile import LANE_MAX_THREADS, in_process_threads, lane_threads
from core.settings import (
    EVERY_CORE,
    IN_PROCESS_PARAMETER,
    INTERACTIVE_INPUT_SUFFIX,
    INTERACTIVE_WORKERS_PARAMETER,
    LANE_SHARE,
    LadderSettings,
    ModelSettings,
    ThreadShare,
)
from core.versions import config_files, parse_config
from tests.conftest import REPOSITORY

FRONTS = [m.front for m in catalog(REPOSITORY) if m.front]


def test_every_front_of_the_repository_has_its_lane() -> None:
    assert FRONTS and all(m.lane for m in catalog(REPOSITORY) if m.front)


@pytest.mark.parametrize("front", FRONTS)
def test_a_lane_is_what_its_fronts_config_files_derive(front: str) -> None:
    """Each of the front's files derives the lane's file of the same name, but a profile
    whose lane is the main file's (an ensemble the profile leaves as it is): Triton then
    serves the lane's config.pbtxt."""
    (model,) = [m for m in catalog(REPOSITORY) if m.front == front]
    lane = REPOSITORY / str(model.lane)
    sources = [p for p in config_files(REPOSITORY / front) if p.name != "host.pbtxt"]
    main = lane_config(parse_config(sources[0].read_text()))
    derived = {}
    for source in sources:
        relative = source.relative_to(REPOSITORY / front)
        config = lane_config(parse_config(source.read_text()), gpu=relative.stem == GPU)
        if relative.name == "config.pbtxt" or config != main:
            derived[relative] = render(config, lane_header(front, relative))
    assert sorted(p.relative_to(lane) for p in config_files(lane) if p.is_file()
                  and p.name != "host.pbtxt") == sorted(derived)
    for relative, expected in derived.items():
        assert (lane / relative).read_text() == expected, f"{lane.name}/{relative}: re-derive"
    for name in LINKED:
        assert os.readlink(lane / name) == f"../{front}/{name}"


@pytest.mark.parametrize("front", FRONTS)
def test_a_shipped_lane_is_an_ensemble_into_its_fronts_process(front: str) -> None:
    """No process and no copy of its own: its requests reach the front's interactive
    worker through the front's _INTERACTIVE inputs (docs/serving.md, "One model, one process")."""
    lane = parse_config((REPOSITORY / f"{front}_interactive" / "config.pbtxt").read_text())
    assert lane.platform == "ensemble" and not lane.instance_group
    assert lane.parameters[LANE_PARAMETER].string_value == front
    assert [s.model_name for s in lane.ensemble_scheduling.step] == [front]
    assert "default_front" not in lane.parameters and "openai_names" not in lane.parameters


def test_a_lane_of_its_own_has_one_instance_a_bounded_batch_and_its_primary_in_process(
        ) -> None:
    """A front without interactive workers (a third family's default) keeps a lane model
    of its own, as before the one-process design."""
    front = parse_config((REPOSITORY / FRONTS[0] / "config.pbtxt").read_text())
    front.parameters[INTERACTIVE_WORKERS_PARAMETER].string_value = "0"
    lane = lane_config(front)
    assert [g.count for g in lane.instance_group] == [LANE_INSTANCES]
    assert lane.dynamic_batching.priority_levels == 0
    # no queue policy: one instance with one turns off Triton's prefetching (lanes.py)
    assert not lane.dynamic_batching.HasField("default_queue_policy")
    assert lane.parameters[LANE_PARAMETER].string_value == FRONTS[0]
    assert lane.parameters[IN_PROCESS_PARAMETER].string_value == "true"
    params = {"parameters": {k: {"string_value": v.string_value}
                             for k, v in lane.parameters.items()}}
    assert LadderSettings.from_parameters(params).in_process_threads == LANE_SHARE
    assert LadderSettings.from_parameters(params).lane_requests == LANE_QUEUE
    assert ModelSettings.from_parameters(params).cpu_scheduling == "normal"
    assert ModelSettings.from_parameters(params).worker_threads == "0"
    assert "default_front" not in lane.parameters and "openai_names" not in lane.parameters


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 1), (3, 1), (4, 2), (8, 4),
                                                (64, LANE_MAX_THREADS)])
def test_a_lane_takes_half_the_cores_so_a_saturated_lane_leaves_the_shared_path_the_rest(
        cores: int, threads: int) -> None:
    assert lane_threads(cores) == threads
    assert in_process_threads(LANE_SHARE, cores) == threads
    assert in_process_threads(EVERY_CORE, cores) == cores
    assert in_process_threads(ThreadShare(), cores) is None  # one encoder instance's
    assert in_process_threads(ThreadShare.parse("3"), cores) == 3


@pytest.mark.parametrize("front", FRONTS)
def test_a_front_with_interactive_workers_gets_an_ensemble_lane_into_its_process(
        front: str) -> None:
    """A workers profile (server/tune.py): the front takes `_INTERACTIVE` twins of its
    inputs, and its lane is an ensemble with no process of its own that feeds them, the
    outputs mapped back; both parse as Triton parses them."""
    config = parse_config((REPOSITORY / front / "config.pbtxt").read_text(encoding="utf-8"))
    config.parameters[INTERACTIVE_WORKERS_PARAMETER].string_value = "1"
    inside = with_lane_inputs(config)
    names = [t.name for t in inside.input]
    public = [t.name for t in config.input if not t.name.endswith(INTERACTIVE_INPUT_SUFFIX)]
    assert names == public + [n + INTERACTIVE_INPUT_SUFFIX for n in public]
    assert all(t.optional for t in inside.input)
    assert with_lane_inputs(inside) == inside  # applying it twice changes nothing
    lane = lane_config(inside)
    assert lane.platform == "ensemble" and not lane.instance_group and not lane.backend
    assert lane.name == f"{front}_interactive" and lane.max_batch_size == config.max_batch_size
    assert [t.name for t in lane.input] == public and not any(t.optional for t in lane.input)
    assert [t.name for t in lane.output] == [t.name for t in config.output]
    (step,) = lane.ensemble_scheduling.step
    assert step.model_name == front and step.model_version == -1
    assert dict(step.input_map) == {n + INTERACTIVE_INPUT_SUFFIX: n for n in public}
    assert dict(step.output_map) == {t.name: t.name for t in config.output}
    assert lane.parameters[LANE_PARAMETER].string_value == front
    assert parse_config(render(lane, "h")) == lane
    assert parse_config(render(inside, "h")) == inside


def test_a_front_without_interactive_workers_keeps_a_lane_of_its_own() -> None:
    config = parse_config((REPOSITORY / FRONTS[0] / "config.pbtxt").read_text(encoding="utf-8"))
    config.parameters[INTERACTIVE_WORKERS_PARAMETER].string_value = "0"
    assert lane_config(config).backend == config.backend
