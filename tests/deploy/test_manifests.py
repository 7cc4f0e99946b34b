"""deploy/: the kustomizations render, validate offline and grant no more than needed.

Rendering needs `kubectl` (its built-in kustomize); the tests that need it are skipped
without it. Validation uses the `kubernetes-validate` schemas (no cluster).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
import jsonschema
import kubernetes_validate
import pytest
import yaml
from sqlalchemy.engine import make_url

from tests.deploy.rendered import DEPLOY, KUBECTL, Manifest, by_name, of_kind, render

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl (kustomize) not installed")


@pytest.fixture(scope="module")
def two_zones() -> list[Manifest]:
    if KUBECTL is None:
        pytest.skip("kubectl (kustomize) not installed")
    return render(DEPLOY / "overlays" / "two-zones")


@pytest.fixture(scope="module")
def migrate() -> list[Manifest]:
    if KUBECTL is None:
        pytest.skip("kubectl (kustomize) not installed")
    return render(DEPLOY / "migrate")


def pod_spec(workload: Manifest) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


# ---------------------------------------------------------------------- schemas


EXPECTED_KINDS = {
    "apps/v1/Deployment",
    "policy/v1/PodDisruptionBudget",
    "v1/ServiceAccount",
    "networking.k8s.io/v1/NetworkPolicy",
    "v1/Namespace",
    "apiextensions.k8s.io/v1/CustomResourceDefinition",
    "v1/ConfigMap",
    "rbac.authorization.k8s.io/v1/Role",
    "rbac.authorization.k8s.io/v1/ClusterRole",
    "rbac.authorization.k8s.io/v1/RoleBinding",
    "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
    "batch/v1/Job",
    "v1/Secret",
    "v1/Service",
    "scheduling.k8s.io/v1/PriorityClass",
}


def test_every_rendered_manifest_is_valid_kubernetes(
    two_zones: list[Manifest], migrate: list[Manifest]
) -> None:
    examples = [d for d in yaml.safe_load_all((DEPLOY / "secrets.example.yaml").read_text()) if d]
    version = kubernetes_validate.latest_version()
    checked: list[str] = []
    for manifest in two_zones + migrate + examples:
        # Raises for an invalid manifest, and for a kind it has no schema for (none skipped).
        assert version.startswith(kubernetes_validate.validate(manifest, version, strict=True))
        checked.append(f"{manifest['apiVersion']}/{manifest['kind']}")
    assert len(checked) == len(two_zones) + len(migrate) + len(examples) > 30
    assert set(checked) == EXPECTED_KINDS


def test_the_validation_refuses_a_broken_manifest(two_zones: list[Manifest]) -> None:
    """The check above can fail: a Deployment with a mistyped field is refused, by name."""
    deployment = json.loads(json.dumps(of_kind(two_zones, "Deployment")[0]))
    deployment["spec"]["replicas"] = "two"
    deployment["spec"]["template"]["spec"]["containerz"] = []
    version = kubernetes_validate.latest_version()
    with pytest.raises(kubernetes_validate.ValidationError) as refused:
        kubernetes_validate.validate(deployment, version, strict=True)
    assert "replicas" in str(refused.value) or "containerz" in str(refused.value)


def test_the_crds_are_apiextensions_v1_with_status(two_zones: list[Manifest]) -> None:
    crds = by_name(two_zones, "CustomResourceDefinition")
    assert set(crds) == {"elasticquotatrees.scheduling.sigs.k8s.io", "queues.scheduling.x-k8s.io"}
    for crd in crds.values():
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        (version,) = crd["spec"]["versions"]
        assert version["subresources"] == {"status": {}}
    queue = crds["queues.scheduling.x-k8s.io"]["spec"]["versions"][0]
    assert queue["name"] == "v1alpha1"
    assert "Policy" in [column["name"] for column in queue["additionalPrinterColumns"]]


def _tree_schema(two_zones: list[Manifest]) -> dict[str, Any]:
    crd = by_name(two_zones, "CustomResourceDefinition")["elasticquotatrees.scheduling.sigs.k8s.io"]
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1beta1" and crd["spec"]["scope"] == "Namespaced"
    return version["schema"]["openAPIV3Schema"]


def _tree_errors(two_zones: list[Manifest], tree: Any) -> list[tuple[str, str]]:
    """(JSON path, failed keyword) of every error the CRD's schema finds in ``tree``."""
    validator = jsonschema.Draft202012Validator(_tree_schema(two_zones))
    return sorted(
        (".".join(str(p) for p in error.absolute_path), str(error.validator))
        for error in validator.iter_errors(tree)
    )


