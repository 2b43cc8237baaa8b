"""python_backends/in_process.py: when an on-demand encoder is held, and a real one loaded
and let go in this process."""

from __future__ import annotations

import numpy as np
import pytest

from core import versions
from core.paths import DEFAULT_REPOSITORY
from python_backends.in_process import LocalEncoder, OnDemand
from runtime.errors import ChildModelError
from runtime.runners import SpikeWatch


def test_an_on_demand_encoder_is_not_held_at_rest() -> None:
    assert OnDemand(60).wanted(0, now=0.0) is False
    assert OnDemand(60).wanted(0, now=1000.0) is False


def test_it_is_held_from_the_first_level_above_zero_until_level_zero_held_long_enough() -> None:
    hold = OnDemand(60)
    assert hold.wanted(1, now=10.0) is True
    assert hold.wanted(2, now=20.0) is True
    assert hold.wanted(0, now=30.0) is True  # level 0 came back: the clock starts
    assert hold.wanted(0, now=89.9) is True
    assert hold.wanted(0, now=90.0) is False
    assert hold.wanted(0, now=500.0) is False


def test_a_new_rise_before_the_release_restarts_the_calm_clock() -> None:
    hold = OnDemand(60)
    hold.wanted(1, now=0.0)
    hold.wanted(0, now=10.0)
    hold.wanted(1, now=50.0)
    assert hold.wanted(0, now=80.0) is True  # calm since 80, not since 10
    assert hold.wanted(0, now=139.0) is True
    assert hold.wanted(0, now=140.0) is False


def digits_feeds() -> dict[str, np.ndarray]:
    return {"pixel_values": np.zeros((2, 1, 28, 28), dtype=np.float32)}


def test_a_local_encoder_loads_the_served_version_runs_it_and_lets_it_go() -> None:
    name = "digits_int8"
    served = versions.served_version(DEFAULT_REPOSITORY / name)
    lines: list[str] = []
    local = LocalEncoder(DEFAULT_REPOSITORY, name, "logits", 1, lines.append)
    assert not local.loaded and not local.serves(-1)
    assert local.load(served) is True
    assert local.serves(-1) and local.serves(served) and not local.serves(served + 1)
    assert local(digits_feeds()).shape == (2, 10)
    local.release("test")
    assert not local.loaded
    with pytest.raises(ChildModelError, match=r"digits_int8.*released"):
        local(digits_feeds())
    assert any(f"in-process {name} v{served} loaded" in line for line in lines)
    assert lines[-1] == f"in-process {name} released: test"


def test_a_version_that_does_not_load_is_remembered_and_not_retried() -> None:
    lines: list[str] = []
    local = LocalEncoder(DEFAULT_REPOSITORY, "digits_int8", "logits", 1, lines.append)
    assert local.load(999) is False
    assert local.load(999) is False
    assert len([line for line in lines if "did not load" in line]) == 1


def test_openvino_memory_is_released_only_after_a_call_much_larger_than_usual() -> None:
    watch = SpikeWatch(factor=2.0, alpha=0.1)
    assert watch.spiked(256) is False  # the first call sets what is usual
    assert [watch.spiked(256) for _ in range(5)] == [False] * 5
    assert watch.spiked(64 * 256) is True  # a long document among short texts
    assert watch.spiked(256) is False
    steady = SpikeWatch()
    sizes = [8192] * 50
    assert not any(steady.spiked(n) for n in sizes)  # large but steady: kept warm
