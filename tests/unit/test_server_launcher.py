"""server.launcher helpers (log parsing, ports, the stub environment, the stop sequence)
and the stop diagnostics of server.diagnostics."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from core.paths import PROJECT_ROOT
from core.ports import free_port
from core.stacks import DUMP_STACKS_SIGNAL
from server.diagnostics import native_stacks, stop_phase
from server.launcher import (
    ModelLoadError,
    PortInUseError,
    ServerStartError,
    check_ports_free,
    interpreter_libdir,
    load_failures,
    sdk_path,
    stop_process,
    stub_environment,
)
from server.settings import STUB_MALLOC

# Observed verbatim in Triton 2.51 logs.
LOAD_FAILURE_LINE = (
    "2026-11-29T23:53:58Z E 3789 model_lifecycle.cc:642] \"failed to load 'minilm_onnx' "
    "version 1: Invalid argument: backend library name 'libtriton_python.so' escapes backend "
    "directory '/x/backends/python', for model 'minilm_onnx', check model config runtime field\""
)
LOAD_FAILURE_REASON = (
    "Invalid argument: backend library name 'libtriton_python.so' escapes backend directory "
    "'/x/backends/python', for model 'minilm_onnx', check model config runtime field"
)
STATUS_TABLE = """\
+--------------------+---------+----------------------------------------------------+
| Model              | Version | Status                                             |
+--------------------+---------+----------------------------------------------------+
| embed              | 1       | READY                                              |
| minilm_int8 | 1       | UNAVAILABLE: Internal: onnxruntime failed to load |
+--------------------+---------+----------------------------------------------------+
"""


def test_load_failures_reads_model_and_reason_from_a_failed_to_load_line():
    log = f"I 3789 server.cc:1] starting\n{LOAD_FAILURE_LINE}\nI 3789 done\n"
    assert load_failures(log) == {"minilm_onnx": LOAD_FAILURE_REASON}


def test_load_failures_reads_unavailable_rows_of_the_model_status_table_only():
    assert load_failures(STATUS_TABLE) == {"minilm_int8": "Internal: onnxruntime failed to load"}


def test_load_failures_keeps_the_first_reason_reported_for_a_model():
    log = "\n".join([LOAD_FAILURE_LINE, "| minilm_onnx | 1 | UNAVAILABLE: Invalid argument |"])
    assert load_failures(log) == {"minilm_onnx": LOAD_FAILURE_REASON}


def test_load_failures_of_a_healthy_log_is_empty():
    assert load_failures("I server.cc:1] Started GRPCInferenceService at 0.0.0.0:8001\n") == {}


def test_model_load_error_names_each_model_its_reason_and_the_log():
    err = ModelLoadError({"minilm_int8": "Internal: boom"}, Path("/tmp/t.log"))
    assert isinstance(err, ServerStartError)
    assert str(err) == "model 'minilm_int8': Internal: boom (full log: /tmp/t.log)"


def test_check_ports_free_raises_port_in_use_naming_the_taken_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(PortInUseError, match=rf"^http port {port} already in use; "):
            check_ports_free({"http": port, "grpc": free_port()})


def test_check_ports_free_accepts_ports_nobody_listens_on():
    check_ports_free({"http": free_port()})


def port_in_time_wait() -> int:
    """A port whose only socket is a closed server connection in TIME_WAIT (as after a stop).

    The listener sets SO_REUSEADDR, as tritonserver, nginx and Prometheus do; the accepted
    connection inherits it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        served, _ = listener.accept()
        served.close()  # the server side closes first: its end (local port `port`) waits
        client.close()
    return port


def test_check_ports_free_accepts_a_port_left_in_time_wait_by_a_stopped_server():
    port = port_in_time_wait()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as plain, \
            pytest.raises(OSError, match="Address already in use"):
        plain.bind(("0.0.0.0", port))  # what the old check did: refused for about 60 s
    check_ports_free({"metrics": port})


