"""The front door: nginx in front of Triton's HTTP and gRPC ports.

`render()` fills `server/nginx/nginx.conf.template`, the same file compose renders with
`envsubst` and the explicit list `PLACEHOLDERS`. `FrontDoor` runs
`nginx -p <dir> -c <conf> -g 'daemon off;'` beside a CPU server, waits until it answers
and stops it cleanly; its error log is quoted in every failure. See docs/front_door.md.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from core.files import TemplateError, render_template, write_atomically
from core.paths import DEFAULT_REPOSITORY
from server.errors import FrontDoorError
from server.launcher import stop_process
from server.local_server import LocalServer
from server.openai_models import render as render_openai_models
from server.settings import API_KEYS_ENV, DEV_API_KEYS, FrontDoorSettings

NGINX_DIR = Path(__file__).resolve().parent / "nginx"
TEMPLATE = NGINX_DIR / "nginx.conf.template"
NJS_SCRIPT = NGINX_DIR / "front_door.js"
OPENAI_NJS_SCRIPT = NGINX_DIR / "openai.js"
RERANK_NJS_SCRIPT = NGINX_DIR / "rerank.js"  # imports openai.js from the same folder
NJS_MODULE = "ngx_http_js_module.so"
# Debian's libnginx-mod-http-js, then the official nginx image.
NJS_MODULE_DIRS = (Path("/usr/lib/nginx/modules"), Path("/etc/nginx/modules"))
# Paths, upstreams and ports: what differs between the CPU path and compose.
HOST_PLACEHOLDERS = (
    "NJS_MODULE_PATH", "NJS_SCRIPT", "OPENAI_NJS_SCRIPT", "RERANK_NJS_SCRIPT", "OPENAI_MODELS",
    "NGINX_RUNTIME_DIR", "NGINX_ERROR_LOG", "NGINX_ACCESS_LOG", "API_KEYS_MAP",
    "TRITON_HTTP_SERVERS", "TRITON_GRPC_SERVERS", "FRONT_DOOR_HTTP_PORT", "FRONT_DOOR_GRPC_PORT",
)
# Limits and timeouts, from FrontDoorSettings (see policy_values).
POLICY_PLACEHOLDERS = (
    "MAX_BODY_BYTES", "MAX_GRPC_BODY_BYTES", "MAX_RESPONSE_BYTES", "RATE_PER_MINUTE", "BURST",
    "CLIENT_TIMEOUT_S", "UPSTREAM_CONNECT_TIMEOUT_S", "UPSTREAM_TIMEOUT_S", "UPSTREAM_TRIES",
    "TRACE_SAMPLING",
)
PLACEHOLDERS = HOST_PLACEHOLDERS + POLICY_PLACEHOLDERS  # every ${NAME} of the template
STOP_TIMEOUT_S = 10.0
REFUSED = "127.0.0.1:1 down"  # an upstream marked down: nginx answers 502, the door 503
RELOAD_SETTLE_S = 1.0  # after an nginx reload, until its new workers take every new request
_CLIENT_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_KEY = re.compile(r"[A-Za-z0-9_.~+/=-]{8,}")


def render(template: str, values: Mapping[str, object]) -> str:
    """Substitute the ${NAME} placeholders; a placeholder without a value is an error."""
    try:
        return render_template(template, values)
    except TemplateError as err:
        raise FrontDoorError(f"no value for template placeholders {err.missing}") from err


def envsubst_variables() -> str:
    """The argument of `envsubst` that renders the template and nothing else."""
    return " ".join(f"${{{name}}}" for name in PLACEHOLDERS)


def policy_values(settings: FrontDoorSettings) -> dict[str, str]:
    """The template's limits and timeouts (compose must pass exactly these)."""
    return {
        "MAX_BODY_BYTES": str(settings.max_body_bytes),
        "MAX_GRPC_BODY_BYTES": str(settings.max_grpc_body_bytes),
        "MAX_RESPONSE_BYTES": str(settings.max_response_bytes),
        "RATE_PER_MINUTE": str(settings.rate_per_minute),
        "BURST": str(settings.burst),
        "CLIENT_TIMEOUT_S": str(settings.client_timeout_s),
        "UPSTREAM_CONNECT_TIMEOUT_S": str(settings.upstream_connect_timeout_s),
        "UPSTREAM_TIMEOUT_S": str(settings.upstream_timeout_s),
        "UPSTREAM_TRIES": str(settings.upstream_tries),
        "TRACE_SAMPLING": settings.trace_sampling,
    }


def server_lines(addresses: Sequence[str], fail_timeout_s: int) -> str:
    """An upstream's `server` lines, one per replica's `host:port`."""
    if not addresses:
        raise FrontDoorError("an upstream needs at least one replica")
    return "\n        ".join(f"server {a} max_fails=1 fail_timeout={fail_timeout_s}s;"
                             for a in addresses)


