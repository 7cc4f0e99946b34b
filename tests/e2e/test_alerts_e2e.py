"""The alert rules of deploy/monitoring, evaluated by a real Prometheus scraping a real stack.

``usher up --no-demo`` runs; Debian's ``prometheus`` scrapes every service's ``/metrics`` every
second with the labels the deploy's ServiceMonitor gives (``namespace``,
``app_kubernetes_io_component``, ``pod``)
and evaluates the PrometheusRule's spec every second. A healthy stack raises nothing; the stack
is then driven into conditions: a garbage message and a forged ``Admitted`` on the decision
subjects (UsherDeadLetters and UsherForgedDecisions fire), a held queue with pending work
(UsherQueueStalled becomes pending: its 30 minutes are ``promtool test rules``' to show), a
ledger that stops answering (UsherServiceDown pending). Prometheus is found as promtool is
(``$USHER_PROMETHEUS``, else PATH); without it the test fails under CI and is skipped elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml

from schemas import Envelope, EventId, Zone
from tests.builders import events
from tests.cli.stack_process import UpProcess, poll, usher
from tests.deploy.test_alerts import rule_spec
from usher.adapters.nats.log import publish_envelope
from usher.adapters.nats.subjects import Subjects
from usher.local.processes import free_port

REPO = Path(__file__).resolve().parents[2]
TREE = REPO / "usher" / "demo" / "walkthrough-tree.yaml"
QUEUE_A = "root-department-a-user-a"


def prometheus_binary() -> str:
    found = os.environ.get("USHER_PROMETHEUS") or shutil.which("prometheus")
    if found:
        return found
    how = "prometheus not found: install Debian's prometheus (apt-get install -y prometheus)"
    if os.environ.get("CI") == "true":
        pytest.fail(how)
    pytest.skip(how)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    prometheus_binary()  # skip (or fail) before starting a stack for nothing
    home = tmp_path_factory.mktemp("alerts") / "home"
    with UpProcess(home, ("--no-demo", "--no-console")) as up:
        up.stack()
        assert usher(home, "apply", "-f", str(TREE)).returncode == 0
        yield home


@pytest.fixture(scope="module")
def prometheus(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prometheus scraping every service of the stack; its HTTP API's base URL."""
    folder = tmp_path_factory.mktemp("prometheus")
    stack = json.loads((home / "stack.json").read_text())
    targets = [
        {
            "targets": [f"127.0.0.1:{port}"],
            "labels": {
                "namespace": "usher-system",
                "app_kubernetes_io_component": name.split("-", 1)[0],
                "pod": name,
            },
        }
        for name, port in sorted(stack["health_ports"].items())
    ]
    (folder / "rules.yaml").write_text(yaml.safe_dump(rule_spec()))
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(folder / "rules.yaml")],
        "scrape_configs": [{"job_name": "usher", "static_configs": targets}],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port("127.0.0.1")
    with open(folder / "prometheus.out", "wb") as out:
        process = subprocess.Popen(
            [
                prometheus_binary(),
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        every = len(targets)
        answering = 'count(up{namespace="usher-system"} == 1)'
        poll(lambda: True if _value(url, answering) == every else None, 60)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def _api(url: str, path: str, **query: str) -> Any:
    address = f"{url}/api/v1/{path}?{urllib.parse.urlencode(query)}"
    try:
        with urllib.request.urlopen(address, timeout=5) as answer:
            return json.loads(answer.read())["data"]
    except OSError:
        return None


def _value(url: str, expr: str) -> float | None:
    data = _api(url, "query", query=expr)
    if not data or not data["result"]:
        return None
    return float(data["result"][0]["value"][1])


def _alerts(url: str) -> list[dict[str, Any]]:
    data = _api(url, "alerts")
    return list(data["alerts"]) if data else []


def _alert(url: str, name: str, state: str, **labels: str) -> dict[str, Any] | None:
    for alert in _alerts(url):
        found = alert["labels"]
        if (
            found["alertname"] == name
            and alert["state"] == state
            and all(found.get(k) == v for k, v in labels.items())
        ):
            return alert
    return None


def _publish(home: Path, work: Any) -> None:
    stack = json.loads((home / "stack.json").read_text())

    async def run() -> None:
        nc = await nats.connect(stack["admin_nats_url"])
        try:
            await work(nc.jetstream(), Subjects(stack["prefix"]))
        finally:
            await nc.close()

    asyncio.run(run())


def test_a_healthy_stack_raises_nothing(prometheus: str) -> None:
    def evaluated() -> bool | None:
        groups = (_api(prometheus, "rules") or {}).get("groups", [])
        done = [r for g in groups for r in g["rules"] if r.get("evaluationTime", 0) > 0]
        return True if groups and len(done) == len(rule_spec_alerts()) else None

    poll(evaluated, 30)
    # An evaluation made before the first scrapes may have left an absent() alert pending:
    # once every target answers, the next evaluations clear it, and nothing comes back.
    poll(lambda: True if _alerts(prometheus) == [] else None, 30)
    time.sleep(3)  # three more evaluations
    assert _alerts(prometheus) == []


def rule_spec_alerts() -> list[dict[str, Any]]:
    return [rule for group in rule_spec()["groups"] for rule in group["rules"]]


def test_garbage_and_forged_decisions_fire_their_alerts(home: Path, prometheus: str) -> None:
    async def forge(js: Any, subjects: Subjects) -> None:
        await js.publish(subjects.decision(Zone("default"), "admitted", "user-a", "x"), b"{no")
        forged = events.admitted("user-a/nobody", 1, quota="root/Department-a", queue=QUEUE_A)
        envelope = Envelope(
            id=EventId(f"forged:{datetime.now(UTC).timestamp()}"),
            time=datetime.now(UTC),
            source="usher/dequeuer/default",  # only the ledger admits
            event=forged,
        )
        await publish_envelope(js, subjects.decision_for(forged, Zone("default")), envelope)

    _publish(home, forge)
    poll(lambda: _alert(prometheus, "UsherForgedDecisions", "firing", decision="Admitted"), 60)
    fired = poll(lambda: _alert(prometheus, "UsherDeadLetters", "firing", service="watcher"), 60)
    assert fired["labels"]["severity"] == "warning"
    assert fired["annotations"]["runbook"] == "docs/operations/alerts.md#usherdeadletters"


def test_a_held_queue_with_pending_work_is_on_its_way_to_stalled(
    home: Path, prometheus: str
) -> None:
    assert usher(home, "hold", QUEUE_A).returncode == 0
    job = ["submit", "-n", "user-a", "--name", "waits", "--image", "x", "--cpu", "1"]
    assert usher(home, *job).returncode == 0
    poll(lambda: _alert(prometheus, "UsherQueueStalled", "pending", queue=QUEUE_A), 60)
    assert usher(home, "resume", QUEUE_A).returncode == 0


def test_a_ledger_that_stops_answering_is_on_its_way_to_down(home: Path, prometheus: str) -> None:
    pid = json.loads((home / "stack.json").read_text())["service_pids"]["ledger"]
    os.kill(pid, signal.SIGSTOP)
    try:
        down = poll(lambda: _alert(prometheus, "UsherServiceDown", "pending", pod="ledger"), 60)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert down["labels"]["app_kubernetes_io_component"] == "ledger"