def test_free_port_returns_a_bindable_unprivileged_port():
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_interpreter_libdir_is_the_folder_holding_this_interpreters_libpython():
    libdirs = interpreter_libdir()
    assert len(libdirs) <= 1
    for libdir in libdirs:
        assert libdir == sysconfig.get_config_var("LIBDIR")
        assert (Path(libdir) / sysconfig.get_config_var("INSTSONAME")).exists()


def test_stub_environment_puts_project_root_then_venv_site_packages_on_pythonpath():
    env = stub_environment({"PATH": "/usr/bin", "PYTHONPATH": "/elsewhere"})
    paths = env["PYTHONPATH"].split(os.pathsep)
    assert paths == [str(PROJECT_ROOT), sysconfig.get_paths()["purelib"], str(sdk_path())]
    assert Path(paths[1]).is_relative_to(Path(sys.prefix))


def test_stub_environment_sets_the_malloc_thresholds_unless_the_operator_did():
    env = stub_environment({"PATH": "/usr/bin"})
    assert {k: env[k] for k in STUB_MALLOC} == STUB_MALLOC
    own = stub_environment({"PATH": "/usr/bin", "MALLOC_ARENA_MAX": "8"})
    assert own["MALLOC_ARENA_MAX"] == "8"


def test_a_stub_imports_core_and_the_sdk_by_pythonpath_alone():
    """No `.pth` file is read from PYTHONPATH: the SDK's editable install alone would
    leave `tmr_client` (and so `core`) unimportable in a stub."""
    env = stub_environment({"PATH": "/usr/bin"})
    run = subprocess.run([sys.executable, "-S", "-c", "import core.families, tmr_client.errors"],
                         env=env, cwd="/", capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr


def test_stub_environment_puts_the_venv_bin_first_on_path_and_disables_user_site():
    base = {"PATH": "/usr/bin:/bin", "PYTHONHOME": "/opt/py", "KEEP": "1"}
    env = stub_environment(base)
    assert env["PATH"].split(os.pathsep) == [str(Path(sys.executable).parent), "/usr/bin", "/bin"]
    assert env["PYTHONNOUSERSITE"] == "1"
    assert "PYTHONHOME" not in env
    assert env["KEEP"] == "1"
    assert base == {"PATH": "/usr/bin:/bin", "PYTHONHOME": "/opt/py", "KEEP": "1"}


def test_load_failures_reads_repository_manager_errors_without_a_version() -> None:
    line = ('2026-11-30T00:13:14Z E 11642 model_repository_manager.cc:724] "failed to load '
            "model 'embed_ensemble': at least one version must be available under the "
            "version policy of model 'embed_ensemble'\"")
    assert load_failures(line) == {
        "embed_ensemble": "at least one version must be available under the version policy "
                          "of model 'embed_ensemble'"}


# A child that takes `linger` seconds to exit after SIGTERM, and dumps its threads' stacks
# on DUMP_STACKS_SIGNAL as a stub does (python_backends.diagnostics).
LINGERING_CHILD = """
import signal, sys, time
from python_backends import diagnostics
diagnostics.install()
signal.signal(signal.SIGTERM, lambda *_: None)
def waiting_for_the_parent():
    print("ready", flush=True)
    time.sleep(float(sys.argv[1]))
waiting_for_the_parent()
"""


def lingering_child(linger_s: float, stderr: object) -> subprocess.Popen[bytes]:
    child = subprocess.Popen([sys.executable, "-c", LINGERING_CHILD, str(linger_s)],
                             stdout=subprocess.PIPE, stderr=stderr, cwd=PROJECT_ROOT,
                             env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
                             start_new_session=True)
    assert child.stdout is not None
    with child.stdout:
        assert child.stdout.readline() == b"ready\n"
    return child


def test_stop_process_reports_a_slow_process_while_it_still_runs_then_waits_for_it(
        tmp_path: Path) -> None:
    seen: list[tuple[int, bool]] = []
    with open(tmp_path / "stderr", "wb") as err:
        child = lingering_child(1.5, err)
        code = stop_process(child, signal.SIGTERM, 10.0,
                            slow=(0.3, lambda pid: seen.append((pid, child.poll() is None))))
    assert seen == [(child.pid, True)]
    assert code == 0  # it exited on its own, after the report, before the timeout


def test_stop_process_skips_the_report_of_a_process_that_stops_in_time(tmp_path: Path) -> None:
    seen: list[int] = []
    with open(tmp_path / "stderr", "wb") as err:
        child = lingering_child(0.1, err)
        assert stop_process(child, signal.SIGTERM, 10.0, slow=(5.0, seen.append)) == 0
    assert seen == []


def test_stop_process_kills_the_group_of_a_process_that_outlives_the_timeout(
        tmp_path: Path) -> None:
    with open(tmp_path / "stderr", "wb") as err:
        child = lingering_child(60.0, err)
        assert stop_process(child, signal.SIGTERM, 0.5) == -signal.SIGKILL


def test_the_stack_signal_writes_every_threads_stack_and_the_process_goes_on(
        tmp_path: Path) -> None:
    with open(tmp_path / "stderr", "wb") as err:
        child = lingering_child(1.0, err)
        os.kill(child.pid, DUMP_STACKS_SIGNAL)
        assert child.wait(10) == 0
    dump = (tmp_path / "stderr").read_text()
    assert "Current thread" in dump or "Thread 0x" in dump
    assert "waiting_for_the_parent" in dump


def test_native_stacks_writes_every_thread_of_a_live_process_where_gdb_is_installed(
        tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        written = native_stacks(child.pid, tmp_path / "stacks.txt")
    finally:
        child.kill()
        child.wait()
    if shutil.which("gdb") is None:
        assert written is None  # the report then names the stubs and their Python stacks only
    else:
        assert written == tmp_path / "stacks.txt"
        assert "Thread 1" in written.read_text() and "nanosleep" in written.read_text()


def triton_stop(*messages: str) -> str:
    """A Triton 2.51 log's stop section: these messages, as its log lines write them."""
    lines = ["I 20713 model_lifecycle.cc:839] \"successfully loaded 'embed'\"",
             "Signal (15) received."]
    lines += [f"2026-12-03T15:26:22Z I 20713 server.cc:345] \"{m}\"" for m in messages]
    return "\n".join(lines) + "\n"


DRAINED = "Timeout 30: Found 0 model versions that have in-flight inferences"
EXPIRED = "failed to stop server: Internal - Exit timeout expired. Exiting immediately."
# The messages of three stops seen here (2026-12-03), shortened.
CLEAN_STOP = triton_stop(DRAINED, "Timeout 30: Found 17 live models and 0 in-flight "
                         "non-inference requests", "Timeout 28: Found 0 live models and 0 "
                         "in-flight non-inference requests")
UNLOAD_STOP = triton_stop(DRAINED, "Timeout 26: Found 1 live models and 0 in-flight "
                          "non-inference requests", "Timeout 0: Found 1 live models and 0 "
                          "in-flight non-inference requests", EXPIRED)
CONNECTIONS_STOP = triton_stop("Timeout 30: Found 1 HTTP service connections",
                               "Timeout 0: Found 0 model versions that have in-flight "
                               "inferences", "Timeout 0: Found 17 live models and 0 in-flight "
                               "non-inference requests", EXPIRED)


def test_stop_phase_tells_where_the_exit_timeout_went() -> None:
    assert stop_phase(CLEAN_STOP) == "clean"
    assert stop_phase(UNLOAD_STOP) == "unload"
    assert stop_phase(CONNECTIONS_STOP) == "connections"
    in_flight = UNLOAD_STOP.replace("Found 0 model versions", "Found 2 model versions")
    assert stop_phase(in_flight) == "in-flight"


def test_stop_phase_reads_the_last_stop_of_a_log() -> None:
    assert stop_phase(UNLOAD_STOP + CLEAN_STOP) == "clean"
    assert stop_phase(CLEAN_STOP + UNLOAD_STOP) == "unload"
    assert stop_phase("no stop in this log") == "clean"
