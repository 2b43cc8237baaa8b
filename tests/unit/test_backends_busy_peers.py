"""python_backends.busy_peers: an instance's busy flag seen from another process, the
recent-finish window, and a dead peer's flag released by the kernel."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import pytest

from python_backends.busy_peers import BusyPeers, IdleAwareRunner, peers_folder

pytestmark = pytest.mark.timeout(60)
CTX = mp.get_context("spawn")


def hold(folder: str, started, release) -> None:
    """A peer process: run one 'batch' until told to stop."""
    peer = BusyPeers(Path(folder), "peer")
    with peer.running():
        started.set()
        release.wait(30)


def start_peer(folder: Path):
    started, release = CTX.Event(), CTX.Event()
    proc = CTX.Process(target=hold, args=(str(folder), started, release))
    proc.start()
    assert started.wait(30), "the peer process did not start"
    return proc, release


def test_a_peer_running_a_batch_in_another_process_is_busy_and_then_idle(tmp_path) -> None:
    me = BusyPeers(tmp_path, "me", recent_ms=3000)
    proc, release = start_peer(tmp_path)
    try:
        assert me.others_busy()
    finally:
        release.set()
        proc.join(30)
    assert me.others_busy(), "a peer that just finished counts as busy for recent_ms"
    time.sleep(3.1)
    assert not me.others_busy()
    me.close()


def test_a_peer_that_dies_mid_batch_does_not_stay_busy(tmp_path) -> None:
    me = BusyPeers(tmp_path, "me", recent_ms=0)
    proc, _ = start_peer(tmp_path)
    assert me.others_busy()
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    assert not me.others_busy()


def test_own_flag_is_not_a_peer_and_alone_is_idle(tmp_path) -> None:
    me = BusyPeers(tmp_path, "me", recent_ms=0)
    assert not me.others_busy()
    with me.running():
        assert not me.others_busy()
    (tmp_path / "notes.txt").write_text("not a flag")
    assert not me.others_busy()


def test_the_folder_is_per_server_model_and_version() -> None:
    a = peers_folder("minilm_onnx", "1", server_pid=10)
    assert a != peers_folder("minilm_onnx", "2", server_pid=10)
    assert a != peers_folder("minilm_onnx", "1", server_pid=11)
    assert a != peers_folder("minilm_int8", "1", server_pid=10)


def test_the_idle_runner_runs_a_batch_only_while_no_peer_is_busy(tmp_path) -> None:
    ran: list[str] = []
    runner = IdleAwareRunner(lambda feeds: ran.append("shared") or feeds * 2,
                             lambda feeds: ran.append("idle") or feeds * 3,
                             BusyPeers(tmp_path, "me", recent_ms=0))
    assert runner(5) == (15, True)
    proc, release = start_peer(tmp_path)
    try:
        assert runner(5) == (10, False)
    finally:
        release.set()
        proc.join(30)
    assert ran == ["idle", "shared"]
    runner.close()
