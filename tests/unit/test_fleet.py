"""server/fleet.py's pure parts: the replicas' ports and the front door's server lines."""

from __future__ import annotations

import pytest

from server.errors import FrontDoorError
from server.fleet import PORT_STEP, replica_ports
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
