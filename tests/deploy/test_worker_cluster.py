"""deploy/overlays/worker-cluster: what is installed in a worker cluster (M1) is its watcher
only, configured as that cluster's, with exactly the Kubernetes permissions a non-default
cluster's watcher calls (services/watcher/service.py skips the tree, the PriorityClasses and
the Queue objects there), and nothing of the manager (ledger, preemptor, dequeuers, database).
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml

from schemas import DEFAULT_CLUSTER, ClusterName, Zone
from services.common.settings import cluster_settings
from services.watcher.kinds import EVENTS, LIMIT_RANGES, NAMESPACES, NODES, PODS
from tests.deploy.rendered import DEPLOY, KUBECTL, Manifest, by_name, of_kind, render
from usher.adapters.nats.permissions import identities, watcher_name
from usher.adapters.nats.subjects import Subjects
from usher.core.kinds import FAMILIES, REJECTED

OVERLAY = DEPLOY / "overlays" / "worker-cluster"
CLUSTER = ClusterName("west")

Grants = dict[tuple[str, str], set[str]]

WORKER_CALLS: Grants = {
    # observe.py list + watch, carry_out.py get + merge patch + create (R12's next attempt)
    **{family.storage: {"get", "list", "watch", "patch", "create"} for family in FAMILIES},
    # observed only, to be rejected
    **{family.storage: {"list", "watch"} for family in REJECTED},
    NODES.storage: {"list", "watch"},
    LIMIT_RANGES.storage: {"list", "watch"},
    PODS.storage: {"list"},  # a failed job's, by its label
    EVENTS.storage: {"create"},  # carry_out.py and waits.py, on the job
    NAMESPACES.storage: {"get"},  # fleet.py's probe, of namespace `default` only
}
"""What a non-default cluster's watcher calls, by (group, resource)."""

DEFAULT_CLUSTER_ONLY = {
    ("scheduling.k8s.io", "priorityclasses"),  # PriorityClassObserver
    ("scheduling.sigs.k8s.io", "elasticquotatrees"),  # QuotaTreeObserver
    ("scheduling.sigs.k8s.io", "elasticquotatrees/status"),  # status.py
}
"""What the default cluster's watcher calls and a worker cluster's does not (the queues are
the default's Role in kube-queue)."""


@pytest.fixture(scope="module")
def worker() -> list[Manifest]:
    if KUBECTL is None:
        pytest.skip("kubectl (kustomize) not installed")
    return render(OVERLAY)


def _granted(role: Manifest) -> Grants:
    granted: Grants = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def _env(worker: list[Manifest]) -> dict[str, Any]:
    """The watcher's environment: its ConfigMap's data, then its own variables."""
    (deployment,) = of_kind(worker, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (source,) = container["envFrom"]
    env: dict[str, Any] = dict(by_name(worker, "ConfigMap")[source["configMapRef"]["name"]]["data"])
    env.update({variable["name"]: variable for variable in container["env"]})
    return env


def test_only_the_watcher_is_installed(worker: list[Manifest]) -> None:
    objects = {(m["kind"], m["metadata"]["name"]) for m in worker}
    assert objects == {
        ("Namespace", "usher-system"),
        ("ServiceAccount", "usher-watcher"),
        ("ClusterRole", "usher-watcher-worker"),
        ("ClusterRoleBinding", "usher-watcher-worker"),
        ("ConfigMap", "usher-settings"),
        ("ConfigMap", "usher-watcher-kubeconfig"),
        ("Service", "usher-watcher-metrics"),
        # the watcher's pod class: above the batch jobs of this cluster too
        ("PriorityClass", "usher-control-plane"),
        ("Deployment", "usher-watcher"),
        ("PodDisruptionBudget", "usher-watcher"),
        ("NetworkPolicy", "usher-default-deny"),
        ("NetworkPolicy", "usher-metrics-from-prometheus"),
        ("NetworkPolicy", "usher-to-nats-and-dns"),
        ("NetworkPolicy", "usher-watcher-to-apiserver"),
    }


def test_no_manager_service_nor_database_nor_crd(worker: list[Manifest]) -> None:
    components = {
        m["metadata"].get("labels", {}).get("app.kubernetes.io/component") for m in worker
    }
    assert components.isdisjoint({"ledger", "preemptor", "dequeuer", "migrate", "console"})
    rendered = yaml.safe_dump_all(worker)
    for manager_only in ("USHER_DATABASE", "postgres", "usher-pg", "USHER_ZONE", "kube-queue"):
        assert manager_only not in rendered, manager_only
    assert of_kind(worker, "CustomResourceDefinition") == []
    assert of_kind(worker, "Role") == [] and of_kind(worker, "RoleBinding") == []


def test_every_manifest_is_valid_kubernetes(worker: list[Manifest]) -> None:
    version = kubernetes_validate.latest_version()
    for manifest in worker:
        assert version.startswith(kubernetes_validate.validate(manifest, version, strict=True))


def test_the_watcher_grants_exactly_what_a_worker_watcher_calls(worker: list[Manifest]) -> None:
    (role,) = of_kind(worker, "ClusterRole")
    assert _granted(role) == WORKER_CALLS
    # The probe reads one namespace, by name; no other rule is narrowed or widened by names.
    named = [rule for rule in role["rules"] if "resourceNames" in rule]
    assert named == [
        {
            "apiGroups": [""],
            "resources": ["namespaces"],
            "verbs": ["get"],
            "resourceNames": ["default"],
        }
    ]
    (binding,) = of_kind(worker, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "usher-watcher", "namespace": "usher-system"}
    ]


def test_the_worker_grants_the_default_watchers_rules_minus_the_tree_and_classes(
    worker: list[Manifest],
) -> None:
    """Held to the base: a verb the base's watcher gains for the job kinds, nodes, pods or
    events shows here too; what only the default cluster's watcher does is left out."""
    (worker_role,) = of_kind(worker, "ClusterRole")
    base = by_name(render(DEPLOY / "base"), "ClusterRole")["usher-watcher"]
    expected = {
        pair: verbs for pair, verbs in _granted(base).items() if pair not in DEFAULT_CLUSTER_ONLY
    }
    expected[NAMESPACES.storage] = {"get"}
    assert _granted(worker_role) == expected


def test_the_watcher_is_its_clusters_with_its_own_nats_identity(worker: list[Manifest]) -> None:
    env = _env(worker)
    settings = cluster_settings({k: v for k, v in env.items() if isinstance(v, str)})
    assert settings["cluster"] == CLUSTER != DEFAULT_CLUSTER
    assert settings["clusters"][CLUSTER] == (Zone("west"),)
    # Its NATS URL is the Secret of the identity `watcher-west`, a user the manager's NATS has
    # once rendered with this cluster (usher.adapters.nats.permissions).
    secret = env["USHER_NATS_URL"]["valueFrom"]["secretKeyRef"]
    name = watcher_name(CLUSTER)
    assert secret == {"name": f"usher-nats-{name}", "key": "url"}
    users = {i.user for i in identities(Subjects("usher"), clusters=settings["clusters"])}
    assert f"usher-{name}" in users


def test_nats_is_reached_outside_the_cluster(worker: list[Manifest]) -> None:
    """The manager's NATS is not a pod of this cluster: the egress names an address."""
    policy = by_name(worker, "NetworkPolicy")["usher-to-nats-and-dns"]
    assert policy["spec"]["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/component": "watcher"}
    }
    to_nats = policy["spec"]["egress"][0]
    assert to_nats["ports"] == [{"protocol": "TCP", "port": 4222}]
    assert [set(peer) for peer in to_nats["to"]] == [{"ipBlock"}]