def test_the_tree_crd_accepts_the_walkthrough_tree(two_zones: list[Manifest]) -> None:
    tree = yaml.safe_load((REPO / "usher" / "demo" / "walkthrough-tree.yaml").read_text())
    tree["spec"]["root"]["attributes"] = {"usher.io/within-quota": "LowerPriority"}
    tree["spec"]["root"]["children"][0]["min"]["cpu"] = 60  # an integer quantity
    assert _tree_errors(two_zones, tree) == []
    # The schema reaches every level kube-queue's walkthrough uses: one wrong value at each
    # is named.
    tree["spec"]["root"]["max"]["memory"] = "lots"
    tree["spec"]["root"]["children"][1]["namespaces"] = "user-c"
    tree["spec"]["root"]["children"][1]["min"]["nvidia.com/gpu"] = [1]
    assert _tree_errors(two_zones, tree) == [
        ("spec.root.children.1.min.nvidia.com/gpu", "anyOf"),
        ("spec.root.children.1.namespaces", "type"),
        ("spec.root.max.memory", "pattern"),
    ]


@pytest.mark.parametrize(
    ("broken", "named"),
    [
        ({"root": {"min": {"cpu": "1"}}}, ("spec.root", "required")),  # no name
        ({"root": {"name": "r", "max": {"cpu": "lots"}}}, ("spec.root.max.cpu", "pattern")),
        ({"root": {"name": "r", "namespaces": "user-a"}}, ("spec.root.namespaces", "type")),
        (
            {"root": {"name": "r", "attributes": {"usher.io/within-quota": 1}}},
            ("spec.root.attributes.usher.io/within-quota", "type"),
        ),
        (
            {"root": {"name": "r", "children": [{"name": "c", "min": {"cpu": [1]}}]}},
            ("spec.root.children.0.min.cpu", "anyOf"),
        ),
    ],
)
def test_the_tree_crd_refuses_malformed_trees(
    two_zones: list[Manifest], broken: Any, named: tuple[str, str]
) -> None:
    tree = {"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
            "metadata": {"name": "t"}, "spec": broken}  # fmt: skip
    assert _tree_errors(two_zones, tree) == [named]


# ---------------------------------------------------------------------- least privilege

WATCHER_SA = {"kind": "ServiceAccount", "name": "usher-watcher", "namespace": "usher-system"}
JOB_VERBS = ["get", "list", "watch", "patch", "create"]  # create: a retry (R12)
EXPECTED_CLUSTER_RULES = [
    (("batch",), ("jobs",), JOB_VERBS),
    (("kubeflow.org",), ("tfjobs", "pytorchjobs", "mpijobs"), JOB_VERBS),
    (("kubeflow.org",), ("xgboostjobs", "paddlejobs", "mxjobs"), ["list", "watch"]),
    (("ray.io",), ("rayjobs",), JOB_VERBS),
    (("jobset.x-k8s.io",), ("jobsets",), JOB_VERBS),
    (("sparkoperator.k8s.io",), ("sparkapplications",), JOB_VERBS),
    (("argoproj.io",), ("workflows",), JOB_VERBS),
    (("",), ("nodes",), ["list", "watch"]),
    (("",), ("limitranges",), ["list", "watch"]),
    (("",), ("pods",), ["list"]),  # a failed job's pods, by its label: their terminations
    (("scheduling.k8s.io",), ("priorityclasses",), ["list", "watch"]),
    (("scheduling.sigs.k8s.io",), ("elasticquotatrees",), ["get", "list", "watch"]),
    (("scheduling.sigs.k8s.io",), ("elasticquotatrees/status",), ["patch"]),
    (("",), ("events",), ["create"]),  # a Warning Event when a tree is rejected
]
EXPECTED_QUEUE_RULES = [
    (("scheduling.x-k8s.io",), ("queues",), ["create", "get", "list", "patch", "delete"]),
    (("scheduling.x-k8s.io",), ("queues/status",), ["patch"]),
]


