"""How bulk work yields the CPU (core/cpu_policy.py): the decision per host and variant,
its way to the stubs, what each stub applies, and what /proc says they run at; and an
interactive lane's refusal past its requests per execution."""

from __future__ import annotations

from pathlib import Path

import pytest
from tmr_client.messages import FailureKind, kind_of

from core.cpu_policy import (
    BULK_CPU_ENV,
    CO_TENANT_SHARE,
    DEDICATED,
    IDLE,
    NICE,
    UNDECIDED,
    BulkCpu,
    decide,
)
from core.families.lanes import lane_full
from core.process_memory import scheduling
from core.variant import GPU, HOST, REVIEWED
from python_backends.cpu_priority import describe, scheduling_of


@pytest.mark.parametrize("variant", [REVIEWED, HOST, GPU])
def test_a_quiet_host_yields_with_sched_idle_for_every_variant(variant):
    chosen = decide(variant, 0.05)
    assert (chosen.policy, chosen.describe()) == (IDLE, "SCHED_IDLE")
    assert "other processes use 5% of the cores" in chosen.reason
    assert chosen.line().startswith("bulk work yields the CPU: SCHED_IDLE (")


@pytest.mark.parametrize("variant", [REVIEWED, HOST, GPU])
def test_beside_a_busy_co_tenant_bulk_work_is_niced_never_left_alone(variant):
    chosen = decide(variant, CO_TENANT_SHARE)
    assert (chosen.policy, chosen.describe()) == (NICE, "nice 10")
    assert "could starve" in chosen.reason
    unknown = decide(variant, None)
    assert unknown.policy == NICE and "could not be read" in unknown.reason


@pytest.mark.parametrize("share", [0.0, None])
def test_replicas_on_one_host_are_co_tenants_so_their_bulk_work_is_niced(share):
    chosen = decide(REVIEWED, share, replicas=2)
    assert chosen.policy == NICE and "2 replicas on this host" in chosen.reason
    assert decide(REVIEWED, 0.0, "idle", replicas=2).policy == IDLE  # asked for


def test_a_server_started_without_a_decision_takes_the_setting_safe_anywhere():
    from server.settings import ServerOptions

    assert ServerOptions().bulk_cpu == UNDECIDED and UNDECIDED.policy == NICE


def test_the_gpu_profile_says_which_cpu_work_it_is_about():
    assert "the GPU profile's CPU side" in decide(GPU, 0.0).reason
    assert "the reviewed configs" in decide(REVIEWED, 0.0).reason


def test_an_operator_may_choose_either_setting_but_not_none():
    assert decide(REVIEWED, 0.0, "nice").describe() == "nice 10"
    assert decide(REVIEWED, 0.9, "idle").policy == IDLE
    assert "--bulk-cpu" in decide(REVIEWED, 0.9, "idle").reason
    for bad in ("normal", "nice:0", "nice:25", "fast"):
        with pytest.raises(ValueError):
            BulkCpu.parse(bad)


def test_the_choice_travels_to_the_stubs_in_the_environment():
    for chosen in (DEDICATED, BulkCpu(NICE, 12)):
        got = BulkCpu.from_environment({BULK_CPU_ENV: chosen.env_value()})
        assert (got.policy, got.nice) == (chosen.policy, chosen.nice)
    alone = BulkCpu.from_environment({})
    assert alone.policy == NICE and "safe on any host" in alone.reason


def test_a_stub_applies_the_servers_policy_unless_its_config_pins_one():
    nice12 = BulkCpu(NICE, 12)
    assert scheduling_of("bulk", 10, nice12) == ("nice", 12)
    assert scheduling_of("bulk", 10, DEDICATED) == ("idle", 10)
    assert scheduling_of("normal", 10, DEDICATED) == ("normal", 10)  # an interactive lane
    assert scheduling_of("nice", 5, DEDICATED) == ("nice", 5)
    assert [describe(*p) for p in (("idle", 10), ("nice", 7), ("normal", 0))] == [
        "SCHED_IDLE", "nice 7", "normal"]


def fake_stat(proc: Path, pid: int, nice: int, policy: int) -> None:
    fields = ["S", "1"] + ["0"] * 14 + [str(nice)] + ["0"] * 21 + [str(policy)] + ["0"] * 10
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "stat").write_text(f"{pid} (python stub) " + " ".join(fields))


def test_proc_says_which_policy_a_process_runs_at(tmp_path: Path):
    fake_stat(tmp_path, 10, 0, 5)
    fake_stat(tmp_path, 11, 10, 0)
    fake_stat(tmp_path, 12, 0, 0)
    assert [scheduling(p, tmp_path) for p in (10, 11, 12, 13)] == [
        "SCHED_IDLE", "nice 10", "normal", ""]


def test_a_lanes_refusal_reads_as_a_full_queue_to_the_sdk_and_the_front_door():
    message = lane_full("embed_interactive", 8)
    assert kind_of(message) == FailureKind.QUEUE_FULL
    assert "Exceeds maximum queue size" in message  # server/nginx/front_door.js queueFull
    assert "send this one to 'embed' at priority 1" in message
