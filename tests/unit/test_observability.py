"""Prometheus config, rules and Grafana dashboards: rendered, checked by promtool, consistent."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from core.files import TemplateError
from server.observability import (
    CONFIG_TEMPLATE,
    DASHBOARDS_DIR,
    GRAFANA_DIR,
    PLACEHOLDERS,
    PROMTOOL_BIN,
    RULES_FILE,
    RULES_TEST_FILE,
    base_metrics,
    metric_names,
    prometheus_values,
    render_template,
    shorten_for,
    write_config_dir,
)

DASHBOARDS = sorted(DASHBOARDS_DIR.glob("*.json"))
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$model": ".*"}


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PROMTOOL_BIN), *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES_FILE.read_text())["groups"] for r in g["rules"]]


def recording_rules() -> dict[str, str]:
    return {r["record"]: r["expr"] for r in rules() if "record" in r}


def dashboard_exprs() -> list[tuple[str, str]]:
    """(dashboard file, expr) of every panel target, Grafana variables filled in."""
    out = []
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                expr = target["expr"]
                for var, value in GRAFANA_VARIABLES.items():
                    expr = expr.replace(var, value)
                out.append((path.name, expr))
    return out


def test_render_fills_known_placeholders_and_leaves_other_dollars_alone() -> None:
    text = "a: ${SCRAPE_INTERVAL}\nb: $remote_addr ${lower} $${X}"
    assert render_template(text, {"SCRAPE_INTERVAL": "1s", "X": "y"}) == \
        "a: 1s\nb: $remote_addr ${lower} $y"


def test_render_fails_naming_every_placeholder_without_a_value() -> None:
    with pytest.raises(TemplateError, match="TRITON_METRICS_TARGET, WATCHDOG_METRICS_TARGET"):
        render_template(CONFIG_TEMPLATE.read_text(), {"SCRAPE_INTERVAL": "1s",
                                                      "EVALUATION_INTERVAL": "1s"})


def test_placeholders_constant_lists_exactly_the_templates_names() -> None:
    used = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)\}", CONFIG_TEMPLATE.read_text()))
    assert used == set(PLACEHOLDERS)
    assert set(prometheus_values("t:1", "w:2")) == set(PLACEHOLDERS)


def test_rendered_config_passes_promtool_check_config(tmp_path: Path) -> None:
    config = write_config_dir(tmp_path, prometheus_values("localhost:8002", "localhost:8102"))
    result = promtool("check", "config", config)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout and "rules found" in result.stdout
    assert yaml.safe_load(config.read_text())["scrape_configs"][0]["static_configs"] == \
        [{"targets": ["localhost:8002"]}]


def test_rules_pass_promtool_check_rules() -> None:
    result = promtool("check", "rules", RULES_FILE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_rules_pass_their_promtool_unit_tests() -> None:
    result = promtool("test", "rules", RULES_TEST_FILE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_fires_in_some_promtool_unit_test() -> None:
    tests = yaml.safe_load(RULES_TEST_FILE.read_text())["tests"]
    fired = {case["alertname"] for test in tests for case in test.get("alert_rule_test", [])
             if case["exp_alerts"]}
    assert fired == {r["alert"] for r in rules() if "alert" in r}


def test_queue_alerts_fire_at_60_and_80_percent_of_configured_capacity() -> None:
    alerts = {r["alert"]: r for r in rules() if "alert" in r}
    assert alerts["TmrQueueFilling"]["expr"] == "model:tmr_queue_fill:ratio > 0.6"
    assert alerts["TmrQueueNearlyFull"]["expr"] == "model:tmr_queue_fill:ratio > 0.8"
    # Triton's queue and the stub's own (a front whose workers hold it), over the capacity
    assert base_metrics({"model:tmr_queue_fill:ratio"}, recording_rules()) == \
        {"nv_inference_pending_request_count", "tmr_queue_waiting", "tmr_queue_capacity"}


def test_shorten_for_rewrites_every_for_and_keeps_the_rules_valid(tmp_path: Path) -> None:
    text = shorten_for(RULES_FILE.read_text(), "1s")
    fors = [r.get("for") for g in yaml.safe_load(text)["groups"] for r in g["rules"]
            if "for" in r]
    assert fors and set(fors) == {"1s"}
    assert len(fors) == sum(1 for r in rules() if "for" in r)
    (tmp_path / "rules.yml").write_text(text)
    assert promtool("check", "rules", tmp_path / "rules.yml").returncode == 0


@pytest.mark.parametrize(("expr", "names"), [
    ("sum by (model) (rate(nv_inference_count[1m])) / 1e3", {"nv_inference_count"}),
    ('max by (model, quantile) (x_us{quantile=~"0.5|0.99", a="}"}) offset 5m', {"x_us"}),
    ("a:b:c > 0 and on (model) d == 0", {"a:b:c", "d"}),
    ('rate(tmr_x_total{model=~"$model"}[$__rate_interval])', {"tmr_x_total"}),
    ("up == 0", {"up"}),
])
def test_metric_names_reads_selected_metrics_only(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_dashboards_are_four_well_formed_files_with_unique_ids() -> None:
    boards = [json.loads(p.read_text()) for p in DASHBOARDS]
    assert len(boards) == 4
    assert len({b["uid"] for b in boards}) == 4
    for board in boards:
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), board["uid"]
        assert all(p.get("targets") or p["type"] in ("alertlist", "row") for p in board["panels"])


def test_every_dashboard_expr_parses_with_promtool(tmp_path: Path) -> None:
    exprs = dashboard_exprs()
    group = {"name": "dashboards", "rules": [{"record": f"dashboard:expr_{i}:check", "expr": e}
                                             for i, (_, e) in enumerate(exprs)]}
    (tmp_path / "exprs.yml").write_text(yaml.safe_dump({"groups": [group]}))
    result = promtool("check", "rules", tmp_path / "exprs.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_dashboard_expr_names_a_metric_or_a_recording_rule() -> None:
    recorded = recording_rules()
    for name, expr in dashboard_exprs():
        names = metric_names(expr)
        assert names, f"{name}: {expr} selects no metric"
        for metric in names:
            assert metric in recorded or ":" not in metric, f"{name}: unknown rule {metric}"


def test_grafana_provisioning_points_at_prometheus_and_the_dashboards() -> None:
    source = yaml.safe_load((GRAFANA_DIR / "provisioning/datasources/prometheus.yml").read_text())
    provider = yaml.safe_load((GRAFANA_DIR / "provisioning/dashboards/dashboards.yml").read_text())
    datasource = source["datasources"][0]
    assert datasource["url"] == "http://prometheus:9090"
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    uids = {t["datasource"]["uid"] for p in DASHBOARDS
            for panel in json.loads(p.read_text())["panels"] for t in panel.get("targets", [])}
    assert uids == {datasource["uid"]}
