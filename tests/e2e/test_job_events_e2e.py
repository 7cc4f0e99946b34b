"""A retried job's story on its Kubernetes object, as ``kubectl describe job`` shows it.

Against a real ``usher up --no-demo``: ``train`` opts in to two retries and asks 4Gi where the
emulator's kubelet OOM-kills below 5Gi. Its first attempt is admitted and OOM-killed, the
dequeuer decides ``Retried`` and the watcher creates ``train-retry-1`` at 6Gi, which is admitted
and succeeds. The real kubectl shows, in the Events of each Job, what Usher did: ``Admitted``
(with the wait) and ``Retried`` (the next attempt and its memory) on ``train``, ``Admitted`` on
the retry.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.stack_process import UpProcess, poll, usher
from tests.e2e.harness import node_manifest
from usher.adapters.kube import KubeClient, Resource
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


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("events") / "home"
    with UpProcess(home, ("--no-demo", "--no-console")) as up:
        up.stack()
        assert usher(home, "apply", "-f", str(TREE)).returncode == 0
        asyncio.run(_add_node(home))  # pods need a node: its kubelet plays the OOM kill
        yield home


async def _add_node(home: Path) -> None:
    """A node of 64 cpu and 256Gi, created with its status as a kubelet registers one."""
    node = node_manifest({"name": "node-1", "allocatable": {"cpu": "64", "memory": "256Gi"}})
    kubeconfig = Path(json.loads((home / "stack.json").read_text())["kubeconfig"])
    async with await KubeClient.from_kubeconfig(kubeconfig) as kube:
        await kube.create(Resource("", "v1", "nodes", "Node"), None, node)


def describe(home: Path, name: str) -> str:
    kubeconfig = json.loads((home / "stack.json").read_text())["kubeconfig"]
    done = subprocess.run(
        [KUBECTL, "--kubeconfig", kubeconfig, "describe", "job", name, "-n", "user-a"],
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