def parse_api_keys(spec: str) -> dict[str, str]:
    """Client name -> API key from "name:key,name:key"; refuses what nginx cannot quote."""
    keys: dict[str, str] = {}
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        name, sep, key = entry.partition(":")
        if not sep or not _CLIENT_NAME.fullmatch(name) or not _KEY.fullmatch(key):
            raise ValueError(f"bad API key entry {entry.split(':')[0]!r}: want name:key, the "
                             "name [A-Za-z0-9_.-], the key 8+ of [A-Za-z0-9_.~+/=-]")
        if name in keys or key in keys.values():
            raise ValueError(f"API key entry {name!r} repeats a name or a key")
        keys[name] = key
    if not keys:
        raise ValueError("no API keys given")
    return keys


def api_keys_from_env() -> dict[str, str]:
    """The keys of TMR_API_KEYS, or the dev default."""
    return parse_api_keys(os.environ.get(API_KEYS_ENV) or DEV_API_KEYS)


def api_keys_map(keys: Mapping[str, str]) -> str:
    """The nginx `map` include: one `"<key>" <client name>;` line per client."""
    return "".join(f'"{key}" {name};\n' for name, key in sorted(keys.items()))


def find_nginx() -> Path:
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if not found:
        raise FrontDoorError("nginx not found; install it with `make apt` (Debian: nginx)")
    return Path(found)


def find_njs_module() -> Path:
    for folder in NJS_MODULE_DIRS:
        if (folder / NJS_MODULE).is_file():
            return folder / NJS_MODULE
    raise FrontDoorError(f"{NJS_MODULE} not found in {[str(d) for d in NJS_MODULE_DIRS]}; "
                         "install it with `make apt` (Debian: libnginx-mod-http-js)")


def listed(upstream: str | Sequence[str]) -> list[str]:
    return [upstream] if isinstance(upstream, str) else list(upstream)


