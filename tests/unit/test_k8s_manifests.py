"""server/k8s/: valid Kubernetes objects (bundled schemas, offline) that run the settings.

kubernetes-validate ships the JSON schemas of every Kubernetes release; strict mode also
refuses unknown fields. CRDs (ServiceMonitor) have no bundled schema: they are listed in
CRD_KINDS and their few fields are checked by hand below.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from core.paths import PROJECT_ROOT
from core.variant import GPU, VARIANT_ENV
from server import front_door
from server.healthcheck import DRAIN_FILE
from server.serve import WATCHDOG_PORT_OFFSET
from server.settings import (
    CLUSTER_TRACE_RATE,
    CLUSTER_TRACE_URL,
    EXIT_TIMEOUT_S,
    NGINX_IMAGE,
    FrontDoorSettings,
    Ports,
    ServerOptions,
    server_flags,
)

K8S_VERSION = "1.30.0"
K8S_DIR = PROJECT_ROOT / "server" / "k8s"
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}
PORTS = Ports()
COMPOSE = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())["services"]


def documents() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, doc) for path in sorted(K8S_DIR.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def find(kind: str, name: str) -> dict[str, Any]:
    return next(d for _, d in documents() if d["kind"] == kind and d["metadata"]["name"] == name)


def container(deployment: str, name: str) -> dict[str, Any]:
    spec = find("Deployment", deployment)["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == name)


@pytest.mark.parametrize("path,doc", documents(),
                         ids=lambda v: v.name if isinstance(v, Path) else v["kind"])
def test_every_object_validates_against_the_kubernetes_schema(path: Path,
                                                              doc: dict[str, Any]) -> None:
    if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        return
    assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == "1.30"


def test_the_validator_refuses_an_unknown_field_offline() -> None:
    doc = find("Deployment", "triton")
    broken = {**doc, "spec": {**doc["spec"], "replica": 3}}
    with pytest.raises(kubernetes_validate.ValidationError, match="replica"):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_triton_runs_the_compose_flags_with_the_admin_key_from_the_secret() -> None:
    triton = container("triton", "triton")
    expected = server_flags(ServerOptions(repository=Path("/models"), variant=GPU,
                                          admin_key="$(TMR_ADMIN_KEY)",
                                          trace_url=CLUSTER_TRACE_URL,
                                          trace_rate=CLUSTER_TRACE_RATE))
    assert [*triton["command"], *triton["args"]] == ["tritonserver", *expected]
    key = next(e for e in triton["env"] if e["name"] == "TMR_ADMIN_KEY")
    assert key["valueFrom"]["secretKeyRef"] == {"name": "tmr-secrets", "key": "admin-key"}
    assert {"name": VARIANT_ENV, "value": GPU.name} in triton["env"]
    assert triton["image"].endswith("/" + COMPOSE["triton"]["image"])


def test_readiness_is_the_deep_check_and_prestop_drains_through_it() -> None:
    triton = container("triton", "triton")
    assert triton["readinessProbe"]["exec"]["command"] == COMPOSE["triton"]["healthcheck"][
        "test"][1:]
    assert triton["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert triton["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    pre_stop = " ".join(triton["lifecycle"]["preStop"]["exec"]["command"])
    assert f"touch {DRAIN_FILE}" in pre_stop
    drain_s = int(re.search(r"sleep (\d+)", pre_stop).group(1))
    readiness = triton["readinessProbe"]
    # Readiness must have failed (and the pod left the endpoints) before SIGTERM.
    assert drain_s > readiness["periodSeconds"] * readiness["failureThreshold"]
    grace = find("Deployment", "triton")["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"]
    assert grace > drain_s + EXIT_TIMEOUT_S


def test_watchdog_sidecar_matches_the_compose_watchdog() -> None:
    watchdog = container("triton", "watchdog")
    port = PORTS.metrics + WATCHDOG_PORT_OFFSET
    assert watchdog["args"] == [a.replace("triton:", "localhost:")
                                for a in COMPOSE["watchdog"]["command"]]
    assert watchdog["ports"][0]["containerPort"] == port
    assert watchdog["image"].endswith("/" + COMPOSE["watchdog"]["image"])


def test_service_and_servicemonitor_expose_the_settings_ports() -> None:
    ports = {p["name"]: p["port"] for p in find("Service", "triton")["spec"]["ports"]}
    assert ports == {**PORTS.as_dict(), "watchdog": PORTS.metrics + WATCHDOG_PORT_OFFSET}
    monitor = find("ServiceMonitor", "triton")["spec"]
    assert {e["port"] for e in monitor["endpoints"]} == {"metrics", "watchdog"}
    assert monitor["selector"]["matchLabels"] == find("Service", "triton")["spec"]["selector"]


def test_hpa_scales_the_triton_deployment_on_the_adapter_queue_time_metric() -> None:
    hpa = find("HorizontalPodAutoscaler", "triton")["spec"]
    assert hpa["scaleTargetRef"]["name"] == "triton"
    metric = hpa["metrics"][0]["pods"]["metric"]["name"]
    rules = yaml.safe_load(find("ConfigMap", "tmr-prometheus-adapter-rules")["data"][
        "config.yaml"])["rules"]
    assert [r["name"]["as"] for r in rules] == [metric] == ["avg_time_queue_us"]
    assert 'model="embed"' in rules[0]["metricsQuery"]
    pdb = find("PodDisruptionBudget", "triton")["spec"]
    assert hpa["minReplicas"] > pdb["maxUnavailable"]


def test_front_door_runs_the_compose_nginx_command_and_values() -> None:
    nginx = container("front-door", "nginx")
    assert nginx["image"] == NGINX_IMAGE == COMPOSE["nginx"]["image"]
    assert nginx["args"] == [COMPOSE["nginx"]["command"][0].replace("$$", "$")]
    env = {e["name"]: e["value"] for e in nginx["env"]}
    assert env == {k: str(v) for k, v in COMPOSE["nginx"]["environment"].items()}
    assert set(env) == set(front_door.PLACEHOLDERS)
    settings = FrontDoorSettings()
    grace = find("Deployment", "front-door")["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"]
    assert grace > settings.upstream_timeout_s
    service_ports = {p["port"] for p in find("Service", "front-door")["spec"]["ports"]}
    assert service_ports == {settings.http_port, settings.grpc_port}
