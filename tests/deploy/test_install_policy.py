"""deploy/: every kustomization renders, validates strictly, and keeps the install policy.

The policy is what a real install needs to apply on a fresh cluster and keep running: a CRD in
a ``*.k8s.io`` group carries ``api-approved.kubernetes.io``; every Deployment with two replicas
or more spreads over nodes and has a PodDisruptionBudget; every admission webhook has a
selector; control-plane pods have a PriorityClass (the batch jobs Usher admits must not preempt
Usher); nothing talks in plaintext (NATS over TLS, PostgreSQL ``verify-full`` with the
CloudNativePG CA) and the mounted TLS files are readable by uid 10001; one source for each
PostgreSQL password (CloudNativePG's Secret); streams and migrations run as a Job; every object
carries the common labels; metrics are scraped through Services and a ServiceMonitor.

Each rule is a function from rendered manifests to the violations it finds (an empty list when
the install keeps it); ``test_each_rule_refuses_what_it_forbids`` breaks a rendered manifest
per rule and sees the rule name it. Rendering needs ``kubectl`` (its built-in kustomize).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes_validate
import pytest
import yaml

from tests.deploy.rendered import DEPLOY, KUBECTL, Manifest, of_kind, render

Rendered = dict[str, list[Manifest]]
Violations = list[str]

# Kinds of operators Usher's install uses; their schemas are not Kubernetes'.
OPERATOR_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")
PROTECTED_GROUP = re.compile(r"(^|\.)(k8s\.io|kubernetes\.io)$")
APPROVAL = "api-approved.kubernetes.io"
COMMON_LABELS = ("app.kubernetes.io/part-of", "app.kubernetes.io/instance",
                 "app.kubernetes.io/version")  # fmt: skip
IMAGE = "ghcr.io/usher/usher"
NOT_CONTROL_PLANE = {"console"}  # app.kubernetes.io/component of pods people look at only
CNPG_CA_SECRET = "usher-pg-ca"  # CloudNativePG's <cluster>-ca Secret (key ca.crt)


def kustomizations() -> list[Path]:
    """Every folder of deploy/ that kustomize renders on its own (components excepted)."""
    found = []
    for path in sorted(DEPLOY.rglob("kustomization.yaml")):
        if yaml.safe_load(path.read_text()).get("kind", "Kustomization") == "Kustomization":
            found.append(path.parent)
    return found


@pytest.fixture(scope="module")
def rendered() -> Rendered:
    if KUBECTL is None:
        pytest.skip("kubectl (kustomize) not installed")
    return {str(path.relative_to(DEPLOY)): render(path) for path in kustomizations()}


def everything(rendered: Rendered) -> list[Manifest]:
    return [m for manifests in rendered.values() for m in manifests]


def name_of(manifest: Manifest) -> str:
    return f"{manifest['kind']}/{manifest['metadata']['name']}"


def pod_templates(manifests: list[Manifest]) -> Iterator[tuple[Manifest, dict[str, Any]]]:
    for workload in of_kind(manifests, "Deployment") + of_kind(manifests, "Job"):
        yield workload, workload["spec"]["template"]


def containers(template: dict[str, Any]) -> list[dict[str, Any]]:
    spec = template["spec"]
    return list(spec.get("initContainers", [])) + list(spec["containers"])


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """``matchLabels`` only: the selectors of deploy/ use nothing else."""
    match = selector.get("matchLabels") or {}
    return bool(match) and match.items() <= labels.items()


# ---------------------------------------------------------------------- the rules


def crd_approval(manifests: list[Manifest]) -> Violations:
    """A CRD of a protected group is refused by the API server without the annotation: a URL
    of the approving review, or a value starting with ``unapproved``."""
    out = []
    for crd in of_kind(manifests, "CustomResourceDefinition"):
        if not PROTECTED_GROUP.search(crd["spec"]["group"]):
            continue
        value = (crd["metadata"].get("annotations") or {}).get(APPROVAL, "")
        if not (value.startswith("unapproved") or value.startswith("https://")):
            out.append(f"{name_of(crd)}: {APPROVAL} is {value!r}")
    return out


def spread_and_budget(manifests: list[Manifest]) -> Violations:
    """Two replicas on one node are one replica: spread over nodes, and a PDB."""
    out = []
    budgets = of_kind(manifests, "PodDisruptionBudget")
    for deployment in of_kind(manifests, "Deployment"):
        if deployment["spec"].get("replicas", 1) < 2:
            continue
        template = deployment["spec"]["template"]
        labels = template["metadata"]["labels"]
        spread = template["spec"].get("topologySpreadConstraints") or []
        if not any(
            c["topologyKey"] == "kubernetes.io/hostname" and selects(c["labelSelector"], labels)
            for c in spread
        ):
            out.append(f"{name_of(deployment)}: no topology spread over kubernetes.io/hostname")
        if not any(selects(b["spec"]["selector"], labels) for b in budgets):
            out.append(f"{name_of(deployment)}: no PodDisruptionBudget")
    return out


def webhook_selectors(manifests: list[Manifest]) -> Violations:
    out = []
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for configuration in of_kind(manifests, kind):
            for hook in configuration["webhooks"]:
                if not (hook.get("objectSelector") or hook.get("namespaceSelector")):
                    out.append(f"{name_of(configuration)}: {hook['name']} has no selector")
    return out


def priority(manifests: list[Manifest], classes: set[str]) -> Violations:
    """Control-plane pods name a PriorityClass the install creates."""
    out = []
    for deployment, template in pod_templates(of_kind(manifests, "Deployment")):
        component = template["metadata"]["labels"].get("app.kubernetes.io/component")
        if component in NOT_CONTROL_PLANE:
            continue
        chosen = template["spec"].get("priorityClassName")
        if chosen not in classes:
            out.append(f"{name_of(deployment)}: priorityClassName {chosen!r} not in {classes}")
    return out


def _mounted_secret(template: dict[str, Any], container: dict[str, Any], path: str) -> str | None:
    """The Secret a file path of ``container`` comes from, if any."""
    secrets = {v["name"]: v["secret"]["secretName"]
               for v in template["spec"].get("volumes", []) if "secret" in v}  # fmt: skip
    for mount in container.get("volumeMounts", []):
        if path.startswith(mount["mountPath"].rstrip("/") + "/") and mount["name"] in secrets:
            return secrets[mount["name"]]
    return None


def transport(manifests: list[Manifest]) -> Violations:
    """NATS with a CA to verify the server; PostgreSQL with verify-full against CNPG's CA."""
    out = []
    for workload, template in pod_templates(manifests):
        for container in containers(template):
            env = env_of(container)
            where = f"{name_of(workload)}/{container['name']}"
            nats = [n for n in env if n in ("USHER_NATS_URL", "USHER_ADMIN_NATS_URL")]
            ca = env.get("USHER_NATS_TLS_CA", {}).get("value")
            if nats and (ca is None or _mounted_secret(template, container, ca) is None):
                out.append(f"{where}: NATS without USHER_NATS_TLS_CA from a mounted Secret")
            if "USHER_DATABASE_URL" in env:
                url = env["USHER_DATABASE_URL"].get("value") or ""
                modes = parse_qs(urlsplit(url).query).get("ssl", [])
                if modes != ["verify-full"]:
                    out.append(f"{where}: USHER_DATABASE_URL {url!r} is not ssl=verify-full")
                root = env.get("PGSSLROOTCERT", {}).get("value") or ""
                if _mounted_secret(template, container, root) != CNPG_CA_SECRET:
                    out.append(f"{where}: PGSSLROOTCERT is not {CNPG_CA_SECRET}'s ca.crt")
    return out


