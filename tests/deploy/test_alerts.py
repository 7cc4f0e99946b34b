"""deploy/monitoring/usher-alerts.yaml: valid rules, each proven to fire (and to stay quiet) by
``promtool test rules``, each about metrics that exist, each with its runbook section.

promtool is Prometheus' own checker (Debian's ``prometheus`` package carries it; ``.ci/run``
installs it). It is found as the stack finds its servers: ``$USHER_PROMTOOL``, else on PATH.
Where it is missing the promtool tests fail under CI (``CI=true``) and are skipped elsewhere with
the line saying how to install it: they never pass without running.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_dashboard import metric_names, series_names

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "monitoring" / "usher-alerts.yaml"
CASES = Path(__file__).with_name("usher-alerts.test.yaml")
RUNBOOK = REPO / "docs" / "operations" / "alerts.md"
OTHER_EXPORTERS = {
    "up": "Prometheus itself, per scraped target",
    "kube_pod_container_status_restarts_total": "kube-state-metrics",
    "cnpg_collector_up": "CloudNativePG's exporter",
}
"""Series the rules read that Usher does not export, and who does."""


def promtool() -> str:
    """The promtool to run; skipped (failed under CI) with how to get it when there is none."""
    found = os.environ.get("USHER_PROMTOOL") or shutil.which("promtool")
    if found:
        return found
    how = "promtool not found: install Debian's prometheus (apt-get install -y prometheus)"
    if os.environ.get("CI") == "true":
        pytest.fail(how)
    pytest.skip(how)


def rule_spec(path: Path = RULES) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    assert document["kind"] == "PrometheusRule"
    assert document["apiVersion"] == "monitoring.coreos.com/v1"
    spec: dict[str, Any] = document["spec"]
    return spec


def alerts(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in spec["groups"] for rule in group["rules"]]


def run_promtool(
    tmp_path: Path, spec: dict[str, Any], *args: str
) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS`` in a folder holding the rules (as promtool reads them: the spec) and
    a copy of the test cases that name them."""
    (tmp_path / "usher-alerts.rules.yaml").write_text(yaml.safe_dump(spec))
    shutil.copy(CASES, tmp_path / CASES.name)
    return subprocess.run(
        [promtool(), *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def test_promtool_checks_the_rules(tmp_path: Path) -> None:
    done = run_promtool(tmp_path, rule_spec(), "check", "rules", "usher-alerts.rules.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts(rule_spec()))} rules found" in done.stdout


def test_every_alert_fires_and_stays_quiet_as_its_cases_say(tmp_path: Path) -> None:
    done = run_promtool(tmp_path, rule_spec(), "test", "rules", CASES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_a_rule_that_no_longer_fires_fails_its_case(tmp_path: Path) -> None:
    """The cases are not vacuous: a watcher-NATS rule that never fires fails them."""
    spec = rule_spec()
    for rule in alerts(spec):
        if rule["alert"] == "UsherWatcherNatsDisconnected":
            rule["expr"] = rule["expr"].replace("== 0", "== 2")
    done = run_promtool(tmp_path, spec, "test", "rules", CASES.name)
    assert done.returncode != 0
    assert "UsherWatcherNatsDisconnected" in done.stdout + done.stderr


def test_every_alert_has_a_case_where_it_fires() -> None:
    cases = yaml.safe_load(CASES.read_text())
    fired = {
        check["alertname"]
        for case in cases["tests"]
        for check in case.get("alert_rule_test", [])
        if check.get("exp_alerts")
    }
    assert {rule["alert"] for rule in alerts(rule_spec())} == fired


def test_every_series_the_rules_read_exists() -> None:
    """Usher's own from its registry (a renamed metric fails here), the rest from the
    exporters named in ``OTHER_EXPORTERS``."""
    known = series_names() | OTHER_EXPORTERS.keys()
    for rule in alerts(rule_spec()):
        unknown = metric_names(rule["expr"]) - known
        assert not unknown, f"{rule['alert']} reads series no exporter has: {unknown}"


def test_every_alert_links_its_runbook_section() -> None:
    headings = {
        line.removeprefix("## ").strip()
        for line in RUNBOOK.read_text().splitlines()
        if line.startswith("## ")
    }
    for rule in alerts(rule_spec()):
        name = rule["alert"]
        assert rule["annotations"]["runbook"] == f"docs/operations/alerts.md#{name.lower()}"
        assert name in headings, f"no runbook section '## {name}' in {RUNBOOK}"
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert re.fullmatch(r"Usher[A-Za-z]+", name)
