"""kube-queue's kubectl view keeps working: the real kubectl against the running system.

After the demo tree and the two jobs of scenario 1 of kube-queue's walkthrough, `kubectl get
queue -n kube-queue` lists one Queue per leaf, and `kubectl get queue ... -o yaml` shows the
waiting job at position 1, as kube-queue's walkthrough's expected output does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from usher.client import Client
from usher.local.system import EmbeddedSystem, SystemOptions

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed")
REPO = Path(__file__).resolve().parents[2]
TREE = REPO / "usher" / "demo" / "walkthrough-tree.yaml"


@pytest.fixture(scope="module")
def walkthrough_round(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedSystem]:
    """The system after kube-queue's walkthrough's scenario 1: pi-8k5pn admitted, pi-2xtcj
    waiting."""
    home = tmp_path_factory.mktemp("kubectl") / "home"
    env = pytest.MonkeyPatch()
    for key in [k for k in os.environ if k.startswith("USHER_")]:
        env.delenv(key)  # the client finds this system through its stack.json only
    system = EmbeddedSystem(home, SystemOptions())
    system.start()
    try:
        with Client(home=home) as usher:
            usher.apply(TREE)
            for name in ("pi-8k5pn", "pi-2xtcj"):
                time.sleep(1.0 - time.time() % 1.0 + 0.05)  # creation order, whole seconds
                usher.submit(
                    name,
                    namespace="user-a",
                    image="perl:5.34.0",
                    cpu="10",
                    memory="10Gi",
                    replicas=6,
                    command=["sleep", "1d"],
                )
            usher.wait("user-a/pi-8k5pn", until="admitted", timeout=30)
        yield system
    finally:
        system.stop()
        env.undo()


def kubectl(system: EmbeddedSystem, *args: str) -> str:
    result = subprocess.run(
        [
            KUBECTL,
            "--kubeconfig",
            str(system.kubeconfig),
            "--cache-dir",
            str(system.home / "kube-cache"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _queue(system: EmbeddedSystem) -> dict[str, Any] | None:
    queue = yaml.safe_load(
        kubectl(
            system, "get", "queue", "-n", "kube-queue", "root-department-a-user-a", "-o", "yaml"
        )
    )
    active = ((queue.get("status") or {}).get("queueItemDetails") or {}).get("active")
    return dict(queue) if active else None


def test_kubectl_lists_one_queue_per_leaf(walkthrough_round: EmbeddedSystem) -> None:
    deadline = time.monotonic() + 30
    while True:
        out = kubectl(walkthrough_round, "get", "queue", "-n", "kube-queue")
        lines = out.strip().splitlines()
        if len(lines) == 3 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert lines[0].split() == ["NAME", "AGE"]
    assert [line.split()[0] for line in lines[1:]] == [
        "root-department-a-user-a",
        "root-department-b-user-c",
    ]


def test_kubectl_shows_the_queue_with_positions_as_in_the_walkthrough(
    walkthrough_round: EmbeddedSystem,
) -> None:
    deadline = time.monotonic() + 30
    queue = _queue(walkthrough_round)
    while queue is None and time.monotonic() < deadline:
        time.sleep(0.3)
        queue = _queue(walkthrough_round)
    assert queue is not None, "the watcher never wrote the queue's status"
    assert queue["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert queue["kind"] == "Queue"
    meta = queue["metadata"]
    assert meta["name"] == "root-department-a-user-a"
    assert meta["namespace"] == "kube-queue"
    assert meta["labels"] == {"create-by-kubequeue": "true"}
    assert meta["annotations"]["kube-queue/quota-fullname"] == "root/Department-a"
    assert queue["spec"] == {"queuePolicy": "Round"}
    details = queue["status"]["queueItemDetails"]
    assert [(e["name"], e["namespace"], e["position"]) for e in details["active"]] == [
        ("pi-2xtcj", "user-a", 1)
    ]
    assert details["backoff"] == []


def test_kubectl_shows_the_tree_usage_in_its_status(walkthrough_round: EmbeddedSystem) -> None:
    deadline = time.monotonic() + 30
    while True:
        tree = json.loads(
            kubectl(
                walkthrough_round,
                "-n",
                "kube-system",
                "get",
                "eqtree",
                "elasticquotatree",
                "-o",
                "json",
            )
        )
        used = (tree.get("status") or {}).get("used") or {}
        if used.get("root/Department-a") or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert used["root/Department-a"] == {"cpu": "60", "memory": "60Gi"}
    assert used["root"] == {"cpu": "60", "memory": "60Gi"}


def test_kubectl_sees_the_admitted_job_running_and_the_other_suspended(
    walkthrough_round: EmbeddedSystem,
) -> None:
    jobs = json.loads(kubectl(walkthrough_round, "get", "jobs", "-n", "user-a", "-o", "json"))
    suspended = {j["metadata"]["name"]: j["spec"]["suspend"] for j in jobs["items"]}
    assert suspended == {"pi-8k5pn": False, "pi-2xtcj": True}
