"""deploy/webhook: the admission webhook's manifests render, validate and fit together.

Rendering needs `kubectl` (its built-in kustomize). cert-manager's kinds are not in the
Kubernetes schemas, so they are checked by what the others refer to in them.
"""

from __future__ import annotations

import kubernetes_validate
import pytest

from services.watcher.kinds import JOB_FAMILIES
from tests.deploy.rendered import DEPLOY, KUBECTL, Manifest, by_name, render

CERT_MANAGER = "cert-manager.io/v1"


@pytest.fixture(scope="module")
def webhook() -> list[Manifest]:
    if KUBECTL is None:
        pytest.skip("kubectl (kustomize) not installed")
    return render(DEPLOY / "webhook")


def test_the_kubernetes_manifests_are_valid(webhook: list[Manifest]) -> None:
    version = kubernetes_validate.latest_version()
    native = [m for m in webhook if m["apiVersion"] != CERT_MANAGER]
    assert {m["kind"] for m in native} == {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service",
        "NetworkPolicy", "MutatingWebhookConfiguration", "PodDisruptionBudget",
    }  # fmt: skip
    for manifest in native:
        kubernetes_validate.validate(manifest, version, strict=True)


def test_every_kind_usher_admits_and_only_those_is_sent_on_create_and_update(
    webhook: list[Manifest],
) -> None:
    (configuration,) = by_name(webhook, "MutatingWebhookConfiguration").values()
    (hook,) = configuration["webhooks"]
    sent = {
        (group, version, plural)
        for rule in hook["rules"]
        for group in rule["apiGroups"]
        for version in rule["apiVersions"]
        for plural in rule["resources"]
    }
    admitted = {(f.group, v, f.plural) for f in JOB_FAMILIES for v in f.versions}
    assert sent == admitted
    # Created suspended; updated only without growing while it runs (R16): every rule both.
    assert all(sorted(rule["operations"]) == ["CREATE", "UPDATE"] for rule in hook["rules"])
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    excluded, opted_out = hook["namespaceSelector"]["matchExpressions"]
    assert excluded["operator"] == "NotIn" and {"kube-system", "usher-system"} <= set(
        excluded["values"]
    )
    # And by a label (docs/how-to/install.md): usher.io/webhook=skip.
    assert opted_out == {"key": "usher.io/webhook", "operator": "NotIn", "values": ["skip"]}


def test_tls_comes_from_cert_manager_and_reaches_both_ends(webhook: list[Manifest]) -> None:
    (configuration,) = by_name(webhook, "MutatingWebhookConfiguration").values()
    certificate = by_name(webhook, "Certificate")["usher-webhook"]
    # Signed by a CA of its own, so a renewal (a new key) leaves the caBundle as it was.
    issuer = by_name(webhook, "Issuer")[certificate["spec"]["issuerRef"]["name"]]
    ca = by_name(webhook, "Certificate")[issuer["spec"]["ca"]["secretName"]]
    assert ca["spec"]["isCA"] is True and ca["spec"]["secretName"] == ca["metadata"]["name"]
    root = by_name(webhook, "Issuer")[ca["spec"]["issuerRef"]["name"]]
    assert root["spec"] == {"selfSigned": {}}
    assert certificate["spec"]["privateKey"]["rotationPolicy"] == "Always"
    cert_meta = certificate["metadata"]
    inject = configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert inject == f"{cert_meta['namespace']}/{cert_meta['name']}"
    target = configuration["webhooks"][0]["clientConfig"]["service"]
    assert f"{target['name']}.{target['namespace']}.svc" in certificate["spec"]["dnsNames"]
    service = by_name(webhook, "Service")[target["name"]]
    deployment = by_name(webhook, "Deployment")["usher-webhook"]
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    assert container["args"] == ["run", "webhook"]
    assert service["spec"]["ports"][0]["targetPort"] in [p["name"] for p in container["ports"]]
    secrets = {
        v["name"]: v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v
    }
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    env = {e["name"]: e["value"] for e in container["env"]}
    (tls_volume,) = [name for name, secret in secrets.items()
                     if secret == certificate["spec"]["secretName"]]  # fmt: skip
    assert env["USHER_WEBHOOK_TLS_CERT"] == f"{mounts[tls_volume]}/tls.crt"
    assert env["USHER_WEBHOOK_TLS_KEY"] == f"{mounts[tls_volume]}/tls.key"


def test_the_webhook_reads_only_namespaces_and_trees(webhook: list[Manifest]) -> None:
    role = by_name(webhook, "ClusterRole")["usher-webhook"]
    rules = [(tuple(r["apiGroups"]), tuple(r["resources"]), r["verbs"]) for r in role["rules"]]
    assert rules == [
        (("",), ("namespaces",), ["get"]),
        (("scheduling.sigs.k8s.io",), ("elasticquotatrees",), ["list"]),
    ]
    (binding,) = by_name(webhook, "ClusterRoleBinding").values()
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "usher-webhook", "namespace": "usher-system"}
    ]
