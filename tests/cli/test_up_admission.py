"""`usher up` has the cluster's shape (issue 26): the admission webhook runs and the emulator
calls it, so a job created running in a managed namespace is stored suspended and never runs
unadmitted; `usher status` names a service that was killed or keeps dying and exits 1.

One real `usher up --no-demo` for the module, with the walkthrough tree applied.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from tests.builders.manifests import batch_job, container, pod_template
from tests.cli.stack_process import UpProcess, poll, usher, usher_json
from usher.local.processes import pid_alive

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, UpProcess]]:
    home = tmp_path_factory.mktemp("admission") / "home"
    with UpProcess(home) as up:
        up.stack()
        tree = usher(home, "apply", "-f", str(REPO / "usher" / "demo" / "walkthrough-tree.yaml"))
        assert tree.returncode == 0, tree.stderr
        yield home, up


def _stack_json(home: Path) -> dict[str, Any]:
    return dict(json.loads((home / "stack.json").read_text()))


async def _create_and_read(kubeconfig: str, namespace: str, job: dict[str, Any]) -> Any:
    api_client = await config.new_client_from_config(config_file=kubeconfig)
    async with api_client:
        batch = client.BatchV1Api(api_client)
        await batch.create_namespaced_job(namespace, job)
        return await batch.read_namespaced_job(job["metadata"]["name"], namespace)


async def _create_namespace(kubeconfig: str, name: str) -> None:
    api_client = await config.new_client_from_config(config_file=kubeconfig)
    async with api_client:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        await client.CoreV1Api(api_client).create_namespace(body)


def _read(kubeconfig: str, namespace: str, name: str) -> Any:
    async def read() -> Any:
        api_client = await config.new_client_from_config(config_file=kubeconfig)
        async with api_client:
            return await client.BatchV1Api(api_client).read_namespaced_job(name, namespace)

    return asyncio.run(read())


def test_a_job_created_running_in_a_managed_namespace_is_stored_suspended(
    stack: tuple[Path, UpProcess],
) -> None:
    home, _up = stack
    info = _stack_json(home)
    assert pid_alive(int(info["pids"]["webhook"]))
    assert (home / "webhook" / "tls.key").stat().st_mode & 0o777 == 0o600
    kubeconfig = str(info["kubeconfig"])
    big = batch_job("too-big-to-run", template=pod_template(container(cpu="500")), suspend=False)
    stored = asyncio.run(_create_and_read(kubeconfig, "user-a", big))
    assert stored.spec.suspend is True  # the webhook's patch, before the store saw it

    def queued() -> dict[str, Any] | None:
        jobs = {j["job"]: j for j in usher_json(home, "jobs")}
        return jobs.get("user-a/too-big-to-run")

    seen = poll(queued)  # the watcher has it: the ledger decides, and refuses to admit it
    assert seen["state"] != "Admitted"
    after = _read(kubeconfig, "user-a", "too-big-to-run")
    assert after.spec.suspend is True
    assert after.status is None or (after.status.start_time is None and not after.status.active)
    # Outside the managed namespaces the webhook changes nothing (one a user made first: the
    # local cluster, as a real one, refuses a job in a namespace nobody created).
    asyncio.run(_create_namespace(kubeconfig, "not-managed"))
    free = batch_job("not-mine", template=pod_template(container(cpu="1")), suspend=False)
    elsewhere = asyncio.run(_create_and_read(kubeconfig, "not-managed", free))
    assert elsewhere.spec.suspend is False


def test_apply_says_what_happens_to_a_job_created_unsuspended(
    stack: tuple[Path, UpProcess], tmp_path: Path
) -> None:
    """Issue 28: `usher apply` told a job created unsuspended in a managed namespace that it
    "starts at once, outside Usher's queues", though the webhook suspends it and it is queued.
    Now it says what happens: suspended and queued there; outside the tree, it does start."""
    home, _up = stack
    managed = batch_job("eager", "user-a", template=pod_template(container(cpu="1")), suspend=False)
    free = batch_job(
        "loose", "not-managed", template=pod_template(container(cpu="1")), suspend=False
    )
    (tmp_path / "managed.yaml").write_text(json.dumps(managed))
    (tmp_path / "free.yaml").write_text(json.dumps(free))
    applied = usher(home, "apply", "-f", str(tmp_path / "managed.yaml"))
    assert applied.returncode == 0, applied.stderr
    assert "admission webhook suspended it; it is queued like any job" in applied.stderr
    assert "outside Usher's queues" not in applied.stderr
    elsewhere = usher(home, "apply", "-f", str(tmp_path / "free.yaml"))
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert "which no leaf of the quota tree takes" in elsewhere.stderr
    assert "starts at once, outside Usher's queues" in elsewhere.stderr


def _restarted(home: Path, name: str, old_pid: int) -> int | None:
    pid = int(_stack_json(home)["service_pids"].get(name, 0))
    return pid if pid != old_pid and pid and pid_alive(pid) else None


def test_status_names_a_killed_and_a_crash_looping_service(
    stack: tuple[Path, UpProcess],
) -> None:
    home, _up = stack
    info = _stack_json(home)
    assert set(info["health_ports"]) == set(info["service_pids"])  # status asks each /healthz
    well = usher(home, "status")
    assert well.returncode == 0, well.stdout + well.stderr
    assert "RESTARTS" in well.stdout and "webhook" in well.stdout
    pid = int(_stack_json(home)["service_pids"]["dequeuer-b"])
    os.kill(pid, signal.SIGKILL)
    pid = poll(lambda: _restarted(home, "dequeuer-b", pid))
    once = usher(home, "status")
    assert once.returncode == 1
    assert "not well: dequeuer-b restarted, not yet up 30s" in once.stderr
    for _ in range(2):  # it keeps dying before it is up 30 s
        os.kill(pid, signal.SIGKILL)
        pid = poll(lambda old=pid: _restarted(home, "dequeuer-b", old))  # type: ignore[misc]
    looping = usher(home, "status")
    assert looping.returncode == 1
    assert "dequeuer-b crash-looping (3 restarts in a row)" in looping.stderr
    assert "crash-looping" in looping.stdout
    as_json = json.loads(usher(home, "status", "-o", "json").stdout)
    [dequeuer] = [p for p in as_json["processes"] if p["name"] == "dequeuer-b"]
    assert dequeuer["crash_looping"] is True and dequeuer["restarts"] == 3
    others = [p for p in as_json["processes"] if p["name"] != "dequeuer-b"]
    assert all(p["alive"] and not p["crash_looping"] for p in others)
