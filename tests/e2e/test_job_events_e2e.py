"""A retried job's story on its Kubernetes object, as ``kubectl describe job`` shows it.

Against a real ``usher up --no-demo``: ``train`` opts in to two retries and asks 4Gi where the
emulator's kubelet OOM-kills below 5Gi. Its first attempt is admitted and OOM-killed, the
dequeuer decides ``Retried`` and the watcher creates ``train-retry-1`` at 6Gi, which is admitted
and succeeds. The real kubectl shows, in the Events of each Job, what Usher did: ``Admitted``
(with the wait) and ``Retried`` (the next attempt and its memory) on ``train``, ``Admitted`` on
the retry. With ``USHER_NOTIFY_URL`` set, a test receiver gets the same as CloudEvents, the
first one again after it refused it.

Then the demo's budget story: a job of Department-c spends its budget, the next one waits for
it (B1), and the watcher tells that once, as a ``BudgetExhausted`` Event and a CloudEvent; a
restarted watcher tells it no more (a job that starts waiting after the restart is told).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.cli.stack_process import UpProcess, poll, usher
from tests.e2e.stack_budget import add_node, apply_tree, budget_tree
from usher.demo.budget import story_jobs
from usher.local.kube_emulator.playbook import OOM_BELOW

REPO = Path(__file__).resolve().parents[2]
TREE = REPO / "usher" / "demo" / "walkthrough-tree.yaml"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed")

TRAIN = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "train",
        "namespace": "user-a",
        "annotations": {
            "usher.io/retry-limit": "2",
            OOM_BELOW: "5Gi",
            "usher.io/sim-duration": "0.3",
        },
    },
    "spec": {
        "suspend": True,
        "backoffLimit": 0,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "trainer:2",
                        "resources": {
                            "requests": {"cpu": "1", "memory": "4Gi"},
                            "limits": {"cpu": "1", "memory": "4Gi"},
                        },
                    }
                ],
            }
        },
    },
}


class Receiver(BaseHTTPRequestHandler):
    """A webhook receiver: answers 503 to the first POST (the watcher must try again), then
    202; keeps every request's content type and CloudEvent."""

    received: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.headers["Content-Type"], json.loads(body)))
        self.send_response(503 if len(self.received) == 1 else 202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def receiver() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/usher"
    finally:
        server.shutdown()
        serving.join()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, receiver: str) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("events") / "home"
    env = {"USHER_NOTIFY_URL": receiver}
    with UpProcess(home, ("--no-demo", "--no-console"), env) as up:
        up.stack()
        assert usher(home, "apply", "-f", str(TREE)).returncode == 0
        asyncio.run(
            add_node(home, "64", "256Gi")
        )  # pods need a node: its kubelet plays the OOM kill
        yield home


