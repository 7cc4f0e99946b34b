"""The alert rules of deploy/monitoring, evaluated by a real Prometheus scraping a real stack.

``usher up --no-demo`` runs (one node of 256 cpu, so that pods run; services give up on a lost
NATS after 3 s); Debian's ``prometheus`` scrapes every service's ``/metrics`` every second with
the labels the deploy's ServiceMonitor gives (``namespace``, ``app_kubernetes_io_component``,
``pod``), and the stack's stand-in for kube-state-metrics (``usher.local.kube_state``: each
supervised process's restarts, with their own labels, as kube-state-metrics is scraped with
``honor_labels``); it evaluates the PrometheusRule's spec every second, its durations shortened
by the test (``quick_rules``: every ``for`` 1 s, 15- and 30-minute windows 20 s, a lag of 3 entries
instead of 1,000; the expressions are otherwise the deploy's). A healthy stack raises nothing;
the stack is then driven into each condition, in this order, and each alert must fire:

- a garbage message and a forged ``Admitted`` on the decision subjects: UsherDeadLetters,
  UsherForgedDecisions;
- a held queue with pending work: UsherQueueStalled;
- a ledger that stops answering (SIGSTOP) while the dequeuer waits on it and jobs keep coming:
  UsherServiceDown and UsherComponentMissing (ledger), UsherConsumerLag (the dequeuer);
- the demo's budget story (12 cpu for 4 s against 36 cpu-seconds a month): UsherBudgetSpent;
  the tree re-applied with a limit the spending leaves 5% of: UsherBudgetNearlySpent;
- a job waiting for quota behind a job that outlived every run the log records:
  UsherPendingPastEstimate (the watcher's count, estimated every 10 s);
- PostgreSQL stopped (every process of it, SIGSTOP): UsherPostgresUnavailable (the ledger's
  probe: no CloudNativePG exporter runs here);
- the preemptor killed (SIGKILL) three times, ``usher up`` restarting it each time:
  UsherServiceRestarting;
- ``usher up`` paused (so that it restarts nothing), the API emulator killed and NATS stopped:
  UsherKubeWatchFlapping (every list/watch of the watcher fails and starts again),
  UsherWatcherNatsDisconnected, UsherNatsUnavailable, UsherServiceUnhealthy. Once resumed,
  ``usher up`` finds its API server gone and stops the stack.
Prometheus is found as promtool is (``$USHER_PROMETHEUS``, else PATH); without it the test fails
under CI and is skipped elsewhere.
"""

from __future__ import annotations

import asyncio
import functools
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
from tests.deploy.test_alerts import alerts, rule_spec
from tests.e2e.stack_budget import add_node, apply_tree, budget_tree
from usher.adapters.nats.log import publish_envelope
from usher.adapters.nats.subjects import Subjects
from usher.demo.budget import DEPARTMENT, story_jobs
from usher.local.processes import free_port

QUEUE_A = "root-department-a-user-a"
BUDGET_NODE = f"root/{DEPARTMENT}"
LAG_JOBS = 5
"""Jobs created while the ledger is stopped: entries the waiting dequeuer has not applied."""
QUICK = {"[15m]": "[20s]", "[30m]": "[20s]", "offset 15m": "offset 20s", "> 1000": "> 3"}
"""The test's override of the rules' windows and the lag threshold (see the module docstring)."""


def quick_rules() -> dict[str, Any]:
    """The deploy's rules with every ``for`` 1 s and the ``QUICK`` windows and threshold."""
    spec = rule_spec()
    for rule in alerts(spec):
        if "for" in rule:
            rule["for"] = "1s"
        for slow, quick in QUICK.items():
            rule["expr"] = rule["expr"].replace(slow, quick)
    return spec


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
    env = {"USHER_NATS_DOWN_LIMIT_SECONDS": "3"}
    with UpProcess(home, ("--no-demo", "--no-console"), env) as up:
        up.stack()
        apply_tree(home, budget_tree(), home.parent)
        asyncio.run(add_node(home, "256", "1Ti"))
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
    (folder / "rules.yaml").write_text(yaml.safe_dump(quick_rules()))
    kube_state = {
        "job_name": "kube-state-metrics",
        "honor_labels": True,  # its series name their pods: keep them (as kube-prometheus does)
        "static_configs": [{"targets": [f"127.0.0.1:{stack['kube_state_metrics_port']}"]}],
    }
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(folder / "rules.yaml")],
        "scrape_configs": [{"job_name": "usher", "static_configs": targets}, kube_state],
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
        poll(lambda: True if _value(url, 'up{job="kube-state-metrics"}') == 1 else None, 60)
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