def readable_secrets(manifests: list[Manifest]) -> Violations:
    """A Secret volume whose files are not world-readable needs fsGroup = the pod's group."""
    out = []
    for workload, template in pod_templates(manifests):
        spec = template["spec"]
        context = spec.get("securityContext") or {}
        for volume in spec.get("volumes", []):
            if "secret" not in volume:
                continue
            mode = volume["secret"].get("defaultMode", 0o644)
            readable = bool(mode & 0o004) or (
                bool(mode & 0o040) and context.get("fsGroup") == context.get("runAsGroup")
            )
            if not readable:
                out.append(f"{name_of(workload)}: volume {volume['name']} unreadable to uid "
                           f"{context.get('runAsUser')} (mode {mode:o}, no fsGroup)")  # fmt: skip
    return out


def one_password_source(manifests: list[Manifest], cnpg_secrets: set[str]) -> Violations:
    """The database password is read from CloudNativePG's Secret, never from a copy in a URL."""
    out = []
    for workload, template in pod_templates(manifests):
        for container in containers(template):
            env = env_of(container)
            where = f"{name_of(workload)}/{container['name']}"
            if "valueFrom" in env.get("USHER_DATABASE_URL", {}):
                out.append(f"{where}: USHER_DATABASE_URL comes from a Secret (a password copy)")
            password = env.get("USHER_DATABASE_PASSWORD", {}).get("valueFrom", {})
            if (
                "USHER_DATABASE_URL" in env
                and password.get("secretKeyRef", {}).get("name") not in cnpg_secrets
            ):
                out.append(f"{where}: USHER_DATABASE_PASSWORD is not one of {cnpg_secrets}")
    return out


