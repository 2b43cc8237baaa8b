"""Start, watch and stop a real `tritonserver` process on the CPU.

Used by `tmr serve` (foreground) and by the test suite's session fixture. The Python
stub's environment is made deterministic: the project root and this venv's
site-packages come first on `PYTHONPATH`, the venv's `bin` first on `PATH`, and user
site-packages are off, so the stub imports the venv's `numpy<2` whatever the global
interpreter holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO

from core.cpu_policy import BULK_CPU_ENV
from core.paths import PROJECT_ROOT
from core.process_memory import stub_processes
from core.settings import TRACED_ENV
from core.variant import VARIANT_ENV
from server import diagnostics
from server.distribution import ServerHome, prepare_home
from server.errors import ModelLoadError, PortInUseError, ServerStartError
from server.local_server import LocalServer
from server.settings import STUB_MALLOC, ServerOptions, server_flags

HOME_DIR = PROJECT_ROOT / ".triton"
_LOAD_FAILURE = re.compile(r"failed to load '([^']+)' version (\d+): (.*?)\"?$")
_LOAD_FAILURE_NO_VERSION = re.compile(r"failed to load model '([^']+)'(): (.*?)\"?$")
_UNAVAILABLE_MODEL = re.compile(r"\|\s*(\S+)\s*\|\s*(\d+)\s*\|\s*UNAVAILABLE: (.*?)\s*\|\s*$")


def sdk_path() -> Path:
    """A folder holding the SDK under its import name (`tmr_client` -> client/).

    The venv finds the SDK through its editable install's `.pth` file, but Python reads
    `.pth` files only in site folders, never in PYTHONPATH entries. Seen on 2026-12-06:
    the 2.51 stub's embedded interpreter ignores PYTHONPATH altogether (its sys.path holds
    none of these entries); it finds the venv from PATH, and the project and the SDK
    through the venv's editable installs, so a stub runs the code of the project the venv
    was installed from (tests/integration/test_third_family.py gives a copy its own venv).
    The link stays for an interpreter that honours PYTHONPATH."""
    folder = HOME_DIR / "sdk"
    link, target = folder / "tmr_client", PROJECT_ROOT / "client"
    if link.is_symlink() and link.readlink() == target:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    fresh = folder / f".tmr_client-{os.getpid()}-{time.monotonic_ns()}"
    fresh.symlink_to(target, target_is_directory=True)
    fresh.replace(link)  # atomic: a concurrent start sees the old link or the new one
    return folder


def stub_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for tritonserver and the Python stubs it spawns."""
    env = dict(os.environ if base is None else base)
    site = sysconfig.get_paths()["purelib"]
    venv_bin = str(Path(sys.executable).parent)
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), site, str(sdk_path())])
    env["PATH"] = os.pathsep.join(p for p in (venv_bin, env.get("PATH", "")) if p)
    env["PYTHONNOUSERSITE"] = "1"
    env.pop("PYTHONHOME", None)
    return {**STUB_MALLOC, **env}


def interpreter_libdir() -> list[str]:
    """The running interpreter's libpython folder, so the stub embeds this very Python.

    Without it the stub links whatever libpython3.X the system has (Debian's 3.11.2
    here, beside a pyenv 3.11.7 venv).
    """
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlibrary = sysconfig.get_config_var("INSTSONAME") or ""
    if libdir and ldlibrary and (Path(libdir) / ldlibrary).exists():
        return [libdir]
    return []


def check_ports_free(ports: dict[str, int], host: str = "0.0.0.0") -> None:
    """Raise PortInUseError naming every port that something listens on.

    The probe binds with SO_REUSEADDR, as tritonserver, nginx and Prometheus do: a port
    whose only sockets are connections of a stopped server in TIME_WAIT (about 60 s after
    a stop) is free for them, and must not block a restart. A live listener still refuses
    the bind."""
    taken = []
    for name, port in ports.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                taken.append(f"{name} port {port}")
    if taken:
        raise PortInUseError(
            f"{', '.join(taken)} already in use; stop the other server or pass other ports "
            "(tmr serve --http-port N --grpc-port N --metrics-port N)"
        )


PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it dies. A `tmr`
    killed outright (a test's timeout, `kill -9`) left its servers running in their own
    sessions, each stub spinning: one such set ran for an hour here, beside every later
    measurement. SIGTERM is Triton's clean stop; only the starting thread's end counts,
    and servers are started from the main thread."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def stop_process(process: subprocess.Popen[bytes], sig: int, timeout_s: float,
                 log: IO[bytes] | None = None,
                 slow: tuple[float, Callable[[int], None]] | None = None) -> int:
    """Send `sig`, wait `timeout_s`, then SIGKILL the process group; close `log`; the code.
    `slow` (seconds, call): a process still running after that long is passed to the call
    first (to see what holds it up while it still does).

    The one stop sequence of every server the project starts (Triton, nginx, Prometheus),
    each started with `start_new_session=True` so the group is theirs alone."""
    if process.poll() is None:
        process.send_signal(sig)
        deadline = time.monotonic() + timeout_s
        try:
            if slow is not None and slow[0] < timeout_s:
                try:
                    process.wait(slow[0])
                except subprocess.TimeoutExpired:
                    slow[1](process.pid)
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
    # What it left behind in its group: a Triton killed with SIGKILL leaves its Python
    # stubs running, orphaned (each holding its model's memory) until this.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    if log is not None:
        log.close()
    return process.returncode


