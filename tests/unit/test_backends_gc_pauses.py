"""A stub's GC policy: freeze what setup built, or leave CPython's GC as is."""

from __future__ import annotations

import gc

import pytest

from python_backends.gc_pauses import apply_policy


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