class FrontDoor(LocalServer):
    """nginx on `settings`' ports in front of Triton's `http_upstream` and `grpc_upstream`.

    A context manager: it renders the config into a fresh runtime folder, checks it with
    `nginx -t`, starts nginx in the foreground, waits until it answers, and stops it with
    a graceful SIGQUIT on exit.
    """

    def __init__(self, http_upstream: str | Sequence[str], grpc_upstream: str | Sequence[str],
                 settings: FrontDoorSettings | None = None,
                 api_keys: Mapping[str, str] | None = None,
                 repository: Path = DEFAULT_REPOSITORY) -> None:
        """Each upstream: one replica's `host:port`, or the replicas' (a fleet)."""
        self.settings = settings or FrontDoorSettings()
        super().__init__(self.settings.http_port, self.settings.grpc_port)
        self.repository = repository  # whose text-embedding models the OpenAI route serves
        self.upstreams = (listed(http_upstream), listed(grpc_upstream))
        self.api_keys = dict(api_keys) if api_keys is not None else api_keys_from_env()
        self.workdir: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._output: IO[bytes] | None = None

    @property
    def error_log(self) -> Path:
        return self._path("error.log")

    @property
    def access_log(self) -> Path:
        return self._path("access.log")

    def _path(self, name: str) -> Path:
        if self.workdir is None:
            raise FrontDoorError("the front door has not been started")
        return self.workdir / name

    def template_values(self) -> dict[str, str]:
        return {
            "NJS_MODULE_PATH": str(find_njs_module()),
            "NJS_SCRIPT": str(NJS_SCRIPT),
            "OPENAI_NJS_SCRIPT": str(OPENAI_NJS_SCRIPT),
            "RERANK_NJS_SCRIPT": str(RERANK_NJS_SCRIPT),
            "OPENAI_MODELS": str(self._path("openai_models.json")),
            "NGINX_RUNTIME_DIR": str(self._path("")),
            "NGINX_ERROR_LOG": str(self.error_log),
            "NGINX_ACCESS_LOG": str(self.access_log),
            "API_KEYS_MAP": str(self._path("api_keys.map")),
            "TRITON_HTTP_SERVERS": server_lines(self.upstreams[0],
                                                self.settings.replica_fail_timeout_s),
            "TRITON_GRPC_SERVERS": server_lines(self.upstreams[1],
                                                self.settings.replica_fail_timeout_s),
            "FRONT_DOOR_HTTP_PORT": str(self.settings.http_port),
            "FRONT_DOOR_GRPC_PORT": str(self.settings.grpc_port),
            **policy_values(self.settings),
        }

    def _prepare(self) -> list[str]:
        """Write the config and the key map; the nginx command line (without -t)."""
        # Under the system temp folder, world-traversable: nginx started as root runs its
        # workers as nobody, and they create the body and proxy temp folders in here.
        self.workdir = Path(tempfile.mkdtemp(prefix="tmr-front-door-"))
        self.workdir.chmod(0o755)
        keys = self._path("api_keys.map")
        keys.write_text(api_keys_map(self.api_keys))
        keys.chmod(0o600)  # read by the master only
        self._path("openai_models.json").write_text(render_openai_models(self.repository))
        conf = self._path("nginx.conf")
        conf.write_text(render(TEMPLATE.read_text(), self.template_values()))
        return self._prepare_command()

    def _prepare_command(self) -> list[str]:
        """The nginx command line of this front door's runtime folder (without -t/-s)."""
        return [str(find_nginx()), "-p", str(self._path("")), "-c", str(self._path("nginx.conf"))]

    def start(self) -> None:
        """Render and check the config, then start nginx; a refused config stays on disk."""
        try:
            command = self._prepare()
        except FrontDoorError:
            shutil.rmtree(self._path(""), ignore_errors=True)
            raise
        check = subprocess.run([*command, "-t"], capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise FrontDoorError(f"nginx refused {command[-1]}:\n{check.stderr.strip()}")
        self._output = self._path("nginx.out").open("wb")
        self.process = subprocess.Popen([*command, "-g", "daemon off;"], stdout=self._output,
                                        stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Until both ports answer (any HTTP status counts: nginx itself answered)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise FrontDoorError(f"nginx exited during start{self._log_tail()}")
            if self._http_answers() and self._grpc_accepts():
                return
            time.sleep(0.1)
        raise FrontDoorError(f"nginx not answering after {timeout_s:.0f} s{self._log_tail()}")

    def _http_answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http_url}/", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def _grpc_accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.grpc_port), timeout=2):
                return True
        except OSError:
            return False

    def _log_tail(self, lines: int = 15) -> str:
        texts = [p.read_text(errors="replace") for p in (self.error_log, self._path("nginx.out"))
                 if p.exists()]
        tail = "\n".join("\n".join(texts).splitlines()[-lines:])
        return f"; {self.error_log}:\n{tail}" if tail else f"; {self.error_log} is empty"

    def error_log_text(self) -> str:
        return self.error_log.read_text(errors="replace") if self.error_log.exists() else ""

    def route_to(self, http_upstreams: Sequence[str], grpc_upstreams: Sequence[str]) -> None:
        """Send new requests to these replicas only (a planned stop takes one out first):
        the config rewritten and reloaded; in-flight requests finish where they are."""
        self.upstreams = (list(http_upstreams), list(grpc_upstreams))
        conf = render(TEMPLATE.read_text(), self.template_values())
        write_atomically(self._path("nginx.conf"), conf)
        self.reload()

    def refuse_new(self) -> None:
        """A stop, readiness first: every new request (readiness too) gets 503 with
        Retry-After while the requests in flight finish on the old workers, which then
        close their connections to Triton, so that its own stop does not wait on them."""
        self.route_to([REFUSED], [REFUSED])
        time.sleep(RELOAD_SETTLE_S)

    def reload(self) -> None:
        """`nginx -s reload`: re-read the config; in-flight requests finish on the old
        workers while new ones take new connections."""
        command = self._prepare_command()
        done = subprocess.run([*command, "-s", "reload"], capture_output=True, text=True,
                              timeout=30)
        if done.returncode != 0:
            raise FrontDoorError(f"nginx -s reload failed:\n{done.stderr.strip()}")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """Graceful stop (SIGQUIT lets in-flight requests finish), then SIGKILL; the code."""
        if self.process is None:
            return None
        output, self._output = self._output, None
        return stop_process(self.process, signal.SIGQUIT, timeout_s, output)

    def close(self, keep_logs_in: Path | None = None) -> int | None:
        """Stop; copy nginx's error and access logs into `keep_logs_in` (as
        front-door-error.log, front-door-access.log: a fleet keeps them beside its replicas'
        logs), then remove the runtime folder after a clean exit (kept to read otherwise)."""
        code = self.stop()
        if keep_logs_in is not None and self.workdir is not None:
            keep_logs_in.mkdir(parents=True, exist_ok=True)
            for log in (self.error_log, self.access_log):
                if log.exists():
                    shutil.copyfile(log, keep_logs_in / f"front-door-{log.name}")
        if code == 0 and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return code


def main(argv: list[str] | None = None) -> int:
    """`python -m server.front_door api-keys-map`: the key map from TMR_API_KEYS (compose)."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["api-keys-map"]:
        print("usage: python -m server.front_door api-keys-map > api_keys.map", file=sys.stderr)
        return 2
    sys.stdout.write(api_keys_map(api_keys_from_env()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
