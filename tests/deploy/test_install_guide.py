"""docs/how-to/install.md runs against what deploy/ renders: the guide's commands are read
from the page, and each folder it applies, file it names, Secret it makes, Job it waits for
and selector it uses is checked against the rendered manifests (the same renders the install
policy checks). A guide that forgot a Secret a pod reads, applied a folder that does not
render, or started the services before the migration Job would fail here.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from tests.deploy.rendered import DEPLOY, KUBECTL, Manifest, of_kind, render
from tests.deploy.test_install_policy import containers, kustomizations, pod_templates

REPO = DEPLOY.parent
GUIDE = REPO / "docs" / "how-to" / "install.md"
# Secrets made by operators, not by the guide: cert-manager (a Certificate's secretName) and
# CloudNativePG (its CA, <cluster>-ca).
CNPG_CA = "usher-pg-ca"


def commands() -> list[list[str]]:
    """Every shell command of the guide's ``sh`` blocks, continuation lines joined, as words
    (a loop's body included: its lines are commands too)."""
    text = GUIDE.read_text()
    out = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL):
        joined = block.replace("\\\n", " ")
        heredoc = False
        for line in joined.splitlines():
            if heredoc:
                heredoc = line.strip() != "EOF"
                continue
            heredoc = "<<'EOF'" in line
            words = shlex.split(line, comments=True)
            if words:
                out.append(words)
    return out


def loop_values(words: list[str]) -> list[str]:
    """``for x in a b c; do``: a, b, c."""
    values = words[3 : words.index("do")]
    return [v.rstrip(";") for v in values]


def applied_folders() -> list[str]:
    return [c[c.index("-k") + 1] for c in commands() if c[:3] == ["kubectl", "apply", "-k"]]


@pytest.fixture(scope="module")
def renders() -> dict[str, list[Manifest]]:
    if KUBECTL is None:
        pytest.skip("kubectl (kustomize) not installed")
    return {f"deploy/{p.relative_to(DEPLOY)}": render(p) for p in kustomizations()}


def test_the_guide_is_in_the_docs_nav() -> None:
    nav = (REPO / "mkdocs.yml").read_text()
    assert "Install on kind or a real cluster: how-to/install.md" in nav


def test_every_folder_applied_is_one_the_policy_renders(renders: dict[str, list[Manifest]]) -> None:
    folders = set(applied_folders())
    assert folders <= set(renders)
    # Everything of an installation, and only whole installations (never base or one zone).
    assert folders == {
        "deploy/tls", "deploy/overlays/two-zones", "deploy/migrate", "deploy/webhook",
        "deploy/console", "deploy/monitoring", "deploy/grafana",
    }  # fmt: skip


def test_every_file_named_exists() -> None:
    named = [w for c in commands() for w in c if w.startswith(("deploy/", "usher/"))]
    named += [w.rsplit("=", 1)[1] for c in commands() for w in c if "=deploy/" in w]
    paths = {n for n in named if "." in Path(n).name}
    assert {"deploy/postgres-cluster.yaml", "deploy/nats-values.yaml"} <= paths
    for path in paths:
        assert (REPO / path).is_file(), path


def _secrets_made_by_the_guide() -> set[str]:
    made = set()
    users = []
    for words in commands():
        if words[:3] == ["kubectl", "create", "secret"]:
            made.add(words[4])
        if words[:2] == ["for", "user"]:
            users = loop_values(words)
        if words[:2] == ["for", "role"]:
            made |= {f"usher-pg-{r.split(':')[0]}" for r in words[3:] if ":" in r}
    # The loops: one Secret per NATS user (the command names it with $user).
    made |= {f"usher-nats-{u}" for u in users}
    return {m for m in made if "$" not in m}


def test_every_secret_a_pod_reads_is_made(renders: dict[str, list[Manifest]]) -> None:
    installed = [m for folder in applied_folders() for m in renders[folder]]
    by_cert_manager = {c["spec"]["secretName"] for c in of_kind(installed, "Certificate")}
    made = _secrets_made_by_the_guide() | by_cert_manager | {CNPG_CA}
    read = set()
    for _, template in pod_templates(installed):
        for volume in template["spec"].get("volumes", []):
            if "secret" in volume:
                read.add(volume["secret"]["secretName"])
        for container in containers(template):
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    read.add(ref["name"])
    assert read and read <= made, read - made
    # CloudNativePG's role passwords are the ones the guide makes (one source).
    cluster = yaml.safe_load((DEPLOY / "postgres-cluster.yaml").read_text())["spec"]
    roles = {r["passwordSecret"]["name"] for r in cluster["managed"]["roles"]}
    assert roles | {cluster["bootstrap"]["initdb"]["secret"]["name"]} <= made


def test_the_nats_users_are_the_servers(renders: dict[str, list[Manifest]]) -> None:
    (loop,) = [c for c in commands() if c[:2] == ["for", "user"]]
    users = set(loop_values(loop))
    conf = (DEPLOY / "nats" / "usher-auth.conf").read_text()
    assert {f"usher-{u}" for u in users} == set(re.findall(r"user: (usher-[\w-]+)", conf))


def _selected(selector: str, labels: dict[str, str]) -> bool:
    """``key!=value`` terms only (what the guide uses): all must hold."""
    terms = [term.split("!=") for term in selector.split(",")]
    assert all(len(term) == 2 for term in terms), selector
    return all(labels.get(key) != value for key, value in terms)


def test_the_migration_job_runs_before_the_services(renders: dict[str, list[Manifest]]) -> None:
    """First everything the Job needs and no service, then the Job (waited for), then all."""
    sequence = [c for c in commands() if c[:2] in (["kubectl", "apply"], ["kubectl", "wait"])]
    overlay = "deploy/overlays/two-zones"
    first = next(i for i, c in enumerate(sequence) if overlay in c)
    selector = sequence[first][sequence[first].index("--selector") + 1]
    chosen = [m for m in renders[overlay] if _selected(selector, m["metadata"].get("labels", {}))]
    assert not of_kind(chosen, "Deployment")
    names = {(m["kind"], m["metadata"]["name"]) for m in chosen}
    (job,) = of_kind(renders["deploy/migrate"], "Job")
    spec = job["spec"]["template"]["spec"]
    assert ("ServiceAccount", spec["serviceAccountName"]) in names
    for container in containers(job["spec"]["template"]):
        for source in container.get("envFrom", []):
            assert ("ConfigMap", source["configMapRef"]["name"]) in names
    assert {"usher-default-deny", "usher-to-nats-and-dns", "usher-to-postgres"} <= {
        name for kind, name in names if kind == "NetworkPolicy"
    }
    following = [" ".join(c) for c in sequence[first + 1 : first + 4]]
    assert following == [
        "kubectl apply -k deploy/migrate",
        "kubectl wait --for=condition=complete -n usher-system "
        f"job/{job['metadata']['name']} --timeout=5m",
        f"kubectl apply -k {overlay}",
    ]