def _rules(role: Manifest) -> list[tuple[tuple[str, ...], tuple[str, ...], list[str]]]:
    return [(tuple(r["apiGroups"]), tuple(r["resources"]), r["verbs"]) for r in role["rules"]]


def test_only_the_watcher_is_bound_to_any_role(two_zones: list[Manifest]) -> None:
    bindings = of_kind(two_zones, "RoleBinding") + of_kind(two_zones, "ClusterRoleBinding")
    assert {(b["kind"], b["roleRef"]["name"]) for b in bindings} == {
        ("ClusterRoleBinding", "usher-watcher"),
        ("RoleBinding", "usher-watcher-queues"),
    }
    for binding in bindings:
        assert binding["subjects"] == [WATCHER_SA]


def test_the_watcher_gets_exactly_the_verbs_it_uses(two_zones: list[Manifest]) -> None:
    (cluster_role,) = of_kind(two_zones, "ClusterRole")
    (role,) = of_kind(two_zones, "Role")
    assert _rules(cluster_role) == EXPECTED_CLUSTER_RULES
    assert role["metadata"]["namespace"] == "kube-queue"
    assert _rules(role) == EXPECTED_QUEUE_RULES
    text = json.dumps([cluster_role["rules"], role["rules"]])
    assert "*" not in text and "secrets" not in text


def test_only_the_watcher_has_a_service_account_token(two_zones: list[Manifest]) -> None:
    for name, account in by_name(two_zones, "ServiceAccount").items():
        assert account.get("automountServiceAccountToken", True) is (name == "usher-watcher")
    for name, deployment in by_name(two_zones, "Deployment").items():
        spec = pod_spec(deployment)
        assert spec["automountServiceAccountToken"] is (name == "usher-watcher")
        assert spec["serviceAccountName"] == "usher-" + name.split("-")[1]


# ---------------------------------------------------------------------- workloads


def _containers(manifests: list[Manifest]) -> list[tuple[Manifest, dict[str, Any]]]:
    workloads = of_kind(manifests, "Deployment") + of_kind(manifests, "Job")
    return [(w, c) for w in workloads for c in pod_spec(w)["containers"]]


def test_every_container_is_locked_down(two_zones: list[Manifest], migrate: list[Manifest]) -> None:
    for workload, container in _containers(two_zones + migrate):
        pod = pod_spec(workload)["securityContext"]
        assert pod["runAsNonRoot"] is True
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert container["resources"]["requests"] and container["resources"]["limits"]


def test_every_service_serves_probes_on_its_metrics_port(two_zones: list[Manifest]) -> None:
    settings = by_name(two_zones, "ConfigMap")["usher-settings"]["data"]
    assert settings["USHER_METRICS_PORT"] == "9102"
    for deployment in of_kind(two_zones, "Deployment"):
        (container,) = pod_spec(deployment)["containers"]
        assert container["ports"] == [{"name": "metrics", "containerPort": 9102}]
        assert container["envFrom"] == [{"configMapRef": {"name": "usher-settings"}}]
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_every_deployment_has_a_disruption_budget(two_zones: list[Manifest]) -> None:
    budgets = by_name(two_zones, "PodDisruptionBudget")
    for name, deployment in by_name(two_zones, "Deployment").items():
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert budgets[name]["spec"]["selector"]["matchLabels"] == selector


ELECTED = {"usher-ledger", "usher-preemptor", "usher-dequeuer-default", "usher-dequeuer-a",
           "usher-dequeuer-b"}  # fmt: skip


def test_elected_roles_run_a_standby_and_roll_without_a_gap(two_zones: list[Manifest]) -> None:
    settings = by_name(two_zones, "ConfigMap")["usher-settings"]["data"]
    assert settings["USHER_LEADER_ELECTION"] == "on"
    deployments = by_name(two_zones, "Deployment")
    budgets = by_name(two_zones, "PodDisruptionBudget")
    assert ELECTED | {"usher-watcher"} == set(deployments)
    for name in ELECTED:
        spec = deployments[name]["spec"]
        assert spec["replicas"] == 2
        assert spec["strategy"] == {
            "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}
        }  # fmt: skip
        assert budgets[name]["spec"]["minAvailable"] == 1
        assert "maxUnavailable" not in budgets[name]["spec"]


