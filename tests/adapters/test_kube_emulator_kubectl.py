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
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from usher.adapters.kube_emulator import KubeEmulator

REPO = Path(__file__).resolve().parents[2]
SEED_PI = REPO / "usher" / "demo" / "seed-pi.yaml"
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
    code, out = await kubectl(emu, tmp_path, "create", "-f", str(SEED_PI))
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
    misspelt = SEED_PI.read_text().replace("  parallelism: 6", "  parallelizm: 6")
    code, out = await kubectl(emu, tmp_path, "create", "-f", "-", stdin=misspelt)
    assert code == 1
    assert 'strict decoding error: unknown field "spec.parallelizm"' in out
    code, listed = await kubectl(emu, tmp_path, "get", "jobs", "-A", "-o", "name")
    assert (code, listed) == (0, "")  # nothing was created
    # Told not to validate (fieldValidation=Ignore), the server creates it.
    ignored = await kubectl(emu, tmp_path, "create", "--validate=false", "-f", "-", stdin=misspelt)
    assert ignored[0] == 0, ignored[1]


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
    assert doc["definitions"][tree]["x-kubernetes-preserve-unknown-fields"] is True
    protobuf = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
    status, body = await get_json(emu, "/openapi/v2", accept=protobuf)
    assert (status, body["reason"]) == (406, "NotAcceptable")