def describe(home: Path, name: str, namespace: str = "user-a") -> str:
    kubeconfig = json.loads((home / "stack.json").read_text())["kubeconfig"]
    done = subprocess.run(
        [KUBECTL, "--kubeconfig", kubeconfig, "describe", "job", name, "-n", namespace],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kubectl_describe_shows_the_retry_and_the_admissions(home: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "train.yaml"
    manifest.write_text(json.dumps(TRAIN))
    assert usher(home, "submit", str(manifest)).returncode == 0
    waited = usher(
        home, "wait", "user-a/train-retry-1", "--grace", "40", "--timeout", "40", timeout=90
    )
    assert waited.returncode == 0, waited.stderr

    def told(name: str, *needles: str) -> str | None:
        text = describe(home, name)
        return text if all(needle in text for needle in needles) else None

    train = poll(lambda: told("train", "Retried", "Admitted"), 30)
    events = train[train.index("Events:") :]
    assert "retried as user-a/train-retry-1 (1 of 2 retries): attempt 1 of 3 failed" in events
    assert "main/main memory 4Gi -> 6Gi" in events
    assert "Admitted by Usher into root/Department-a (queue " in events
    assert "usher-watcher" in events
    retry = poll(lambda: told("train-retry-1", "Admitted"), 30)
    assert "after waiting" in retry[retry.index("Events:") :]


def test_the_webhook_receives_each_as_a_cloudevent_once_it_accepts(home: Path) -> None:
    """After the test above: train's admission and retry and the retry's admission reached the
    receiver as CloudEvents JSON; the first POST, refused with 503, was sent again."""

    def accepted() -> dict[tuple[str, str], dict[str, Any]] | None:
        found = {(e["subject"], e["type"]): e for _, e in Receiver.received[1:]}
        wanted = {
            ("user-a/train", "io.usher.job.admitted"),
            ("user-a/train", "io.usher.job.retried"),
            ("user-a/train-retry-1", "io.usher.job.admitted"),
        }
        return found if wanted <= found.keys() else None

    found = poll(accepted, 30)
    assert {kind for kind, _ in Receiver.received} == {"application/cloudevents+json"}
    first_id = Receiver.received[0][1]["id"]
    assert [e["id"] for _, e in Receiver.received].count(first_id) == 2  # refused, then sent again
    retried = found[("user-a/train", "io.usher.job.retried")]
    assert retried["specversion"] == "1.0" and retried["source"] == "usher-watcher"
    assert retried["data"]["reason"] == "Retried" and retried["data"]["kind"] == "Job"
    assert retried["data"]["decision"]["job"] == "user-a/train-retry-1"
    assert retried["data"]["message"].startswith("Attempt 1 OOMKilled: retried as user-a/train-")


def _budget_told(subject: str) -> list[dict[str, Any]]:
    return [
        event
        for _, event in Receiver.received
        if event["type"] == "io.usher.job.budgetexhausted" and event["subject"] == subject
    ]


def _watcher_restarted(home: Path, before: int) -> bool | None:
    """The watcher runs again under a new pid and says it is ready."""
    stack = json.loads((home / "stack.json").read_text())
    if stack["service_pids"].get("watcher", before) == before:
        return None
    ready = f"http://127.0.0.1:{stack['health_ports']['watcher']}/readyz"
    try:
        with urllib.request.urlopen(ready, timeout=2) as answer:
            return True if answer.status == 200 else None
    except OSError:
        return None


def test_a_job_waiting_for_a_spent_budget_is_told_once(home: Path, tmp_path: Path) -> None:
    spend, held = story_jobs()
    apply_tree(home, budget_tree(), tmp_path)
    job = ["submit", "-n", spend.namespace, "--image", "x", "--cpu", spend.cpu]
    spent = usher(home, *job, "--name", spend.name, "--duration", "4", "--wait", timeout=90)
    assert spent.returncode == 0, spent.stdout + spent.stderr
    assert usher(home, *job, "--name", held.name).returncode == 0

    def told(name: str) -> str | None:
        text = describe(home, name, held.namespace)
        return text if "BudgetExhausted" in text else None

    events = poll(lambda: told(held.name), 30)
    events = events[events.index("Events:") :]
    assert "Warning  BudgetExhausted" in events
    assert "for a spent budget:" in events and "(budget of root/Department-c)" in events
    [cloud] = poll(lambda: _budget_told(held.key) or None, 30)
    assert cloud["data"]["decision"]["type"] == "decision.pending.v1"
    assert cloud["data"]["decision"]["reason"]["code"] == "BudgetExhausted"
    assert cloud["data"]["reason"] == "BudgetExhausted" and cloud["data"]["type"] == "Warning"

    # A restarted watcher finds the wait standing: told already, not again. A job that starts
    # waiting after the restart is told: once it is, the first would have been as well.
    stack = json.loads((home / "stack.json").read_text())
    watcher = stack["service_pids"]["watcher"]
    os.kill(watcher, signal.SIGKILL)
    poll(lambda: _watcher_restarted(home, watcher), 60)
    assert usher(home, *job, "--name", f"{held.name}-2").returncode == 0
    poll(lambda: _budget_told(f"{held.key}-2") or None, 30)
    assert len(_budget_told(held.key)) == 1
    assert describe(home, held.name, held.namespace).count("BudgetExhausted") == 1
