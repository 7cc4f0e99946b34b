"""The emulator as kubectl sees a real cluster: OpenAPI for validation, pods, printer columns.

The real kubectl (skipped only when it is not on PATH) creates the demo's Job with its default
validation, which needs ``/openapi/v3``; a misspelt field is refused as a real server's strict
field validation does; the fake kubelet's pods and the Table columns show what a cluster shows.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.builders.manifests import batch_job, container, pod_template
from tests.services.helpers import eventually
from usher.local.kube_emulator import KubeEmulator, resource
from usher.local.kube_emulator.kubelet import FakeKubelet
from usher.local.kube_emulator.printers import human_duration

REPO = Path(__file__).resolve().parents[2]
WALKTHROUGH_PI = REPO / "usher" / "demo" / "walkthrough-pi.yaml"
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator(kubelet=True) as emulator:
        yield emulator


async def kubectl(emu: KubeEmulator, home: Path, *args: str, stdin: str = "") -> tuple[int, str]:
    """``kubectl --kubeconfig ... args``: (exit code, stdout + stderr)."""
    assert KUBECTL is not None
    base = [KUBECTL, "--kubeconfig", str(emu.kubeconfig_path), "--cache-dir", str(home)]
    proc = await asyncio.create_subprocess_exec(
        *base,
        *args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "HOME": str(home)},
    )
    out, _ = await asyncio.wait_for(proc.communicate(stdin.encode()), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def get_json(emu: KubeEmulator, path: str, accept: str = "application/json") -> Any:
    connector = aiohttp.TCPConnector(ssl=emu.client_ssl_context())
    headers = {**emu.auth_headers, "Accept": accept}
    async with (
        aiohttp.ClientSession(connector=connector, headers=headers) as http,
        http.get(f"{emu.url}{path}") as resp,
    ):
        return resp.status, await resp.json(content_type=None)


# --------------------------------------------------------------------------- OpenAPI


@needs_kubectl
async def test_kubectl_creates_the_demo_job_with_validation(
    emu: KubeEmulator, tmp_path: Path
) -> None:
    code, out = await kubectl(emu, tmp_path, "create", "-f", str(WALKTHROUGH_PI))
    assert code == 0, out
    assert out.startswith("job.batch/pi-") and out.rstrip().endswith(" created")
    code, listed = await kubectl(emu, tmp_path, "get", "jobs", "-n", "user-a", "-o", "json")
    assert code == 0, listed
    [job] = json.loads(listed)["items"]
    assert job["spec"]["suspend"] is True and job["spec"]["parallelism"] == 6


@needs_kubectl
async def test_kubectl_strict_validation_names_an_unknown_field(
    emu: KubeEmulator, tmp_path: Path
) -> None:
    misspelt = WALKTHROUGH_PI.read_text().replace("  parallelism: 6", "  parallelizm: 6")
    code, out = await kubectl(emu, tmp_path, "create", "-f", "-", stdin=misspelt)
    assert code == 1
    assert 'strict decoding error: unknown field "spec.parallelizm"' in out
    code, listed = await kubectl(emu, tmp_path, "get", "jobs", "-A", "-o", "name")
    assert (code, listed) == (0, "")  # nothing was created
    # Told not to validate (fieldValidation=Ignore), the server creates it.
    ignored = await kubectl(emu, tmp_path, "create", "--validate=false", "-f", "-", stdin=misspelt)
    assert ignored[0] == 0, ignored[1]
    # Warn creates it too, and says which field the server did not know.
    code, warned = await kubectl(
        emu, tmp_path, "create", "--validate=warn", "-f", "-", stdin=misspelt
    )
    assert code == 0, warned
    assert 'Warning: unknown field "spec.parallelizm"' in warned


async def test_openapi_v3_discovery_points_at_every_group_version(emu: KubeEmulator) -> None:
    status, root = await get_json(emu, "/openapi/v3")
    assert status == 200
    assert {"api/v1", "apis/batch/v1", "apis/scheduling.sigs.k8s.io/v1beta1"} <= set(root["paths"])
    url = root["paths"]["apis/batch/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/batch/v1?hash=")
    status, doc = await get_json(emu, url)
    assert status == 200 and doc["openapi"] == "3.0.0"
    patch = doc["paths"]["/apis/batch/v1/namespaces/{namespace}/jobs/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "batch", "version": "v1", "kind": "Job"
    }  # fmt: skip
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
    spec = doc["components"]["schemas"]["io.k8s.api.batch.v1.JobSpec"]
    assert spec["properties"]["suspend"]["type"] == "boolean"
    assert spec["properties"]["template"]["$ref"] == (
        "#/components/schemas/io.k8s.api.core.v1.PodTemplateSpec"
    )
    status, _ = await get_json(emu, "/openapi/v3/apis/nosuch.io/v1")
    assert status == 404


async def test_openapi_v2_serves_json_and_refuses_protobuf_only(emu: KubeEmulator) -> None:
    status, doc = await get_json(emu, "/openapi/v2")
    assert status == 200 and doc["swagger"] == "2.0"
    job = doc["definitions"]["io.k8s.api.batch.v1.Job"]
    assert job["x-kubernetes-group-version-kind"] == [
        {"group": "batch", "version": "v1", "kind": "Job"}
    ]
    tree = "io.k8s.sigs.scheduling.v1beta1.ElasticQuotaTree"
    assert doc["definitions"][tree]["properties"]["spec"]["required"] == ["root"]  # the CRD's
    protobuf = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
    status, body = await get_json(emu, "/openapi/v2", accept=protobuf)
    assert (status, body["reason"]) == (406, "NotAcceptable")


# --------------------------------------------------------------------------- pods and tables


def _job(name: str, *, seconds: float | None, zone: str = "a") -> dict[str, Any]:
    annotations = {"usher.io/sim-duration": str(seconds)} if seconds is not None else {}
    return batch_job(
        name,
        "team",
        template=pod_template(container(), node_selector={"usher.io/zone": zone}),
        suspend=None,
        parallelism=2,
        completions=2,
        annotations=annotations,
    )


def _pods(emu: KubeEmulator) -> list[dict[str, Any]]:
    return emu.store.objects(resource("", "v1", "pods"))


async def _until(check: Callable[[], bool]) -> None:
    async def checked() -> bool:
        return check()

    assert await eventually(checked, timeout_s=10.0), "timed out"


async def test_the_kubelet_runs_a_jobs_pods_then_leaves_them_completed(emu: KubeEmulator) -> None:
    node = {"metadata": {"name": "node-a", "labels": {"usher.io/zone": "a"}}}
    emu.store.create(resource("", "v1", "nodes"), None, node)
    jobs = resource("batch", "v1", "jobs")
    created = emu.store.create(jobs, "team", _job("train", seconds=0.5))
    await _until(lambda: len(_pods(emu)) == 2)
    pods = _pods(emu)
    for pod in pods:
        assert pod["metadata"]["name"].startswith("train-")
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "train"
        [owner] = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "Job", created["metadata"]["uid"], True
        )  # fmt: skip
    await _until(lambda: all(p["status"]["phase"] == "Running" for p in _pods(emu)))
    running = _pods(emu)[0]
    assert running["spec"]["nodeName"] == "node-a"
    [container] = running["status"]["containerStatuses"]
    assert container["ready"] is True and "running" in container["state"]
    await _until(lambda: all(p["status"]["phase"] == "Succeeded" for p in _pods(emu)))
    [ended] = _pods(emu)[0]["status"]["containerStatuses"]
    assert ended["state"]["terminated"]["reason"] == "Completed" and ended["ready"] is False
    emu.store.delete(jobs, "team", "train")
    await _until(lambda: not _pods(emu))  # the garbage collector's part


async def test_suspending_a_job_deletes_its_pods_and_no_node_leaves_them_pending(
    emu: KubeEmulator,
) -> None:
    jobs = resource("batch", "v1", "jobs")
    emu.store.create(jobs, "team", _job("nowhere", seconds=None, zone="zzz"))
    await _until(lambda: len(_pods(emu)) == 2)
    await asyncio.sleep(0.2)
    for pod in _pods(emu):
        assert pod["status"]["phase"] == "Pending" and "nodeName" not in pod["spec"]
        [scheduled] = pod["status"]["conditions"]
        assert (scheduled["type"], scheduled["reason"]) == ("PodScheduled", "Unschedulable")
    job = emu.store.get(jobs, "team", "nowhere")
    job["spec"]["suspend"] = True
    emu.store.update(jobs, "team", "nowhere", job)
    await _until(lambda: not _pods(emu))


@needs_kubectl
async def test_kubectl_shows_the_printer_columns_of_jobs_and_pods(
    emu: KubeEmulator, tmp_path: Path
) -> None:
    node = {"metadata": {"name": "node-a", "labels": {"usher.io/zone": "a"}}}
    emu.store.create(resource("", "v1", "nodes"), None, node)
    emu.store.create(resource("batch", "v1", "jobs"), "team", _job("train", seconds=None))
    await _until(lambda: len(_pods(emu)) == 2)
    await _until(lambda: all(p["status"]["phase"] == "Running" for p in _pods(emu)))
    code, jobs = await kubectl(emu, tmp_path, "get", "jobs", "-n", "team")
    assert code == 0, jobs
    header, row = jobs.splitlines()
    assert header.split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert row.split()[:3] == ["train", "Running", "0/2"]
    code, pods = await kubectl(emu, tmp_path, "get", "pods", "-n", "team", "-o", "wide")
    assert code == 0, pods
    lines = pods.splitlines()
    assert lines[0].split()[:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    for line in lines[1:]:
        cells = line.split()
        assert cells[1:4] == ["1/1", "Running", "0"] and cells[6] == "node-a"


def test_durations_are_written_as_kubernetes_writes_them() -> None:
    cases = {0: "0s", 119: "119s", 125: "2m5s", 600: "10m", 3 * 3600 + 5 * 60: "3h5m",
             30 * 3600: "30h", 3 * 86400 + 4 * 3600: "3d4h", 20 * 86400: "20d"}  # fmt: skip
    assert {s: human_duration(s) for s in cases} == cases


async def test_a_restarted_kubelet_removes_the_pods_of_a_job_deleted_while_it_was_down(
    emu: KubeEmulator,
) -> None:
    node = {"metadata": {"name": "node-a", "labels": {"usher.io/zone": "a"}}}
    emu.store.create(resource("", "v1", "nodes"), None, node)
    jobs = resource("batch", "v1", "jobs")
    emu.store.create(jobs, "team", _job("gone", seconds=None))
    emu.store.create(jobs, "team", _job("kept", seconds=None))
    await _until(lambda: len(_pods(emu)) == 4)
    assert emu.kubelet is not None
    emu.kubelet.stop()
    emu.store.delete(jobs, "team", "gone")
    again = FakeKubelet(emu.store)
    again.start()
    try:
        await _until(lambda: len(_pods(emu)) == 2)
        await asyncio.sleep(0.2)  # and no pod is created twice for the job that stayed
        names = sorted(p["metadata"]["name"] for p in _pods(emu))
        assert len(names) == 2 and all(n.startswith("kept-") for n in names)
    finally:
        again.stop()
