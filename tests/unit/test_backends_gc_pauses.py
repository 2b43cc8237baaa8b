"""GC pauses of a stub: timed per generation through gc.callbacks; the freeze policy."""

from __future__ import annotations

import gc

import pytest

from python_backends.gc_pauses import GcPauses, apply_policy


def test_every_collection_is_counted_and_timed_per_generation() -> None:
    pauses = GcPauses().install()
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        pauses.remove()
    assert pauses.collections[0] >= 1 and pauses.collections[2] >= 1
    assert pauses.seconds[2] > 0 and pauses.longest_s >= pauses.seconds[2] / pauses.collections[2]
    assert pauses not in gc.callbacks


def test_freeze_moves_what_setup_built_out_of_every_later_collection() -> None:
    try:
        apply_policy("freeze")
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    apply_policy("default")  # changes nothing
    assert gc.get_freeze_count() == 0


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="gc_policy 'off' is not one of default, freeze"):
        apply_policy("off")
