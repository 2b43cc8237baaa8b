"""python_backends/cpu_priority.py lowers every thread of its process, checked with ps."""

from __future__ import annotations

import subprocess
import sys

import pytest

from core.params import ConfigError
from core.settings import ModelSettings

CHILD = """
import sys, threading, time
from python_backends.cpu_priority import lower
started = threading.Event()
threading.Thread(target=lambda: (started.set(), time.sleep(30)), daemon=True).start()
started.wait()
print(len(lower(sys.argv[1], 15)), flush=True)
after = threading.Event()
threading.Thread(target=lambda: (after.set(), time.sleep(30)), daemon=True).start()  # inherits
after.wait()
print("started", flush=True)
time.sleep(30)
"""


def threads_of(pid: int) -> list[tuple[str, str]]:
    """(scheduling class, nice) of every thread of `pid`, as `ps -eLo` reports them."""
    out = subprocess.run(["ps", "-Lo", "tid=,cls=,ni=", "-p", str(pid)], capture_output=True,
                         text=True, check=True).stdout
    return [tuple(line.split()[1:3]) for line in out.splitlines() if line.strip()]


@pytest.mark.timeout(60)
# ps shows no nice value for a thread under SCHED_IDLE ("-").
@pytest.mark.parametrize(("policy", "expected"), [("idle", ("IDL", "-")),
                                                  ("nice", ("TS", "15")),
                                                  ("normal", ("TS", "0"))])
def test_every_thread_before_and_after_is_lowered(policy: str, expected: tuple) -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD, policy], stdout=subprocess.PIPE,
                             text=True)
    try:
        changed = int(child.stdout.readline())
        assert changed == (0 if policy == "normal" else 2)  # the main thread and one more
        assert child.stdout.readline().strip() == "started"  # the thread started after it
        rows = threads_of(child.pid)
        assert len(rows) == 3 and set(rows) == {expected}
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def test_the_setting_refuses_what_it_cannot_apply() -> None:
    with pytest.raises(ConfigError, match="cpu_scheduling"):
        ModelSettings.from_parameters({"parameters": {"cpu_scheduling": {"string_value": "rt"}}})
    with pytest.raises(ConfigError, match="cpu_nice"):
        ModelSettings.from_parameters({"parameters": {"cpu_nice": {"string_value": "-5"}}})
