"""deploy/grafana/usher-dashboard.json: valid, complete, and only about metrics that exist.

The metric names come from the registry of ``services.common.metrics.Metrics`` (a fresh
instance), so a renamed metric fails here instead of leaving an empty panel.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.common.metrics import Metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "usher-dashboard.json"
KUBECTL = shutil.which("kubectl")

SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
}
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "offset", "bool", "le", "inf", "nan",
}  # fmt: skip


def series_names() -> set[str]:
    """Every series name the registry exposes (a counter ``x`` is ``x_total``, ...)."""
    names = set()
    for family in Metrics().registry.collect():
        names |= {family.name + suffix for suffix in SUFFIXES[family.type]}
    return names


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    flat = []
    for panel in dashboard["panels"]:
        flat.append(panel)
        flat.extend(panel.get("panels", []))
    return [p for p in flat if p["type"] != "row"]


def expressions(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers outside strings, label matchers,
    ranges and groupings that are not functions or keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\boffset\s+-?[0-9a-z]+", "", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or match.group().lower() in PROMQL_WORDS:
            continue
        names.add(match.group())
    return names


def test_the_metric_name_parser_finds_selectors_only() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (zone, le) (rate(x_bucket{a="b", c=~"$d"}[5m])))'
        " / on (zone) group_left y + z offset 5m"
    )
    assert metric_names(expr) == {"x_bucket", "y", "z"}


def test_the_registry_defines_the_metrics_the_dashboard_needs() -> None:
    names = series_names()
    assert {"usher_queue_pending_workloads", "usher_preemptions_total",
            "usher_admission_wait_seconds_bucket", "usher_leader"} <= names  # fmt: skip


def test_the_dashboard_is_grafana_json_with_a_prometheus_datasource(
    dashboard: dict[str, Any],
) -> None:
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["uid"] and dashboard["title"] == "Usher"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for key in ("h", "w", "x", "y"):
            assert isinstance(panel["gridPos"][key], int)


def test_every_expression_selects_only_metrics_usher_defines(dashboard: dict[str, Any]) -> None:
    known = series_names()
    exprs = expressions(dashboard)
    assert exprs
    for expr in exprs:
        used = metric_names(expr)
        assert used, expr
        assert used <= known, (expr, used - known)
        # And no usher_* name hidden anywhere else (a label matcher, a string).
        assert set(re.findall(r"usher_\w+", expr)) <= known, expr


Q50 = "histogram_quantile(0.5, sum by "
Q95 = "histogram_quantile(0.95, sum by "


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ("Queues", "usher_queue_pending_workloads"),
        ("Queues", "usher_queue_admitted_workloads"),
        ("Quota", 'usher_quota_used{namespace=~"$namespace", resource="cpu"}'),
        ("Quota", 'usher_quota_min{namespace=~"$namespace", resource="cpu"}'),
        ("Quota", 'usher_quota_max{namespace=~"$namespace", resource="cpu"}'),
        ("Latency", Q50 + "(zone, le) (rate(usher_admission_wait_seconds_bucket"),
        ("Latency", Q95 + "(zone, le) (rate(usher_admission_wait_seconds_bucket"),
        ("Latency", Q95 + "(zone, le) (rate(usher_decision_pass_seconds_bucket"),
        ("Latency", Q95 + "(operation, le) (rate(usher_ledger_transaction_seconds_bucket"),
        ("Health", "usher_consumer_lag_entries"),
        ("Health", "rate(usher_preemptions_total"),
        ("Health", "usher_dlq_parked_total"),
        ("Health", "usher_watch_reconnects_total"),
        ("Health", "usher_leader"),
        ("Usage", "increase(usher_usage_resource_seconds_total"),
        ("Usage", "rate(usher_usage_resource_seconds_total"),
        ("Usage", 'rate(usher_zone_admissions_total{namespace=~"$namespace", burst="true"}'),
        ("Usage", 'rate(usher_zone_admissions_total{namespace=~"$namespace", burst="false"}'),
        ("Usage", "usher_quota_used_in_zone"),
        ("Usage", "usher_quota_zone_max"),
        ("Usage", "usher_quota_zone_min"),
    ],
)  # fmt: skip
def test_the_required_panels_are_in_their_rows(
    dashboard: dict[str, Any], row: str, needle: str
) -> None:
    current = None
    found = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            current = panel["title"]
            continue
        if any(needle in t["expr"] for t in panel["targets"]):
            found.append(current)
    assert row in found, (needle, found)


def test_burst_zones_stand_out_in_the_admissions_per_zone_panel(dashboard: dict[str, Any]) -> None:
    """Z3: the burst series' legend is matched by an override giving it its own colour."""
    [panel] = [
        p
        for p in panels(dashboard)
        if any("usher_zone_admissions" in t["expr"] for t in p["targets"])
    ]
    legends = {t["legendFormat"]: t["expr"] for t in panel["targets"]}
    assert 'burst="true"' in legends["{{zone}} (burst)"]
    assert 'burst="false"' in legends["{{zone}}"]
    [override] = panel["fieldConfig"]["overrides"]
    pattern = re.compile(override["matcher"]["options"])
    assert override["matcher"]["id"] == "byRegexp"
    assert pattern.fullmatch("eci (burst)") and not pattern.fullmatch("default")
    colour = next(p for p in override["properties"] if p["id"] == "color")
    assert colour["value"]["mode"] == "fixed"


def test_the_zone_panel_draws_every_zones_usage_beside_its_cap_and_guarantee(
    dashboard: dict[str, Any],
) -> None:
    """Z1/Z3/Z4: usage from the every-zone gauge (burst zones and guaranteed zones included,
    not only capped ones), with a cap line and a guarantee line, each by node, zone, resource."""
    [panel] = [
        p
        for p in panels(dashboard)
        if any("usher_quota_used_in_zone" in t["expr"] for t in p["targets"])
    ]
    lines = {t["legendFormat"].rsplit(" ", 1)[1]: t["expr"] for t in panel["targets"]}
    assert set(lines) == {"used", "cap", "min"}
    for line, metric in (
        ("used", "usher_quota_used_in_zone"),
        ("cap", "usher_quota_zone_max"),
        ("min", "usher_quota_zone_min"),
    ):
        assert lines[line].startswith(f"max by (node, zone, resource) ({metric}{{"), line
    assert all(
        t["legendFormat"].startswith("{{node}} {{zone}} {{resource}} ") for t in panel["targets"]
    )


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (kustomize) not installed")
def test_the_sidecar_configmap_carries_the_dashboard() -> None:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(DEPLOY / "grafana")], check=True, capture_output=True, text=True
    ).stdout
    (config_map,) = [d for d in yaml.safe_load_all(out) if d]
    assert config_map["kind"] == "ConfigMap"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["usher-dashboard.json"]) == json.loads(
        DASHBOARD.read_text()
    )
