"""deploy/console: the web console's manifests render, validate, read the log as the
read-only NATS user, and start `usher console`.

Rendering needs `kubectl` (its built-in kustomize).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml

from tests.deploy.rendered import DEPLOY, KUBECTL, Manifest, by_name, render
from tests.deploy.test_manifests import BIN, dockerfile_entrypoint, pod_spec
from usher.adapters.nats.permissions import CONSOLE, console
from usher.adapters.nats.subjects import Subjects


@pytest.fixture(scope="module")
def manifests() -> list[Manifest]:
    if KUBECTL is None:
        pytest.skip("kubectl (kustomize) not installed")
    return render(DEPLOY / "console")


def test_the_manifests_are_valid_kubernetes(manifests: list[Manifest]) -> None:
    version = kubernetes_validate.latest_version()
    assert {m["kind"] for m in manifests} == {
        "ServiceAccount", "Deployment", "PodDisruptionBudget", "Service", "NetworkPolicy",
    }  # fmt: skip
    for manifest in manifests:
        kubernetes_validate.validate(manifest, version, strict=True)


def test_it_reads_the_log_as_the_read_only_user_and_has_no_token(
    manifests: list[Manifest],
) -> None:
    deployment = by_name(manifests, "Deployment")["usher-console"]
    spec = pod_spec(deployment)
    assert spec["automountServiceAccountToken"] is False
    assert by_name(manifests, "ServiceAccount")["usher-console"][
        "automountServiceAccountToken"
    ] is (False)
    (container,) = spec["containers"]
    env = {e["name"]: e for e in container["env"]}
    # No database, no kubeconfig; NATS over TLS (deploy/components/nats-tls).
    assert set(env) == {"USHER_NATS_URL", "USHER_NATS_TLS_CA", "USHER_NATS_TLS_CERT",
                        "USHER_NATS_TLS_KEY"}  # fmt: skip
    secret = env["USHER_NATS_URL"]["valueFrom"]["secretKeyRef"]["name"]
    examples = [d for d in yaml.safe_load_all((DEPLOY / "secrets.example.yaml").read_text()) if d]
    (example,) = [s for s in examples if s["metadata"]["name"] == secret]
    assert urlparse(example["stringData"]["url"]).username == f"usher-{CONSOLE}"
    # That user publishes nothing but JetStream API reads of the log and the DLQ.
    allowed = console(Subjects("usher")).publish
    assert all(subject.startswith(("$JS.API.", "$JS.FC.")) for subject in allowed)
    assert not any(verb in s for s in allowed for verb in ("DELETE", "PURGE", "UPDATE"))


def test_the_container_is_locked_down_and_probed(manifests: list[Manifest]) -> None:
    deployment = by_name(manifests, "Deployment")["usher-console"]
    spec = pod_spec(deployment)
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert container["ports"] == [{"name": "http", "containerPort": 8470}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    service = by_name(manifests, "Service")["usher-console"]["spec"]
    assert service["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_the_network_policy_lets_in_only_its_clients(manifests: list[Manifest]) -> None:
    policy = by_name(manifests, "NetworkPolicy")["usher-console"]["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"protocol": "TCP", "port": 8470}]
    (source,) = ingress["from"]
    assert source["podSelector"] == {"matchLabels": {"usher.io/console-client": "true"}}
    ports = {p["port"] for rule in policy["egress"] for p in rule["ports"]}
    assert ports == {4222, 53}


def test_the_command_starts_the_console(manifests: list[Manifest], tmp_path: Path) -> None:
    """The container's command is `usher console`: with NATS unreachable it says so."""
    (container,) = pod_spec(by_name(manifests, "Deployment")["usher-console"])["containers"]
    argv = dockerfile_entrypoint() + container["args"]
    argv[0] = str(BIN / argv[0])
    assert container["args"][:1] == ["console"]
    env = {
        "USHER_NATS_URL": "nats://usher-console:pw@127.0.0.1:1",
        "USHER_HOME": str(tmp_path),
        "USHER_STARTUP_TIMEOUT_SECONDS": "1",
        "PATH": f"{BIN}:/usr/bin:/bin",
    }
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 4, result.stderr
    assert "cannot reach NATS at nats://usher-console:***@127.0.0.1:1" in result.stderr
