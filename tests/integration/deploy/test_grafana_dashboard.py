"""The Grafana dashboard ``deploy/grafana/relay.json`` (SPEC §12): it is a dashboard Grafana can import,
and every metric it queries is on ``/metrics`` of a running relay that served live requests (one of them
failing upstream) and ran a small batch. A renamed metric fails here, not on an on-call's screen."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, generate_latest

from relay.telemetry.metrics import Metrics
from tests.fixtures.live import CHAT_MODEL, EMBED_MODEL, Gateway, metric_value
from tests.integration.deploy.dashboard_check import (
    dashboard_exprs,
    missing_metrics,
    queried_metrics,
    structure_problems,
)
from tests.integration.deploy.helm_render import render

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "relay.json"


def load_dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def drive_traffic(gateway: Gateway) -> None:
    """Live answers, a refusal, a failing upstream call and a finished batch, so that the labelled
    families have children and the batch gauges have been read at least once."""
    assert gateway.chat().status_code == 200
    embed = gateway.post("/openai/v1/embeddings", {"model": EMBED_MODEL, "input": "hello"})
    assert embed.status_code == 200, embed.text
    assert gateway.chat(model="no-such-model").status_code == 404
    failing = gateway.scenario(["fail-500"])
    assert gateway.chat(failing.model, key=failing.key).status_code >= 500
    item = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "hi"}]}
    submitted = gateway.post("/v1/batches", {"shape": "openai", "requests": [item, item]})
    assert submitted.status_code == 202, submitted.text
    batch_id = submitted.json()["id"]
    deadline = time.monotonic() + 30
    while True:
        view = gateway.client.get(f"/v1/batches/{batch_id}", headers=gateway.auth(None)).json()
        if view["CompletedAt"] is not None:
            break
        assert time.monotonic() < deadline, f"batch {batch_id} did not finish: {view}"
        time.sleep(0.1)


def test_every_metric_the_dashboard_queries_is_on_metrics_of_a_running_relay(gateway: Gateway) -> None:
    drive_traffic(gateway)
    scrape = gateway.metrics()
    # The traffic reached the families the panels chart, so the scrape is not an idle relay's.
    assert metric_value(scrape, "relay_upstream_errors_total", status="500") >= 1
    assert metric_value(scrape, "relay_batch_items_finished_total", state="completed") >= 2
    assert metric_value(scrape, "relay_gateway_overhead_seconds_count") >= 2
    dashboard = load_dashboard()
    queried = {name for _, expr in dashboard_exprs(dashboard) for name in queried_metrics(expr)}
    assert len(queried) >= 20, sorted(queried)
    assert missing_metrics(dashboard, scrape) == []


def test_the_dashboard_json_is_an_importable_dashboard() -> None:
    dashboard = load_dashboard()
    assert structure_problems(dashboard) == []
    panel_exprs = [(t, e) for t, e in dashboard_exprs(dashboard) if not t.startswith("variable ")]
    assert len(panel_exprs) >= 20
    for title, expr in panel_exprs:
        assert 'job=~"$job"' in expr and 'instance=~"$instance"' in expr, f"{title}: {expr}"


def test_the_checker_reports_a_renamed_metric_and_a_broken_panel() -> None:
    """The same checks the two tests above run, fed a dashboard with a metric name no relay exports,
    a histogram suffix on a counter, a variable over a renamed metric, a repeated id and a panel
    without a datasource."""
    registry = CollectorRegistry()
    Metrics(registry)  # the live plane's families: what the dashboard's first panels chart
    scrape = generate_latest(registry).decode()
    live_panels = [p for p in load_dashboard()["panels"] if p["type"] != "row"][:6]
    assert missing_metrics({"panels": live_panels}, scrape) == []
    panels = copy.deepcopy(live_panels)
    variable = {
        "name": "job",
        "type": "query",
        "query": {"query": "label_values(relay_renamed_revision, job)"},
    }
    broken = {**load_dashboard(), "panels": panels, "templating": {"list": [variable]}}
    panels[0]["targets"][0]["expr"] = 'sum(rate(relay_requests_renamed_total{job=~"$job"}[5m]))'
    panels[1]["targets"][0]["expr"] = (
        "histogram_quantile(0.9, sum by (le) (rate(relay_rate_limit_rejections_bucket[5m])))"
    )
    panels[2]["id"] = panels[3]["id"]
    del panels[4]["datasource"]
    assert missing_metrics(broken, scrape) == sorted(
        [
            f"{panels[0]['title']}: relay_requests_renamed_total",
            f"{panels[1]['title']}: relay_rate_limit_rejections_bucket",
            "variable job: relay_renamed_revision",
        ]
    )
    problems = structure_problems(broken)
    assert any("missing or repeated id" in p for p in problems), problems
    assert any(p.endswith("no datasource") and panels[4]["title"] in p for p in problems), problems


def test_metric_names_are_read_from_promql_without_functions_labels_or_variables() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, host) (rate(relay_upstream_latency_seconds_bucket"
        '{job=~"$job", status="relay_not_a_metric"}[$__rate_interval]))) / on (host) group_left '
        "max without (instance) (relay_breaker_open offset 5m) and ignoring(x) up"
    )
    assert queried_metrics(expr) == {"relay_upstream_latency_seconds_bucket", "relay_breaker_open", "up"}
    variables = {
        "templating": {
            "list": [
                {
                    "name": "instance",
                    "type": "query",
                    "query": {"query": 'label_values(relay_catalog_revision{job=~"$job"}, instance)'},
                }
            ]
        }
    }
    assert dashboard_exprs(variables) == [("variable instance", 'relay_catalog_revision{job=~"$job"}')]


def test_the_chart_ships_the_dashboard_as_a_sidecar_config_map_only_when_enabled() -> None:
    """``grafana.dashboard.enabled``: the chart's ``dashboards/relay.json`` is a link to this file, so the
    ConfigMap holds the very dashboard checked above, labelled for the Grafana sidecar."""
    template = "relay/templates/grafana-dashboard.yaml"
    assert render({})[template].strip() == ""
    values = {"grafana": {"dashboard": {"enabled": True, "annotations": {"grafana_folder": "Relay"}}}}
    config_map = yaml.safe_load(render(values)[template])
    assert config_map["kind"] == "ConfigMap"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Relay"}
    assert set(config_map["data"]) == {"relay.json"}
    assert json.loads(config_map["data"]["relay.json"]) == load_dashboard()
