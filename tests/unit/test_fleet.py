"""server/fleet.py's pure parts: the replicas' ports and the front door's server lines."""

from __future__ import annotations

import pytest

from server.errors import FrontDoorError
from server.fleet import PORT_STEP, replica_ports, restart_backoff_s
from server.front_door import server_lines
from server.settings import Ports


def test_the_replica_ports_step_from_the_base() -> None:
    base = Ports(8000, 8001, 8002)
    assert replica_ports(base, 0) == base
    assert replica_ports(base, 2) == Ports(8000 + 2 * PORT_STEP, 8001 + 2 * PORT_STEP,
                                           8002 + 2 * PORT_STEP)


def test_each_replica_is_a_server_line_that_fails_over() -> None:
    lines = server_lines(["127.0.0.1:8000", "127.0.0.1:8010"], 2).splitlines()
    assert [line.strip() for line in lines] == [
        "server 127.0.0.1:8000 max_fails=1 fail_timeout=2s;",
        "server 127.0.0.1:8010 max_fails=1 fail_timeout=2s;"]
    with pytest.raises(FrontDoorError, match="at least one replica"):
        server_lines([], 2)


def test_a_replica_that_does_not_come_back_is_tried_again_ever_later_up_to_5_minutes() -> None:
    assert [restart_backoff_s(n) for n in range(1, 10)] == [5, 10, 20, 40, 80, 160, 300,
                                                           300, 300]
