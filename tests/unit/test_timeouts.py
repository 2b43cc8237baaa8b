"""core/timeouts.py: every timeout defined once, named by kind, the docs showing the table."""

from __future__ import annotations

import re

import pytest
from tmr_client import contract

from core import timeouts
from core.paths import PROJECT_ROOT
from core.settings import FRONT_BATCHING
from server.settings import FrontDoorSettings

BEGIN, END = "<!-- timeouts: core/timeouts.py markdown() -->", "<!-- end timeouts -->"


@pytest.mark.parametrize("doc", ["docs/cli.md", "docs/sdk.md"])
def test_the_docs_show_the_one_table(doc: str) -> None:
    text = (PROJECT_ROOT / doc).read_text()
    shown = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert shown == timeouts.markdown(), f"{doc}: paste core.timeouts.markdown() again"


def test_the_front_queues_and_the_front_door_read_the_table() -> None:
    policies = FRONT_BATCHING.priority_queue_policy
    assert policies[1].default_timeout_microseconds == timeouts.QUEUE_PRIORITY_1.microseconds
    assert policies[2].default_timeout_microseconds == timeouts.QUEUE_PRIORITY_2.microseconds
    assert FrontDoorSettings().upstream_timeout_s == timeouts.PROXY_READ.seconds


def test_the_proxy_outlasts_every_queue_with_room_for_an_execution() -> None:
    longest = max(t.seconds for t in timeouts.TABLE if t.kind == timeouts.Kind.QUEUE)
    assert timeouts.PROXY_READ.seconds >= 2 * longest


def test_the_sdks_timeouts_are_its_own_and_in_the_table() -> None:
    assert timeouts.NETWORK.seconds == contract.NETWORK_TIMEOUT_S
    assert timeouts.RETRY_AFTER.seconds == contract.MAX_RETRY_AFTER_S
    assert timeouts.READY_WAIT.seconds == contract.READY_WAIT_S


def test_no_flag_is_named_timeout_s_alone() -> None:
    """Flags say what they bound: --wait-s or --queue-timeout-s (--timeout-s an alias)."""
    options = (PROJECT_ROOT / "cli" / "options.py").read_text()
    flags = re.findall(r'add_argument\("(--[a-z-]*timeout[a-z-]*)"', options)
    assert "--timeout-s" not in flags
