"""The admission webhook, end to end: kubernetes_asyncio creates jobs through the emulator,
which calls the real webhook service over HTTPS (AdmissionReview v1) and applies its patch.

The serving certificate is made with `openssl` (the test is skipped without it) and is its own
CA, given to the webhook configuration as ``caBundle`` as cert-manager's injector would.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from services.common.settings import WebhookSettings
from services.webhook.service import serve
from tests.builders.manifests import batch_job, container, elastic_quota_tree, pod_template
from usher.local.kube_emulator import KubeEmulator, resource

OPENSSL = shutil.which("openssl")
SERVICE = ("usher-system", "usher-webhook")
HOST = "usher-webhook.usher-system.svc"
TREES = resource("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees")
NAMESPACES = resource("", "v1", "namespaces")
CONFIGS = resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations")


@pytest.fixture
def pem(tmp_path: Path) -> dict[str, Path]:
    if OPENSSL is None:
        pytest.skip("openssl not installed")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        [OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=usher-webhook", "-keyout", str(key),
         "-out", str(cert), "-addext", f"subjectAltName=DNS:{HOST},IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return {"cert": cert, "key": key}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tree() -> dict[str, Any]:
    leaf = {"name": "a", "max": {"cpu": "10"}, "namespaces": ["user-a"]}
    root = {"name": "root", "min": {"cpu": "10"}, "max": {"cpu": "10"}, "children": [leaf]}
    return elastic_quota_tree(root, name="tree")


def configuration(name: str, client_config: dict[str, Any], policy: str) -> dict[str, Any]:
    rules = [
        {"operations": ["CREATE"], "apiGroups": ["batch"], "apiVersions": ["v1"],
         "resources": ["jobs"], "scope": "Namespaced"},
        {"operations": ["CREATE"], "apiGroups": ["kubeflow.org"], "apiVersions": ["*"],
         "resources": ["tfjobs"]},
    ]  # fmt: skip
    system = {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
              "values": ["kube-system", "usher-system"]}  # fmt: skip
    webhook = {
        "name": f"{name}.usher.io",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": policy,
        "timeoutSeconds": 5,
        "clientConfig": client_config,
        "rules": rules,
        "namespaceSelector": {"matchExpressions": [system]},
    }
    return {"metadata": {"name": name}, "webhooks": [webhook]}


def job(name: str, suspend: bool | None = False) -> dict[str, Any]:
    return batch_job(name, template=pod_template(container(cpu="1")), suspend=suspend)


@asynccontextmanager
async def webhook(emu: KubeEmulator, pem: dict[str, Path]) -> AsyncIterator[int]:
    settings = WebhookSettings(
        kubeconfig=emu.kubeconfig_path, tls_cert=pem["cert"], tls_key=pem["key"], port=0,
        tree_ttl_s=0.0,
    )  # fmt: skip
    stop = asyncio.Event()
    ports: list[int] = []
    task = asyncio.create_task(serve(settings, stop, ports.append))
    try:
        while not ports:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        yield ports[0]
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


@asynccontextmanager
async def batch_api(emu: KubeEmulator) -> AsyncIterator[client.ApiClient]:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(emu.kubeconfig_path), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        yield api


@pytest.fixture
async def emu(tmp_path: Path) -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator(kubeconfig_path=tmp_path / "kubeconfig") as emulator:
        emulator.store.create(TREES, "kube-system", tree())
        labelled = {"metadata": {"name": "labelled", "labels": {"usher.io/managed": "true"}}}
        emulator.store.create(NAMESPACES, None, labelled)
        yield emulator


async def test_managed_jobs_are_created_suspended_through_the_webhook(
    emu: KubeEmulator, pem: dict[str, Path]
) -> None:
    bundle = base64.b64encode(pem["cert"].read_bytes()).decode()
    async with webhook(emu, pem) as port, batch_api(emu) as api:
        emu.admission.services[SERVICE] = f"127.0.0.1:{port}"
        service = {"namespace": SERVICE[0], "name": SERVICE[1], "path": "/mutate"}
        hook = {"service": service, "caBundle": bundle}
        emu.store.create(CONFIGS, None, configuration("usher", hook, "Fail"))
        batch = client.BatchV1Api(api)
        forced = await batch.create_namespaced_job("user-a", job("big"))
        unset = await batch.create_namespaced_job("user-a", job("unset", suspend=None))
        labelled = await batch.create_namespaced_job("labelled", job("lab"))
        free = await batch.create_namespaced_job("elsewhere", job("free"))
        custom = client.CustomObjectsApi(api)
        tf = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "tf"},
              "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {}}}}}  # fmt: skip
        tf_created = await custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", "user-a", "tfjobs", tf
        )
    assert (forced.spec.suspend, unset.spec.suspend, labelled.spec.suspend) == (True,) * 3
    assert free.spec.suspend is False  # no tree maps it, no label: not Usher's
    assert emu.store.get(resource("batch", "v1", "jobs"), "user-a", "big")["spec"]["suspend"]
    assert tf_created["spec"]["runPolicy"] == {"suspend": True}


async def test_failure_policy_decides_when_the_webhook_cannot_be_called(
    emu: KubeEmulator, pem: dict[str, Path]
) -> None:
    bundle = base64.b64encode(pem["cert"].read_bytes()).decode()
    nobody = {"url": f"https://127.0.0.1:{free_port()}/mutate", "caBundle": bundle}
    async with batch_api(emu) as api:
        batch = client.BatchV1Api(api)
        emu.store.create(CONFIGS, None, configuration("ignored", nobody, "Ignore"))
        passed = await batch.create_namespaced_job("user-a", job("passes"))
        emu.store.create(CONFIGS, None, configuration("strict", nobody, "Fail"))
        with pytest.raises(ApiException) as refused:
            await batch.create_namespaced_job("user-a", job("refused"))
        async with webhook(emu, pem) as port:
            # A server whose certificate the bundle does not vouch for is a failed call too.
            wrong = base64.b64encode(b"not a PEM bundle").decode()
            strict = {"url": f"https://127.0.0.1:{port}/mutate", "caBundle": wrong}
            emu.store.delete(CONFIGS, None, "strict")
            emu.store.create(CONFIGS, None, configuration("strict", strict, "Fail"))
            with pytest.raises(ApiException) as untrusted:
                await batch.create_namespaced_job("user-a", job("untrusted"))
    assert passed.spec.suspend is False  # Ignore: created as sent
    assert refused.value.status == 500
    message = json.loads(refused.value.body)["message"]
    assert message.startswith('Internal error occurred: failed calling webhook "strict.usher.io"')
    assert untrusted.value.status == 500
    assert "caBundle is not a PEM bundle" in json.loads(untrusted.value.body)["message"]
    assert emu.store.find(resource("batch", "v1", "jobs"), "user-a", "refused") is None
