"""server.launcher helpers: log parsing, ports, the stub environment."""

from __future__ import annotations

import os
import socket
import sys
import sysconfig
from pathlib import Path

import pytest

from core.paths import PROJECT_ROOT
from core.ports import free_port
from server.launcher import (
    ModelLoadError,
    PortInUseError,
    ServerStartError,
    check_ports_free,
    interpreter_libdir,
    load_failures,
    stub_environment,
)

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
    assert paths == [str(PROJECT_ROOT), sysconfig.get_paths()["purelib"]]
    assert Path(paths[1]).is_relative_to(Path(sys.prefix))


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