def streams_and_migrations(manifests: list[Manifest]) -> Violations:
    """One Job creates the streams (as the NATS admin), then migrates the schema."""
    jobs = of_kind(manifests, "Job")
    if not jobs:
        return []
    out = []
    for job in jobs:
        # In the order they run (init containers first), as `usher <args>` (the ENTRYPOINT).
        commands = [" ".join(c["args"]) for c in containers(job["spec"]["template"])
                    if "command" not in c and c["image"].startswith(IMAGE)]  # fmt: skip
        if commands[:1] != ["streams"]:
            out.append(f"{name_of(job)}: does not create the streams first")
        if "migrate" not in commands:
            out.append(f"{name_of(job)}: does not migrate the schema")
    return out


def common_labels(manifests: list[Manifest]) -> Violations:
    """part-of, instance, version on every object and pod; version = the image's tag."""
    out = []
    for manifest in manifests:
        labels = manifest["metadata"].get("labels") or {}
        missing = [k for k in COMMON_LABELS if k not in labels]
        if missing:
            out.append(f"{name_of(manifest)}: no {', '.join(missing)}")
    for workload, template in pod_templates(manifests):
        labels = template["metadata"].get("labels") or {}
        missing = [k for k in COMMON_LABELS if k not in labels]
        if missing:
            out.append(f"{name_of(workload)} pods: no {', '.join(missing)}")
        for container in containers(template):
            image, _, tag = container["image"].partition(":")
            if image == IMAGE and tag != labels.get("app.kubernetes.io/version"):
                out.append(f"{name_of(workload)}: image tag {tag!r} is not the version label")
    return out


def metrics_scraped(manifests: list[Manifest], monitors: list[Manifest]) -> Violations:
    """A pod serving ``metrics`` is behind a Service with that port, which a ServiceMonitor
    selects by its labels and port name."""
    out = []
    services = [
        s for s in of_kind(manifests, "Service")
        if any(p.get("targetPort") == "metrics" for p in s["spec"]["ports"])
    ]  # fmt: skip
    for deployment, template in pod_templates(of_kind(manifests, "Deployment")):
        ports = [p["name"] for c in containers(template) for p in c.get("ports", [])]
        if "metrics" not in ports:
            continue
        labels = template["metadata"]["labels"]
        behind = [s for s in services if s["spec"]["selector"].items() <= labels.items()]
        if not behind:
            out.append(f"{name_of(deployment)}: no Service with a metrics port selects it")
        for service in behind:
            port = next(p["name"] for p in service["spec"]["ports"] if p["targetPort"] == "metrics")
            if not any(
                selects(m["spec"]["selector"], service["metadata"]["labels"])
                and port in [e.get("port") for e in m["spec"]["endpoints"]]
                for m in monitors
            ):
                out.append(f"{name_of(service)}: no ServiceMonitor scrapes its port {port!r}")
    return out


# ---------------------------------------------------------------------- the install


def cnpg_password_secrets() -> set[str]:
    """The Secrets CloudNativePG keeps the passwords in (deploy/postgres-cluster.yaml)."""
    cluster = yaml.safe_load((DEPLOY / "postgres-cluster.yaml").read_text())["spec"]
    roles = [r["passwordSecret"]["name"] for r in cluster["managed"]["roles"]]
    return {cluster["bootstrap"]["initdb"]["secret"]["name"], *roles}


def rules(rendered: Rendered) -> dict[str, Callable[[list[Manifest]], Violations]]:
    every = everything(rendered)
    classes = {m["metadata"]["name"] for m in of_kind(every, "PriorityClass")}
    monitors = of_kind(every, "ServiceMonitor")
    secrets = cnpg_password_secrets()
    return {
        "crd_approval": crd_approval,
        "spread_and_budget": spread_and_budget,
        "webhook_selectors": webhook_selectors,
        "priority": lambda ms: priority(ms, classes),
        "transport": transport,
        "readable_secrets": readable_secrets,
        "one_password_source": lambda ms: one_password_source(ms, secrets),
        "streams_and_migrations": streams_and_migrations,
        "common_labels": common_labels,
        "metrics_scraped": lambda ms: metrics_scraped(ms, monitors),
    }