def test_the_watcher_runs_alone_and_is_recreated(two_zones: list[Manifest]) -> None:
    spec = by_name(two_zones, "Deployment")["usher-watcher"]["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    budget = by_name(two_zones, "PodDisruptionBudget")["usher-watcher"]["spec"]
    assert budget["maxUnavailable"] == 1  # a drain may evict it: it resumes from the log


def test_two_zones_run_one_dequeuer_deployment_each_plus_default(two_zones: list[Manifest]) -> None:
    deployments = by_name(two_zones, "Deployment")
    assert set(deployments) == {
        "usher-watcher", "usher-ledger", "usher-preemptor",
        "usher-dequeuer-default", "usher-dequeuer-a", "usher-dequeuer-b",
    }  # fmt: skip
    for zone in ("default", "a", "b"):
        deployment = deployments[f"usher-dequeuer-{zone}"]
        assert deployment["spec"]["selector"]["matchLabels"]["usher.io/zone"] == zone
        env = {e["name"]: e for e in pod_spec(deployment)["containers"][0]["env"]}
        assert env["USHER_ZONE"]["value"] == zone
        secret = env["USHER_NATS_URL"]["valueFrom"]["secretKeyRef"]["name"]
        assert secret == f"usher-nats-dequeuer-{zone}"


def test_the_watcher_reads_an_in_cluster_kubeconfig(two_zones: list[Manifest]) -> None:
    watcher = by_name(two_zones, "Deployment")["usher-watcher"]
    (container,) = pod_spec(watcher)["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "kubeconfig"]
    assert env["USHER_KUBECONFIG"] == f"{mount['mountPath']}/kubeconfig"
    data = by_name(two_zones, "ConfigMap")["usher-watcher-kubeconfig"]["data"]["kubeconfig"]
    config = yaml.safe_load(data)
    secrets = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert config["users"][0]["user"] == {"tokenFile": f"{secrets}/token"}
    assert config["clusters"][0]["cluster"] == {
        "server": "https://kubernetes.default.svc",
        "certificate-authority": f"{secrets}/ca.crt",
    }


def test_the_network_policies_deny_by_default(two_zones: list[Manifest]) -> None:
    policies = by_name(two_zones, "NetworkPolicy")
    deny = policies["usher-default-deny"]["spec"]
    assert deny["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in deny
    (scrape,) = policies["usher-metrics-from-prometheus"]["spec"]["ingress"]
    assert scrape["ports"] == [{"protocol": "TCP", "port": 9102}]
    postgres = policies["usher-to-postgres"]["spec"]["podSelector"]["matchExpressions"][0]
    assert postgres["values"] == ["ledger", "migrate"]


def test_nats_tls_is_on_and_readable_by_the_pods_user(
    two_zones: list[Manifest], migrate: list[Manifest]
) -> None:
    """deploy/components/nats-tls is in every install: the Secret is mounted 0440 into pods
    whose fsGroup is their group, so uid 10001 reads it (root:root 0440 would not be)."""
    examples = [d for d in yaml.safe_load_all((DEPLOY / "secrets.example.yaml").read_text()) if d]
    (secret,) = [s for s in examples if s["metadata"]["name"] == "usher-nats-tls"]
    deployments = of_kind(two_zones, "Deployment")
    assert len(deployments) == 6
    (job,) = of_kind(migrate, "Job")
    for workload, container in [(d, pod_spec(d)["containers"][0]) for d in deployments] + [
        (job, pod_spec(job)["initContainers"][0])
    ]:
        pod = pod_spec(workload)
        (volume,) = [v for v in pod["volumes"] if v["name"] == "nats-tls"]
        assert volume["secret"]["secretName"] == "usher-nats-tls"
        assert volume["secret"]["defaultMode"] == 0o440
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"] == 10001
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "nats-tls"]
        assert mount["readOnly"] is True
        env = {e["name"]: e.get("value") for e in container["env"]}
        for variable, key in (("CA", "ca.crt"), ("CERT", "tls.crt"), ("KEY", "tls.key")):
            assert env[f"USHER_NATS_TLS_{variable}"] == f"{mount['mountPath']}/{key}"
            assert key in secret["stringData"]


# ---------------------------------------------------------------------- the commands run


def dockerfile_entrypoint() -> list[str]:
    text = (REPO / "Dockerfile").read_text()
    (line,) = re.findall(r"^ENTRYPOINT (.+)$", text, flags=re.MULTILINE)
    entrypoint: list[str] = json.loads(line)
    return entrypoint


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _local_env(manifests: list[Manifest], container: dict[str, Any], home: Path) -> dict[str, str]:
    """The container's environment, with Secrets replaced by local stand-ins."""
    env = dict(by_name(manifests, "ConfigMap")["usher-settings"]["data"])
    stand_ins = {
        "USHER_NATS_URL": f"nats://usher:pw@127.0.0.1:{_closed_port()}",
        "USHER_DATABASE_PASSWORD": "pw",
    }
    for var in container.get("env", []):
        if var["name"].startswith("USHER_NATS_TLS_"):
            continue  # files of the mounted Secret; the stand-in NATS has no TLS
        env[var["name"]] = var["value"] if "value" in var else stand_ins[var["name"]]
    return {**env, "USHER_HOME": str(home), "USHER_STARTUP_TIMEOUT_SECONDS": "1",
            "PATH": f"{BIN}:/usr/bin:/bin"}  # fmt: skip


def test_the_image_runs_usher(two_zones: list[Manifest]) -> None:
    assert dockerfile_entrypoint() == ["usher"]
    for deployment in of_kind(two_zones, "Deployment"):
        (container,) = pod_spec(deployment)["containers"]
        assert "command" not in container  # the ENTRYPOINT runs
        assert container["args"][0] == "run"


def test_every_deployment_command_starts_the_service_it_names(
    two_zones: list[Manifest], tmp_path: Path
) -> None:
    started = []
    for deployment in of_kind(two_zones, "Deployment"):
        (container,) = pod_spec(deployment)["containers"]
        argv = dockerfile_entrypoint() + container["args"]
        argv[0] = str(BIN / argv[0])
        env = _local_env(two_zones, container, tmp_path)
        process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)  # fmt: skip
        started.append((container["args"][1], process))
    for service, process in started:
        # A bound for a hang, not a speed target: all of them start at once on a busy machine.
        _, err = process.communicate(timeout=300)
        assert process.returncode == 4, err
        assert f"usher: {service}: cannot reach nats" in err


async def test_the_migration_job_migrates(migrate: list[Manifest], database_url: str) -> None:
    (job,) = of_kind(migrate, "Job")
    (container,) = pod_spec(job)["containers"]
    argv = dockerfile_entrypoint() + container["args"]
    argv[0] = str(BIN / argv[0])
    # As in the cluster: the URL without its password, which comes from its own variable.
    url = make_url(database_url)
    assert url.password
    env = {
        "USHER_DATABASE_URL": url.set(password=None).render_as_string(hide_password=False),
        "USHER_DATABASE_PASSWORD": str(url.password),
        "PATH": f"{BIN}:/usr/bin:/bin",
    }
    process = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd="/", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    dsn = make_url(database_url).set(drivername="postgresql")
    conn = await asyncpg.connect(dsn.render_as_string(hide_password=False))
    try:
        assert await conn.fetchval("SELECT count(*) FROM allocations") == 0
    finally:
        await conn.close()


def test_the_nats_chart_values_give_every_user_its_password() -> None:
    conf = (DEPLOY / "nats" / "usher-auth.conf").read_text()
    variables = set(re.findall(r"password: \$(\w+)", conf))
    values = yaml.safe_load((DEPLOY / "nats-values.yaml").read_text())
    assert set(values["container"]["env"]) == variables
    assert values["config"]["jetstream"]["enabled"] is True
    assert values["config"]["merge"]["00$include"] == "usher/usher-auth.conf"


@needs_kubectl
def test_the_nats_users_match_the_dequeuer_zones(two_zones: list[Manifest]) -> None:
    conf = (DEPLOY / "nats" / "usher-auth.conf").read_text()
    users = set(re.findall(r"user: (usher-[\w-]+)", conf))
    zones = {name.removeprefix("usher-") for name in by_name(two_zones, "Deployment")}
    # Plus the read-only console and the admin that creates the streams.
    assert users == {f"usher-{z}" for z in zones} | {"usher-console", "usher-admin"}
