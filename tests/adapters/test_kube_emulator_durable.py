"""The on-disk cluster of ``usher up`` keeps every write it acknowledged, as a real API server
(etcd) does: SIGKILLed the instant after a create, a merge patch, a status patch and a delete
were answered, it comes back with all of them, its resourceVersions never going back, and a
watch from before the restart is told 410 Gone (a restarted kube-apiserver's watch cache
starts at its restart: clients list again).

The journal itself (``kube_emulator.journal``), in-process: a torn last line (the process
killed in the middle of a write nobody was answered for) is dropped, lines the snapshot
already holds are skipped, and compaction leaves the same objects.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from usher.local.kube_emulator import resource
from usher.local.kube_emulator.journal import Journal, PersistentStore
from usher.local.processes import ManagedProcess

NAMESPACE = "user-a"
CONFIGMAPS = resource("", "v1", "configmaps")


class Cluster:
    """``python -m usher.local.cluster`` on a state file, started and SIGKILLed at will."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.kubeconfig = tmp_path / "kubeconfig"
        self.proc: ManagedProcess | None = None
        self.api: client.ApiClient | None = None
        self.runs = 0

    async def start(self) -> client.ApiClient:
        self.runs += 1
        self.kubeconfig.unlink(missing_ok=True)
        self.proc = ManagedProcess(
            "cluster",
            [sys.executable, "-m", "usher.local.cluster", "--kubeconfig", str(self.kubeconfig),
             "--state", str(self.tmp_path / "state" / "objects.json"), "--zones", "a"],
            self.tmp_path / f"cluster.{self.runs}.log",
        )  # fmt: skip
        self.proc.start()
        deadline = time.monotonic() + 30
        while not self.kubeconfig.exists():
            assert time.monotonic() < deadline and self.proc.running(), self.proc.log_tail()
            await asyncio.sleep(0.05)
        cfg = client.Configuration()
        await config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=cfg)
        self.api = client.ApiClient(cfg)
        return self.api

    async def kill(self) -> None:
        """SIGKILL: nothing runs after it (no handler, no last save)."""
        assert self.proc is not None and self.proc.popen is not None
        self.proc.popen.kill()
        self.proc.popen.wait(timeout=10)
        await self.close_api()

    async def close_api(self) -> None:
        if self.api is not None:
            await self.api.close()
            self.api = None


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    made = Cluster(tmp_path)
    try:
        yield made
    finally:
        await made.close_api()
        if made.proc is not None:
            made.proc.stop()


def _configmap(name: str, value: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "data": {"value": value}}


def _job(name: str) -> dict[str, object]:
    container = {"name": "w", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
    template = {"spec": {"restartPolicy": "Never", "containers": [container]}}
    return {"metadata": {"name": name}, "spec": {"suspend": True, "template": template}}


async def test_acknowledged_writes_survive_a_sigkill_and_resource_versions_never_go_back(
    cluster: Cluster,
) -> None:
    api = await cluster.start()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    await core.create_namespaced_config_map(NAMESPACE, _configmap("kept", "1"))
    await core.create_namespaced_config_map(NAMESPACE, _configmap("gone", "1"))
    await batch.create_namespaced_job(NAMESPACE, _job("admitted"))
    # The acknowledged writes, then at once the kill (nothing between them but the answers).
    acked = [
        (await core.create_namespaced_config_map(NAMESPACE, _configmap("new", "1"))).metadata,
        (await batch.patch_namespaced_job(
            "admitted", NAMESPACE, {"spec": {"suspend": False}})).metadata,  # the unsuspend
        (await core.patch_node_status(
            "node-a", {"status": {"allocatable": {"cpu": "7"}}})).metadata,
        (await core.patch_namespaced_config_map(
            "kept", NAMESPACE, {"data": {"value": "2"}})).metadata,
        (await core.delete_namespaced_config_map("gone", NAMESPACE)).metadata,
    ]  # fmt: skip
    last_acked = max(int(meta.resource_version) for meta in acked if meta.resource_version)
    await cluster.kill()

    api = await cluster.start()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    assert (await core.read_namespaced_config_map("new", NAMESPACE)).data == {"value": "1"}
    assert (await batch.read_namespaced_job("admitted", NAMESPACE)).spec.suspend is False
    node = await core.read_node("node-a")
    assert node.status.allocatable["cpu"] == "7"
    kept = await core.read_namespaced_config_map("kept", NAMESPACE)
    assert kept.data == {"value": "2"}
    assert int(kept.metadata.resource_version) >= int(acked[3].resource_version)
    with pytest.raises(ApiException) as gone:
        await core.read_namespaced_config_map("gone", NAMESPACE)
    assert gone.value.status == 404
    listed = await core.list_namespaced_config_map(NAMESPACE)
    assert int(listed.metadata.resource_version) >= last_acked
    after = await core.create_namespaced_config_map(NAMESPACE, _configmap("after", "1"))
    assert int(after.metadata.resource_version) > last_acked
    # A watch from before the restart: 410 Gone, as a restarted API server answers it.
    watch = await core.list_namespaced_config_map(
        NAMESPACE, watch=True, resource_version=str(last_acked - 1), timeout_seconds=2,
        _preload_content=False,
    )  # fmt: skip
    first = json.loads((await watch.content.readline()).decode())
    watch.release()
    assert (first["type"], first["object"]["code"]) == ("ERROR", 410)


def _store() -> PersistentStore:
    return PersistentStore(strict_namespaces=False, validate=True)


def test_the_journal_replays_past_its_snapshot_and_drops_a_torn_last_line(tmp_path: Path) -> None:
    state = tmp_path / "objects.json"
    store = _store()
    journal = Journal(state, store)
    journal.recover()
    journal.start()
    store.create(CONFIGMAPS, "ns", _configmap("a", "1"))
    store.patch(CONFIGMAPS, "ns", "a", "merge", {"data": {"value": "2"}})
    store.create(CONFIGMAPS, "ns", _configmap("b", "1"))
    store.delete(CONFIGMAPS, "ns", "b")
    rv = store.resource_version
    lines = journal.path.read_bytes()
    with journal.path.open("ab") as handle:  # killed halfway through an unanswered write
        handle.write(b'{"rv":99,"type":"ADDED","storage":"/configmaps","object":{"meta')

    again = _store()
    Journal(state, again).recover()
    assert [o["data"] for o in again.objects(CONFIGMAPS)] == [{"value": "2"}]
    assert again.resource_version == rv

    # Killed after a compaction's snapshot, before it emptied the journal: nothing twice.
    journal.compact_now()
    journal.path.write_bytes(lines)
    third = _store()
    Journal(state, third).recover()
    assert third.objects(CONFIGMAPS) == store.objects(CONFIGMAPS)
    assert third.resource_version == rv