def submit(home: Path, namespace: str, name: str, cpu: str, *more: str) -> None:
    job = ["submit", "-n", namespace, "--name", name, "--image", "x", "--cpu", cpu, *more]
    done = usher(home, *job, timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_held_queue_with_pending_work_stalls(home: Path, prometheus: str) -> None:
    """``waits`` keeps 1 cpu of Department-a for the rest of the module once admitted."""
    assert usher(home, "hold", QUEUE_A).returncode == 0
    submit(home, "user-a", "waits", "1")
    stalled = poll(lambda: _alert(prometheus, "UsherQueueStalled", "firing", queue=QUEUE_A), 60)
    assert stalled["annotations"]["runbook"] == "docs/operations/alerts.md#usherqueuestalled"
    assert usher(home, "resume", QUEUE_A).returncode == 0


def test_a_ledger_that_stops_answering_is_down_and_the_dequeuer_lags(
    home: Path, prometheus: str
) -> None:
    """The dequeuer waits for the ledger's answer to its reservation, so it folds nothing
    meanwhile: the jobs created after it are log entries it has not applied."""
    pid = json.loads((home / "stack.json").read_text())["service_pids"]["ledger"]
    os.kill(pid, signal.SIGSTOP)
    try:
        for n in range(LAG_JOBS):
            submit(home, "user-c", f"lag-{n}", "1", "--duration", "1")
        lag = poll(
            lambda: _alert(prometheus, "UsherConsumerLag", "firing", service="dequeuer-default"),
            60,
        )
        down = poll(lambda: _alert(prometheus, "UsherServiceDown", "firing", pod="ledger"), 60)
        missing = poll(
            lambda: _alert(prometheus, "UsherComponentMissing", "firing", component="ledger"), 60
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    assert float(lag["value"]) > 3
    assert down["labels"]["app_kubernetes_io_component"] == "ledger"
    assert missing["labels"]["severity"] == "critical"
    # Its reservations are granted once it answers again: the last job created runs its second
    # and ends (so do the others: runs the estimate test below counts on).
    last = f"user-c/lag-{LAG_JOBS - 1}"
    waited = usher(home, "wait", last, "--timeout", "60", timeout=90)
    assert waited.returncode == 0, waited.stdout + waited.stderr


def test_a_spent_budget_and_a_nearly_spent_one(home: Path, prometheus: str, tmp_path: Path) -> None:
    spend, _ = story_jobs()
    submit(home, spend.namespace, spend.name, spend.cpu, "--duration", str(spend.duration_s))
    done = usher(home, "wait", spend.key, "--timeout", "60", timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    spent = poll(lambda: _alert(prometheus, "UsherBudgetSpent", "firing", node=BUDGET_NODE), 60)
    assert spent["labels"]["resource"] == "cpu" and spent["labels"]["window"] == "month"
    # What it spent (in cpu-seconds), then a limit it spends 95% of (whole millicore-ms).
    seconds = poll(
        lambda: _value(
            prometheus, f'max(usher_budget_spent_resource_seconds{{node="{BUDGET_NODE}"}})'
        )
    )
    assert seconds > 36  # 12 cpu for at least 4 s, against 36 cpu-seconds
    hours = round(seconds / 0.95 / 3600, 6)
    apply_tree(home, budget_tree(f"cpu={hours}h per month"), tmp_path)
    nearly = poll(
        lambda: _alert(prometheus, "UsherBudgetNearlySpent", "firing", node=BUDGET_NODE), 60
    )
    assert nearly["labels"]["severity"] == "warning"


def test_a_job_waiting_past_its_estimate(home: Path, prometheus: str) -> None:
    """The queue's runs so far are short, and one lasted 25 s: a blocker that runs on past all
    of them fills the root with ``waits``. The next job's first estimate, made while the
    blocker is younger than the longest run, is bounded (E1: the blocker ends within that run's
    length); the watcher finds it still waiting past that bound. (Once the blocker has outrun
    every run, the estimate says "unknown", never a bound already passed.)"""
    submit(home, "user-c", "history", "1", "--duration", "25")
    ran = usher(home, "wait", "user-c/history", "--timeout", "90", timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    submit(home, "user-c", "blocker", "99")
    done = usher(home, "wait", "user-c/blocker", "--for", "admitted", "--timeout", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    submit(home, "user-c", "late", "2")
    try:
        late = poll(lambda: _alert(prometheus, "UsherPendingPastEstimate", "firing"), 90)
    except AssertionError:
        explained = usher(home, "explain", "user-c/late").stdout
        counted = _api(prometheus, "query", query="usher_queue_pending_past_estimate_workloads")
        raise AssertionError(f"not fired; the gauge: {counted}; explain:\n{explained}") from None
    assert late["labels"]["queue"].startswith("root-department-b")
    assert float(late["value"]) == 1


def _process_tree(root: int) -> list[int]:
    """``root`` and every process below it (PostgreSQL's postmaster and its backends)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def test_postgres_that_stops_answering_fires_its_alert(home: Path, prometheus: str) -> None:
    """Every PostgreSQL process stopped (SIGSTOP): the ledger's ``SELECT 1`` gets no answer
    (no CloudNativePG exporter here: the ledger's own probe)."""
    stopped = _process_tree(json.loads((home / "stack.json").read_text())["pids"]["postgres"])
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        fired = poll(
            lambda: _alert(prometheus, "UsherPostgresUnavailable", "firing", service="ledger"), 60
        )
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    assert fired["annotations"]["summary"] == (
        "PostgreSQL does not answer the ledger: the ledger cannot admit"
    )
    poll(lambda: True if _value(prometheus, "min(usher_postgres_up)") == 1 else None, 60)


def test_a_service_killed_three_times_is_restarting(home: Path, prometheus: str) -> None:
    """``usher up`` restarts the killed preemptor each time (after 0.5, 1 and 2 s): its
    restart counter, served as kube-state-metrics serves a pod's, goes from 0 to 3."""
    restarts = 'kube_pod_container_status_restarts_total{pod="preemptor"}'
    assert _value(prometheus, restarts) == 0
    for _ in range(3):
        pid = json.loads((home / "stack.json").read_text())["service_pids"]["preemptor"]
        os.kill(pid, signal.SIGKILL)
        poll(functools.partial(_restarted, home, "preemptor", pid), 30)
    fired = poll(
        lambda: _alert(prometheus, "UsherServiceRestarting", "firing", pod="preemptor"), 60
    )
    assert fired["labels"]["namespace"] == "usher-system"
    assert fired["labels"]["container"] == "preemptor"
    assert fired["annotations"]["runbook"] == "docs/operations/alerts.md#usherservicerestarting"
    assert _value(prometheus, restarts) == 3


def _restarted(home: Path, name: str, old: int) -> bool | None:
    """Whether ``stack.json`` names a new process for ``name`` (``usher up`` restarted it)."""
    try:
        pid = json.loads((home / "stack.json").read_text())["service_pids"][name]
    except (FileNotFoundError, json.JSONDecodeError):
        return None  # being rewritten
    return True if pid not in (0, old) else None


def test_kube_api_and_nats_gone_fire_their_alerts(home: Path, prometheus: str) -> None:
    """Last (the stack stops afterwards): ``usher up`` is paused, so that it restarts nothing,
    the API emulator is killed, so that every list/watch of the watcher fails at once and is
    started again (after 0.1 s, then ever longer), and NATS is stopped; every service loses it,
    and after 3 s says it cannot work."""
    stack = json.loads((home / "stack.json").read_text())
    os.kill(stack["up_pid"], signal.SIGSTOP)
    try:
        os.kill(stack["pids"]["kube-emulator"], signal.SIGKILL)
        os.kill(stack["pids"]["nats"], signal.SIGTERM)
        flapping = poll(lambda: _alert(prometheus, "UsherKubeWatchFlapping", "firing"), 60)
        watcher = poll(lambda: _alert(prometheus, "UsherWatcherNatsDisconnected", "firing"), 60)
        poll(lambda: _alert(prometheus, "UsherNatsUnavailable", "firing"), 60)
        unhealthy = poll(
            lambda: _alert(prometheus, "UsherServiceUnhealthy", "firing", pod="watcher"), 60
        )
    finally:
        os.kill(stack["up_pid"], signal.SIGCONT)
    assert float(flapping["value"]) > 5, flapping
    assert flapping["annotations"]["runbook"] == "docs/operations/alerts.md#usherkubewatchflapping"
    assert watcher["labels"]["pod"] == "watcher"
    assert unhealthy["labels"]["severity"] == "critical"
