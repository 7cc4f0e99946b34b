"""The admission webhook, end to end: kubernetes_asyncio creates jobs through the emulator,
which calls the real webhook service over HTTPS (AdmissionReview v1) and applies its patch.

The serving certificate is made with `openssl` (the test is skipped without it) and is its own
CA, given to the webhook configuration as ``caBundle`` as cert-manager's injector would. The
rotation test signs two certificates (two keys) with one CA, as deploy/webhook's CA Issuer
does, and swaps them the way kubelet updates a Secret volume (its ``..data`` link).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from services.common.settings import WebhookSettings
from services.webhook.service import ServingCertificate, serve
from tests.builders.manifests import batch_job, container, elastic_quota_tree, pod_template
from usher.adapters.logs import get_logger
from usher.local.cluster import webhook_configuration
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


def configuration(
    name: str, client_config: dict[str, Any], policy: str, operations: tuple[str, ...] = ("CREATE",)
) -> dict[str, Any]:
    rules = [
        {"operations": list(operations), "apiGroups": ["batch"], "apiVersions": ["v1"],
         "resources": ["jobs"], "scope": "Namespaced"},
        {"operations": list(operations), "apiGroups": ["kubeflow.org"], "apiVersions": ["*"],
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
async def webhook(
    emu: KubeEmulator, pem: dict[str, Path], reload_s: float = 10.0
) -> AsyncIterator[int]:
    settings = WebhookSettings(
        kubeconfig=emu.kubeconfig_path, tls_cert=pem["cert"], tls_key=pem["key"], port=0,
        tree_ttl_s=0.0, tls_reload_s=reload_s,
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


async def test_a_namespace_labelled_skip_is_never_sent(emu: KubeEmulator) -> None:
    """The deploy's selector (as the local stack registers it): with no webhook answering,
    failurePolicy Fail refuses a job, except in a namespace labelled usher.io/webhook=skip."""
    nobody = f"https://127.0.0.1:{free_port()}/mutate"
    emu.store.create(CONFIGS, None, webhook_configuration(nobody, b"not a PEM bundle"))
    skipped = {"metadata": {"name": "platform", "labels": {"usher.io/webhook": "skip"}}}
    emu.store.create(NAMESPACES, None, skipped)
    async with batch_api(emu) as api:
        batch = client.BatchV1Api(api)
        created = await batch.create_namespaced_job("platform", job("critical"))
        with pytest.raises(ApiException) as refused:
            await batch.create_namespaced_job("user-a", job("waits"))
    assert created.spec.suspend is False
    assert refused.value.status == 500


CPU = "/spec/template/spec/containers/0/resources/requests/cpu"
FORBIDDEN = (
    'admission webhook "usher.usher.io" denied the request: {field}: Forbidden: field is '
    "immutable while the Job is not suspended"
)


def refusal(caught: pytest.ExceptionInfo[ApiException]) -> tuple[int, str, str]:
    body = json.loads(caught.value.body)
    return caught.value.status, body["reason"], body["message"]


async def test_a_running_job_may_not_grow_through_any_update(
    emu: KubeEmulator, pem: dict[str, Path]
) -> None:
    """R16: PATCH (JSON and merge) and PUT of a managed Job that is not suspended are refused
    403 naming the field when they change its requests or pod count; what leaves its admitted
    shape alone, a suspended job, an unmanaged one and the status subresource pass."""
    bundle = base64.b64encode(pem["cert"].read_bytes()).decode()
    jobs = resource("batch", "v1", "jobs")
    async with webhook(emu, pem) as port, batch_api(emu) as api:
        emu.admission.services[SERVICE] = f"127.0.0.1:{port}"
        service = {"namespace": SERVICE[0], "name": SERVICE[1], "path": "/mutate"}
        hook = {"service": service, "caBundle": bundle}
        both = ("CREATE", "UPDATE")
        emu.store.create(CONFIGS, None, configuration("usher", hook, "Fail", both))
        batch = client.BatchV1Api(api)
        ten = batch_job(
            "run", template=pod_template(container(cpu="1")), suspend=False, completions=10
        )  # ten completions, one pod at a time (parallelism defaults to 1)
        created = await batch.create_namespaced_job("user-a", ten)
        # The admission is carried out (the old object is suspended: anything goes).
        await batch.patch_namespaced_job("run", "user-a", {"spec": {"suspend": False}})
        with pytest.raises(ApiException) as grown:
            await batch.patch_namespaced_job(
                "run", "user-a", [{"op": "replace", "path": CPU, "value": "95"}]
            )
        with pytest.raises(ApiException) as widened:
            await batch.patch_namespaced_job("run", "user-a", {"spec": {"parallelism": 5}})
        whole = await batch.read_namespaced_job("run", "user-a")
        whole.spec.template.spec.containers[0].resources.requests["cpu"] = "95"
        with pytest.raises(ApiException) as replaced:
            await batch.replace_namespaced_job("run", "user-a", whole)
        stored = emu.store.get(jobs, "user-a", "run")
        # What leaves the admitted shape alone passes; so does the status subresource.
        free = {"spec": {"activeDeadlineSeconds": 600}, "metadata": {"labels": {"team": "x"}}}
        await batch.patch_namespaced_job("run", "user-a", free)
        await batch.patch_namespaced_job_status("run", "user-a", {"status": {"active": 1}})
        # Suspended (by whoever), it may change freely: it is sized afresh when admitted.
        await batch.patch_namespaced_job("run", "user-a", {"spec": {"suspend": True}})
        await batch.patch_namespaced_job(
            "run", "user-a", [{"op": "replace", "path": CPU, "value": "95"}]
        )
        await batch.create_namespaced_job("elsewhere", job("free"))
        await batch.patch_namespaced_job("free", "elsewhere", {"spec": {"parallelism": 5}})
    assert created.spec.suspend is True  # CREATE still goes through the same webhook
    field = "spec.template.spec.containers[0].resources.requests.cpu"
    assert refusal(grown) == (403, "Forbidden", FORBIDDEN.format(field=field) + _ADVICE)
    pods = " (pods main: 1 -> main: 5)"
    assert refusal(widened) == (
        403, "Forbidden", FORBIDDEN.format(field="spec.parallelism") + pods + _ADVICE
    )  # fmt: skip
    assert refusal(replaced)[:2] == (403, "Forbidden")
    assert field in refusal(replaced)[2]
    spec = stored["spec"]
    assert spec.get("parallelism", 1) == 1  # nothing refused stored
    assert spec["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "1"
    final = emu.store.get(jobs, "user-a", "run")
    assert final["spec"]["activeDeadlineSeconds"] == 600
    assert final["metadata"]["labels"]["team"] == "x"
    assert (
        final["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "95"
    )
    assert emu.store.get(jobs, "elsewhere", "free")["spec"]["parallelism"] == 5


_ADVICE = "; suspend it first, or create a new job"


# ---------------------------------------------------------------------- certificate rotation


def _openssl(*args: str) -> None:
    assert OPENSSL is not None
    subprocess.run([OPENSSL, *args], check=True, capture_output=True)


@pytest.fixture
def signed(tmp_path: Path) -> dict[str, Path]:
    """A CA and two serving certificates it signed, each with its own key (``a``, ``b``)."""
    if OPENSSL is None:
        pytest.skip("openssl not installed")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    ca, ca_key = tmp_path / "ca.crt", tmp_path / "ca.key"
    _openssl("req", "-x509", *ec, "-days", "1", "-subj", "/CN=usher-webhook-ca",
             "-keyout", str(ca_key), "-out", str(ca))  # fmt: skip
    files = {"ca": ca}
    for name in ("a", "b"):
        key, csr, cert = (tmp_path / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        _openssl("req", "-new", *ec, "-subj", f"/CN=usher-webhook-{name}", "-keyout", str(key),
                 "-out", str(csr))  # fmt: skip
        extensions = tmp_path / f"{name}.ext"
        extensions.write_text(f"subjectAltName=DNS:{HOST},IP:127.0.0.1\n")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
                 "-CAcreateserial", "-days", "1", "-extfile", str(extensions),
                 "-out", str(cert))  # fmt: skip
        files[f"{name}.crt"], files[f"{name}.key"] = cert, key
    return files


def mount(volume: Path, version: str, cert: Path, key: Path) -> None:
    """Put ``cert`` + ``key`` in ``volume`` as kubelet updates a Secret volume: a new
    ``..<version>`` folder, then the ``..data`` link swapped to it in one rename; ``tls.crt``
    and ``tls.key`` are links through ``..data``."""
    folder = volume / f"..{version}"
    folder.mkdir(parents=True)
    shutil.copy(cert, folder / "tls.crt")
    shutil.copy(key, folder / "tls.key")
    (volume / "..data_tmp").symlink_to(folder.name)
    os.replace(volume / "..data_tmp", volume / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (volume / name).is_symlink():
            (volume / name).symlink_to(f"..data/{name}")


async def served(port: int, ca: Path) -> bytes:
    """The certificate (DER) the webhook serves to a new connection that trusts ``ca`` only."""
    context = ssl.create_default_context(cafile=str(ca))
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True)
        assert der is not None
        return bytes(der)
    finally:
        writer.close()


def der(cert: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


async def test_a_renewed_certificate_is_served_while_requests_keep_succeeding(
    emu: KubeEmulator, signed: dict[str, Path], tmp_path: Path
) -> None:
    """cert-manager renews the certificate with a new key; kubelet swaps the files under the
    running webhook. Every job created meanwhile goes through the webhook (failurePolicy Fail,
    trusting the CA only) and comes back suspended, and new connections get the new
    certificate without a restart."""
    volume = tmp_path / "tls"
    mount(volume, "2026_01_01", signed["a.crt"], signed["a.key"])
    pem = {"cert": volume / "tls.crt", "key": volume / "tls.key"}
    bundle = base64.b64encode(signed["ca"].read_bytes()).decode()
    created: list[bool] = []
    async with webhook(emu, pem, reload_s=0.05) as port, batch_api(emu) as api:
        emu.admission.services[SERVICE] = f"127.0.0.1:{port}"
        service = {"namespace": SERVICE[0], "name": SERVICE[1], "path": "/mutate"}
        hook = {"service": service, "caBundle": bundle}
        emu.store.create(CONFIGS, None, configuration("usher", hook, "Fail"))
        batch = client.BatchV1Api(api)

        async def create_one() -> None:
            made = await batch.create_namespaced_job("user-a", job(f"j{len(created)}"))
            created.append(made.spec.suspend is True)

        await create_one()
        before = await served(port, signed["ca"])
        mount(volume, "2026_02_01", signed["b.crt"], signed["b.key"])

        async def until_renewed() -> bytes:
            while (now := await served(port, signed["ca"])) == before:
                await create_one()
            return now

        after = await asyncio.wait_for(until_renewed(), 60)
        await create_one()
        last = await served(port, signed["ca"])
    assert before == der(signed["a.crt"])
    assert after == last == der(signed["b.crt"])
    assert len(created) >= 2 and all(created)


def test_a_pair_that_does_not_load_keeps_the_last_good_one(
    signed: dict[str, Path], tmp_path: Path
) -> None:
    """A certificate with the old key (a half-finished renewal) is not served: the last good
    pair stays until a matching one arrives."""
    volume = tmp_path / "tls"
    mount(volume, "v1", signed["a.crt"], signed["a.key"])
    certificate = ServingCertificate(volume / "tls.crt", volume / "tls.key", get_logger())
    first = certificate.current
    assert certificate.reload_if_changed() is False  # nothing changed
    mount(volume, "v2", signed["b.crt"], signed["a.key"])
    assert certificate.reload_if_changed() is False
    assert certificate.current is first
    mount(volume, "v3", signed["b.crt"], signed["b.key"])
    assert certificate.reload_if_changed() is True
    assert certificate.current is not first
