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
)
from core.host_profile import LANE_MAX_THREADS, in_process_threads, lane_threads
from core.settings import (
    EVERY_CORE,
    IN_PROCESS_PARAMETER,
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
    (model,) = [m for m in catalog(REPOSITORY) if m.front == front]
    lane = REPOSITORY / str(model.lane)
    sources = [p for p in config_files(REPOSITORY / front) if p.name != "host.pbtxt"]
    assert sorted(p.relative_to(lane) for p in config_files(lane) if p.is_file()
                  and p.name != "host.pbtxt") == sorted(p.relative_to(REPOSITORY / front)
                                                        for p in sources)
    for source in sources:
        relative = source.relative_to(REPOSITORY / front)
        expected = render(lane_config(parse_config(source.read_text()),
                                      gpu=relative.stem == GPU), lane_header(front, relative))
        assert (lane / relative).read_text() == expected, f"{lane.name}/{relative}: re-derive"
    for name in LINKED:
        assert os.readlink(lane / name) == f"../{front}/{name}"


@pytest.mark.parametrize("front", FRONTS)
def test_a_lane_has_one_instance_a_bounded_batch_and_its_primary_in_process(front: str) -> None:
    lane = parse_config((REPOSITORY / f"{front}_interactive" / "config.pbtxt").read_text())
    assert [g.count for g in lane.instance_group] == [LANE_INSTANCES]
    assert lane.dynamic_batching.priority_levels == 0
    # no queue policy: one instance with one turns off Triton's prefetching (lanes.py)
    assert not lane.dynamic_batching.HasField("default_queue_policy")
    assert lane.parameters[LANE_PARAMETER].string_value == front
    assert lane.parameters[IN_PROCESS_PARAMETER].string_value == "true"
    params = {"parameters": {k: {"string_value": v.string_value}
                             for k, v in lane.parameters.items()}}
    assert LadderSettings.from_parameters(params).in_process_threads == LANE_SHARE
    assert LadderSettings.from_parameters(params).lane_requests == LANE_QUEUE
    assert ModelSettings.from_parameters(params).cpu_scheduling == "normal"
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
