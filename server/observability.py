"""Prometheus beside Triton: render its config, run the real binary, ask it PromQL.

The config is a template (`server/prometheus/prometheus.yml`) with `${UPPER_CASE}`
placeholders. `render_template` fills exactly the names in `PLACEHOLDERS` and fails on a
missing one; docker-compose.yml runs `envsubst` with the same list. The rules
(`rules.yml`) are copied beside the rendered config, as its `rule_files` entry is
relative. Tests run the rules with every `for:` shortened (`shorten_for`) instead of
keeping a second rule file by hand.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from core.files import render_template
from core.paths import PROJECT_ROOT
from core.ports import free_port
from server.errors import PrometheusError
from server.launcher import stop_process

PROMETHEUS_DIR = PROJECT_ROOT / "server" / "prometheus"
CONFIG_TEMPLATE = PROMETHEUS_DIR / "prometheus.yml"
RULES_FILE = PROMETHEUS_DIR / "rules.yml"
RULES_TEST_FILE = PROMETHEUS_DIR / "rules_test.yml"
GRAFANA_DIR = PROJECT_ROOT / "server" / "grafana"
DASHBOARDS_DIR = GRAFANA_DIR / "dashboards"
PROMETHEUS_BIN = Path("/usr/bin/prometheus")  # Debian's `prometheus` (Makefile APT_PACKAGES)
PROMTOOL_BIN = Path("/usr/bin/promtool")

# The template's placeholders, for Python here and `envsubst '${A} ${B}'` in compose.
PLACEHOLDERS = ("SCRAPE_INTERVAL", "EVALUATION_INTERVAL", "TRITON_METRICS_TARGET",
                "WATCHDOG_METRICS_TARGET")
SCRAPE_INTERVAL = "15s"  # production and `tmr serve --prometheus`; tests use 1s
EVALUATION_INTERVAL = "15s"
PROMETHEUS_PORT = 9090  # `tmr serve --prometheus` (compose publishes the image's 9090)
_FOR = re.compile(r"^(\s*for:\s*)\S+\s*$", re.MULTILINE)
_PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
                    "group_left", "group_right", "inf", "nan"}
_PROMQL_STRIP = [
    re.compile(r'"(?:[^"\\]|\\.)*"'),  # strings
    re.compile(r"\{[^}]*\}"),  # label matchers
    re.compile(r"\[[^\]]*\]"),  # ranges and subqueries
    re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"),
]
_PROMQL_NAME = re.compile(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*")


def prometheus_values(triton_target: str, watchdog_target: str,
                      scrape_interval: str = SCRAPE_INTERVAL,
                      evaluation_interval: str = EVALUATION_INTERVAL) -> dict[str, str]:
    """The values of `PLACEHOLDERS` for one deployment (targets are host:port)."""
    return {"SCRAPE_INTERVAL": scrape_interval, "EVALUATION_INTERVAL": evaluation_interval,
            "TRITON_METRICS_TARGET": triton_target, "WATCHDOG_METRICS_TARGET": watchdog_target}


def shorten_for(rules_text: str, duration: str) -> str:
    """The rules with every alert's `for:` set to `duration` (a test variant)."""
    return _FOR.sub(lambda m: f"{m.group(1)}{duration}", rules_text)


def metric_names(expr: str) -> set[str]:
    """The metric (or recording rule) names a PromQL expression selects."""
    text = expr
    for pattern in _PROMQL_STRIP:
        text = pattern.sub(" ", text)
    names = set()
    for match in _PROMQL_NAME.finditer(text):
        is_call = text[match.end():].lstrip().startswith("(")
        if not is_call and match.group(0).lower() not in _PROMQL_KEYWORDS:
            names.add(match.group(0))
    return names


def base_metrics(names: set[str], recording: Mapping[str, str]) -> set[str]:
    """`names` with every recording rule replaced by the metrics its expression reads."""
    out: set[str] = set()
    for name in names:
        out |= base_metrics(metric_names(recording[name]), recording) if name in recording \
            else {name}
    return out


def write_config_dir(dest: Path, values: dict[str, str], rules_text: str | None = None) -> Path:
    """Render the config into `dest` with the rules beside it; the config's path."""
    dest.mkdir(parents=True, exist_ok=True)
    config = dest / "prometheus.yml"
    config.write_text(render_template(CONFIG_TEMPLATE.read_text(), values))
    (dest / "rules.yml").write_text(rules_text if rules_text is not None
                                    else RULES_FILE.read_text())
    return config


def query(base_url: str, expr: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """An instant PromQL query; the result vector (`[{"metric": {...}, "value": [t, "v"]}]`)."""
    url = f"{base_url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    return _api(url, timeout_s)["result"]


def _api(url: str, timeout_s: float) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            body = json.loads(r.read())
    except urllib.error.HTTPError as err:
        body = json.loads(err.read() or b"{}")
    if body.get("status") != "success":
        raise PrometheusError(f"{url}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]


@dataclass
class PrometheusServer:
    """A real `prometheus` process on 127.0.0.1:`port`; a context manager."""

    config_dir: Path
    port: int = 0
    data_dir: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.config_dir / "prometheus.log"

    def start(self, timeout_s: float = 60.0) -> None:
        if not PROMETHEUS_BIN.exists():
            raise PrometheusError(f"{PROMETHEUS_BIN} is missing; run `make apt`")
        self.port = self.port or free_port()
        data = self.data_dir or Path(tempfile.mkdtemp(prefix="tsdb-", dir=self.config_dir))
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [str(PROMETHEUS_BIN), f"--config.file={self.config_dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if self._ready():
                return
            time.sleep(0.2)
        self.stop()
        tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-10:])
        raise PrometheusError(f"prometheus did not become ready; last log lines:\n{tail}")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        return query(self.url, expr)

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing) from /api/v1/alerts."""
        return _api(f"{self.url}/api/v1/alerts", 10.0)["alerts"]

    def series_names(self) -> set[str]:
        """Every metric name Prometheus holds a series for."""
        return set(_api(f"{self.url}/api/v1/label/__name__/values", 10.0))

    def stop(self) -> int | None:
        """SIGTERM (Prometheus flushes and exits), SIGKILL after 20 s."""
        log, self._log = self._log, None
        if self.process is None:
            if log is not None:
                log.close()
            return None
        return stop_process(self.process, signal.SIGTERM, 20, log)

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