def http_status(url: str) -> int | None:
    """The status of GET `url`, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return None


def load_failures(log_text: str) -> dict[str, str]:
    """Models that Triton reported as failed to load, with Triton's reason."""
    failures: dict[str, str] = {}
    for line in log_text.splitlines():
        match = (_LOAD_FAILURE.search(line) or _LOAD_FAILURE_NO_VERSION.search(line)
                 or _UNAVAILABLE_MODEL.search(line))
        if match:
            failures.setdefault(match.group(1), match.group(3).strip())
    return failures


class TritonServer(LocalServer):
    """One tritonserver process; a context manager that stops it on exit."""

    def __init__(self, opts: ServerOptions, home: ServerHome | None = None,
                 log_path: Path | None = None) -> None:
        super().__init__(opts.ports.http, opts.ports.grpc)
        self.opts = opts
        self.home = home or prepare_home(HOME_DIR)
        self.log_path = log_path or HOME_DIR / f"tritonserver-{opts.ports.http}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.stop_report = ""  # why the last stop was slow, when it was (stop)
        self._log: IO[bytes] | None = None

    @property
    def metrics_url(self) -> str:
        return f"http://localhost:{self.opts.ports.metrics}/metrics"

    def command(self) -> list[str]:
        return [
            str(self.home.dist.binary),
            *server_flags(self.opts),
            f"--backend-directory={self.home.backends}",
            f"--cache-directory={self.home.caches}",
        ]

    def start(self) -> None:
        check_ports_free(self.opts.ports.as_dict())
        env = stub_environment()
        # The stubs read the configs this server serves (core/variant.py), beside the flag.
        env[VARIANT_ENV] = self.opts.variant.name
        # and how their shared path yields the CPU (core/cpu_policy.py)
        env[BULK_CPU_ENV] = self.opts.bulk_cpu.env_value()
        # and whether it traces: the fronts then serve in execute (python_backends/base.py)
        env[TRACED_ENV] = "1" if self.opts.trace_url else ""
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in [str(self.home.dist.libs), *interpreter_libdir(),
                        env.get("LD_LIBRARY_PATH", "")] if p
        )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=env,
            cwd=self.home.root, start_new_session=True, preexec_fn=die_with_parent,
        )

    def wait_ready(self, timeout_s: float = 180.0) -> None:
        """Block until /v2/health/ready answers 200; raise with Triton's reason otherwise."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                self.stop()  # reaps the process and closes the log
                self._raise_start_failure("tritonserver exited during start")
            if http_status(f"http://{self.http_url}/v2/health/ready") == 200:
                return
            time.sleep(0.25)
        self.stop()
        self._raise_start_failure(f"tritonserver not ready after {timeout_s:.0f} s")

    def _raise_start_failure(self, what: str) -> None:
        text = self.log_text()
        failures = load_failures(text)
        if failures:
            raise ModelLoadError(failures, self.log_path)
        tail = "\n".join(text.splitlines()[-15:])
        raise ServerStartError(f"{what}; last log lines:\n{tail}")

    @property
    def pid(self) -> int:
        """The server process's id; ServerStartError before it was started."""
        if self.process is None:
            raise ServerStartError(f"the server on port {self.opts.ports.http} was never "
                                   "started")
        return self.process.pid

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout_s: float | None = None) -> int | None:
        """SIGTERM, wait for Triton's own exit timeout plus a margin, then SIGKILL. A server
        still running at 80% of its exit timeout has a model that does not unload: the
        stubs still alive are named in `stop_report` and write their threads' stacks into
        the log (server/diagnostics.py)."""
        if self.process is None:
            return None
        wait_s = timeout_s if timeout_s is not None else self.opts.exit_timeout_s + 10
        log, self._log = self._log, None
        self.stop_report = ""
        return stop_process(self.process, signal.SIGTERM, wait_s, log,
                            slow=(self.slow_stop_s, self._report_slow_stop))

    @property
    def slow_stop_s(self) -> float:
        """Seconds after SIGTERM at which a stop counts as slow: 80% of the exit timeout."""
        return 0.8 * self.opts.exit_timeout_s

    def _report_slow_stop(self, pid: int) -> None:
        self.stop_report = diagnostics.slow_stop_report(pid, stub_processes(pid),
                                                        self.log_path, self.slow_stop_s)