RULES = ["crd_approval", "spread_and_budget", "webhook_selectors", "priority", "transport",
         "readable_secrets", "one_password_source", "streams_and_migrations", "common_labels",
         "metrics_scraped"]  # fmt: skip


def test_every_kustomization_renders_and_validates_strictly(rendered: Rendered) -> None:
    assert {"base", "overlays/two-zones", "migrate", "webhook", "console", "monitoring"} <= set(
        rendered
    )
    version = kubernetes_validate.latest_version()
    for manifest in everything(rendered):
        if manifest["apiVersion"].startswith(OPERATOR_GROUPS):
            continue
        kubernetes_validate.validate(manifest, version, strict=True)


@pytest.mark.parametrize("rule", RULES)
def test_the_install_keeps_the_policy(rendered: Rendered, rule: str) -> None:
    check = rules(rendered)[rule]
    assert {where: check(ms) for where, ms in rendered.items() if check(ms)} == {}


def test_the_example_secrets_are_not_plaintext() -> None:
    """What an installer copies: NATS URLs over TLS; no PostgreSQL URL with a password."""
    examples = [d for d in yaml.safe_load_all((DEPLOY / "secrets.example.yaml").read_text()) if d]
    for secret in examples:
        for key, value in secret.get("stringData", {}).items():
            if key == "url":
                assert urlsplit(value).scheme == "tls", secret["metadata"]["name"]
    assert not [s for s in examples if s["metadata"]["name"].startswith("usher-postgres-")]


def test_the_nats_server_requires_tls_for_clients() -> None:
    """The chart's client port serves TLS (deploy/nats-values.yaml, from the permissions
    module), so no Usher pod can talk to NATS in plaintext even with a nats:// URL."""
    values = yaml.safe_load((DEPLOY / "nats-values.yaml").read_text())
    assert values["config"]["nats"]["tls"] == {"enabled": True, "secretName": "nats-server-tls"}


def _break(rendered: Rendered, where: str, kind: str, name: str,
           change: Callable[[Manifest], None]) -> list[Manifest]:  # fmt: skip
    manifests = copy.deepcopy(rendered[where])
    (target,) = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    change(target)
    return manifests


def _spec(m: Manifest) -> dict[str, Any]:
    return m["spec"]["template"]["spec"]


def _drop_env(m: Manifest, name: str) -> None:
    container = _spec(m)["containers"][0]
    container["env"] = [e for e in container["env"] if e["name"] != name]


BREAKS: dict[str, tuple[str, str, str, Callable[[Manifest], None]]] = {
    "crd_approval": ("base", "CustomResourceDefinition", "elasticquotatrees.scheduling.sigs.k8s.io",
                     lambda m: m["metadata"].pop("annotations")),
    "spread_and_budget": ("webhook", "Deployment", "usher-webhook",
                          lambda m: _spec(m).pop("topologySpreadConstraints")),
    "webhook_selectors": ("webhook", "MutatingWebhookConfiguration", "usher-webhook",
                          lambda m: m["webhooks"][0].pop("namespaceSelector")),
    "priority": ("base", "Deployment", "usher-watcher",
                 lambda m: _spec(m).pop("priorityClassName")),
    "transport": ("overlays/two-zones", "Deployment", "usher-ledger",
                  lambda m: _drop_env(m, "USHER_NATS_TLS_CA")),
    "readable_secrets": ("overlays/two-zones", "Deployment", "usher-ledger",
                         lambda m: _spec(m)["securityContext"].pop("fsGroup")),
    "one_password_source": ("migrate", "Job", "usher-migrate",
                            lambda m: _spec(m)["containers"][0]["env"].__setitem__(
                                0, {"name": "USHER_DATABASE_URL", "valueFrom": {}})),
    "streams_and_migrations": ("migrate", "Job", "usher-migrate",
                               lambda m: _spec(m).pop("initContainers")),
    "common_labels": ("console", "Service", "usher-console",
                      lambda m: m["metadata"]["labels"].pop("app.kubernetes.io/version")),
    "metrics_scraped": ("base", "Service", "usher-ledger-metrics",
                        lambda m: m["spec"]["ports"][0].__setitem__("targetPort", 9102)),
}  # fmt: skip


@pytest.mark.parametrize("rule", RULES)
def test_each_rule_refuses_what_it_forbids(rendered: Rendered, rule: str) -> None:
    where, kind, name, change = BREAKS[rule]
    check = rules(rendered)[rule]
    assert check(rendered[where]) == []
    violations = check(_break(rendered, where, kind, name, change))
    assert violations and all(isinstance(v, str) for v in violations)
