"""kubectl's common verbs against the emulator, compared with what a real API server answers.

Each case runs the real kubectl (skipped only when it is not on PATH) against an emulator that,
like ``usher up``'s, refuses objects in namespaces nobody created, and compares the exit code
and printed output with a real cluster's answer, recorded from the Kubernetes documentation
and source (``SOURCES`` says where each came from). Verbs covered (``VERBS``): create
namespace, get (table, ``-o wide``, ``-l`` selector, ``--watch``), apply (created, refused:
missing namespace, bad quantity, negative quantity, bad label, bad name, missing container
name, CRD schema and CEL rules), create -f, label, explain, delete (object, namespace with its
objects).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from tests.adapters.test_kube_emulator_kubectl import KUBECTL, REPO, kubectl, needs_kubectl
from usher.local.cluster import SYSTEM_NAMESPACES, WALKTHROUGH_NAMESPACES, restored_store
from usher.local.kube_emulator import ApiError, KubeEmulator, resource
from usher.local.kube_emulator.store import CLUSTER_NAMESPACES

NAMESPACES = resource("", "v1", "namespaces")

VERBS = (
    "create namespace",
    "get",
    "get -o wide",
    "get -l",
    "get --watch",
    "apply",
    "apply --server-side",
    "create -f",
    "label",
    "explain",
    "delete",
    "delete namespace",
)

SOURCES = {
    "ns-created": "kubectl create namespace prints <resource>/<name> created: kubernetes.io docs, "
    "'Namespaces' walkthrough (kubectl create namespace ... -> namespace/... created)",
    "ns-table": "kubernetes.io docs, 'Namespaces' (kubectl get namespace: NAME STATUS AGE, "
    "default Active); pkg/printers/internalversion/printers.go namespaceColumnDefinitions",
    "ns-label": "kubernetes.io docs, 'Well-Known Labels': kubernetes.io/metadata.name is set on "
    "every namespace by the control plane (1.21+)",
    "ns-missing": "plugin/pkg/admission/namespace/lifecycle: errors.NewNotFound(namespaces) -> "
    'namespaces "<ns>" not found; kubectl apply wraps it as error when creating "<file>": ...',
    "quantity": "apimachinery pkg/api/resource/quantity.go ErrFormatWrong ('quantities must "
    "match the regular expression ...'); apiserver handlers/rest.go: '<Kind> in version "
    '"<v>" cannot be handled as a <Kind>: <decode error>\' (BadRequest)',
    "negative": "pkg/apis/core/validation ValidateNonnegativeQuantity: 'must be greater than or "
    'equal to 0\'; kubectl helpers.go StandardErrorMessage: The <Kind> "<name>" is invalid: ...',
    "label": "apimachinery pkg/util/validation IsValidLabelValue (message and regex) via "
    "metav1validation.ValidateLabels, field metadata.labels",
    "name": "apimachinery IsDNS1123Subdomain (object names) and IsDNS1123Label (namespaces)",
    "container-name": "pkg/apis/core/validation validateContainers: field.Required(name); "
    "several causes: kubectl helpers.go prints one '* <field>: <message>' line each",
    "not-found": 'apimachinery errors.NewNotFound: <resource>.<group> "<name>" not found; '
    "kubectl prints Error from server (NotFound): ...",
    "no-resources": "kubectl get/get.go: 'No resources found in <ns> namespace.'",
    "deleted": 'kubectl delete prints <resource> "<name>" deleted; deleting a namespace '
    "deletes every object in it (kubernetes.io docs, 'Namespaces': 'deletes everything under "
    "the namespace')",
    "server-side": "kubernetes.io docs, 'Server-Side Apply': kubectl apply --server-side "
    "prints <resource>/<name> serverside-applied, creating the object when missing",
    "explain": "kubectl explain output (GROUP/KIND/VERSION/FIELD header) as in the "
    "kubectl explain reference page",
}

JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: {namespace}
  labels: {{team: "{label}"}}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: {container}
        image: busybox
        resources:
          requests: {{cpu: "{cpu}"}}
"""


def job(
    name: str = "pi",
    namespace: str = "team-a",
    *,
    cpu: str = "1",
    label: str = "ml",
    container: str = "main",
) -> str:
    return JOB.format(name=name, namespace=namespace, cpu=cpu, label=label, container=container)


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator(strict_namespaces=True, validate=True) as emulator:
        emulator.store.ensure_namespaces(CLUSTER_NAMESPACES)
        yield emulator


def table(text: str) -> list[list[str]]:
    """A kubectl table as rows of cells (the AGE column is left out: it is a clock)."""
    rows = [re.split(r"\s{2,}", line.strip()) for line in text.strip().splitlines()]
    return [row[:-1] if row[-1] == "AGE" or re.fullmatch(r"\d+[smhd]", row[-1]) else row
            for row in rows]  # fmt: skip


@needs_kubectl
async def test_namespaces_are_created_listed_and_must_exist(
    emu: KubeEmulator, tmp_path: Path
) -> None:
    # ns-missing: a job in a namespace nobody created is refused at the door.
    code, out = await kubectl(emu, tmp_path, "apply", "-f", "-", stdin=job(namespace="team-zzz"))
    assert (code, out) == (
        1,
        'Error from server (NotFound): error when creating "STDIN": namespaces "team-zzz" '
        "not found\n",
    )
    # ns-created
    assert await kubectl(emu, tmp_path, "create", "namespace", "team-a") == (
        0,
        "namespace/team-a created\n",
    )
    # ns-table
    code, out = await kubectl(emu, tmp_path, "get", "namespaces")
    assert code == 0
    assert table(out) == [
        ["NAME", "STATUS"],
        ["default", "Active"],
        ["kube-node-lease", "Active"],
        ["kube-public", "Active"],
        ["kube-system", "Active"],
        ["team-a", "Active"],
    ]
    # ns-label, get -l
    code, out = await kubectl(
        emu, tmp_path, "get", "ns", "-l", "kubernetes.io/metadata.name=team-a", "-o", "name"
    )
    assert (code, out) == (0, "namespace/team-a\n")
    # name: a namespace name is a DNS-1123 label.
    code, out = await kubectl(emu, tmp_path, "create", "namespace", "Team_A")
    assert (code, out) == (
        1,
        'The Namespace "Team_A" is invalid: metadata.name: Invalid value: "Team_A": a lowercase '
        "RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
        "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
        "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')\n",
    )


@needs_kubectl
async def test_a_job_is_created_listed_and_deleted_with_its_namespace(
    emu: KubeEmulator, tmp_path: Path
) -> None:
    await kubectl(emu, tmp_path, "create", "namespace", "team-a")
    assert await kubectl(emu, tmp_path, "apply", "-f", "-", stdin=job()) == (
        0,
        "job.batch/pi created\n",
    )
    code, out = await kubectl(emu, tmp_path, "get", "jobs", "-n", "team-a", "-o", "wide")
    assert code == 0
    assert table(out)[0] == [
        "NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"
    ]  # fmt: skip
    code, out = await kubectl(emu, tmp_path, "get", "jobs", "-A", "-l", "team=ml", "-o", "name")
    assert (code, out) == (0, "job.batch/pi\n")
    assert await kubectl(emu, tmp_path, "label", "job", "pi", "-n", "team-a", "stage=b") == (
        0,
        "job.batch/pi labeled\n",
    )
    # not-found
    code, out = await kubectl(emu, tmp_path, "get", "job", "nope", "-n", "team-a")
    assert (code, out) == (1, 'Error from server (NotFound): jobs.batch "nope" not found\n')
    # deleted: the namespace goes with what is in it.
    assert await kubectl(emu, tmp_path, "delete", "namespace", "team-a") == (
        0,
        'namespace "team-a" deleted\n',
    )
    code, out = await kubectl(emu, tmp_path, "get", "jobs", "-n", "team-a")
    assert (code, out) == (0, "No resources found in team-a namespace.\n")  # no-resources
    code, out = await kubectl(emu, tmp_path, "get", "jobs", "-A", "-o", "name")
    assert (code, out) == (0, "")


BAD_JOBS = [
    pytest.param(
        job(cpu="1x"),
        'Error from server (BadRequest): error when creating "STDIN": Job in version "v1" '
        "cannot be handled as a Job: quantities must match the regular expression "
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'\n",
        id="quantity",
    ),
    pytest.param(
        job(cpu="512Gu"),
        'Error from server (BadRequest): error when creating "STDIN": Job in version "v1" '
        "cannot be handled as a Job: unable to parse quantity's suffix\n",
        id="quantity-suffix",
    ),
    pytest.param(
        job(cpu="-1"),
        'The Job "pi" is invalid: spec.template.spec.containers[0].resources.requests[cpu]: '
        'Invalid value: "-1": must be greater than or equal to 0\n',
        id="negative",
    ),
    pytest.param(
        job(label="a b"),
        'The Job "pi" is invalid: metadata.labels: Invalid value: "a b": a valid label must '
        "be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
        "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
        "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')\n",
        id="label",
    ),
    pytest.param(
        job(name="Pi"),
        'The Job "Pi" is invalid: metadata.name: Invalid value: "Pi": a lowercase RFC 1123 '
        "subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
        "start and end with an alphanumeric character (e.g. 'example.com', regex used for "
        "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')\n",
        id="name",
    ),
    pytest.param(
        job(container='""', cpu="-1"),
        'The Job "pi" is invalid: \n* spec.template.spec.containers[0].name: Required value\n'
        '* spec.template.spec.containers[0].resources.requests[cpu]: Invalid value: "-1": '
        "must be greater than or equal to 0\n",
        id="container-name",
    ),
]


@needs_kubectl
@pytest.mark.parametrize(("manifest", "answer"), BAD_JOBS)
async def test_a_bad_job_is_refused_as_a_real_server_refuses_it(
    emu: KubeEmulator, tmp_path: Path, manifest: str, answer: str
) -> None:
    await kubectl(emu, tmp_path, "create", "namespace", "team-a")
    assert await kubectl(emu, tmp_path, "apply", "-f", "-", stdin=manifest) == (1, answer)
    assert await kubectl(emu, tmp_path, "get", "jobs", "-A", "-o", "name") == (0, "")


@needs_kubectl
async def test_explain_and_watch(emu: KubeEmulator, tmp_path: Path) -> None:
    code, out = await kubectl(emu, tmp_path, "explain", "jobs.spec.suspend")
    assert code == 0
    assert out.splitlines()[:4] == [
        "GROUP:      batch",
        "KIND:       Job",
        "VERSION:    v1",
        "",
    ]
    assert KUBECTL is not None
    watch = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(emu.kubeconfig_path), "--cache-dir", str(tmp_path),
        "get", "namespaces", "--watch", "--request-timeout=10s",
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "HOME": str(tmp_path)},
    )  # fmt: skip
    assert watch.stdout is not None
    header = await asyncio.wait_for(watch.stdout.readline(), 30)
    assert header.split() == [b"NAME", b"STATUS", b"AGE"]
    for _ in CLUSTER_NAMESPACES:
        await asyncio.wait_for(watch.stdout.readline(), 30)
    await kubectl(emu, tmp_path, "create", "namespace", "watched")
    line = await asyncio.wait_for(watch.stdout.readline(), 30)
    assert line.split()[:2] == [b"watched", b"Active"]
    await asyncio.wait_for(watch.wait(), 30)


def test_the_local_cluster_starts_with_its_namespaces_and_refuses_others() -> None:
    """usher up's cluster: a cluster's namespaces, Usher's and the walkthrough's; a state saved
    before namespaces had to exist keeps its objects (their namespaces are made)."""
    old = {"objects": {"/configmaps": [{"metadata": {"name": "c", "namespace": "legacy"}}]}}
    store, restored = restored_store(old, 100)
    assert restored == 1
    names = [ns["metadata"]["name"] for ns in store.objects(NAMESPACES)]
    assert names == sorted({*SYSTEM_NAMESPACES, *WALKTHROUGH_NAMESPACES, "legacy"})
    jobs = resource("batch", "v1", "jobs")
    manifest = yaml.safe_load(job(namespace="user-a"))
    assert store.create(jobs, "user-a", manifest)["metadata"]["namespace"] == "user-a"
    with pytest.raises(ApiError) as refused:
        store.create(jobs, "team-zzz", {**manifest, "metadata": {"name": "pi"}})
    assert (refused.value.code, refused.value.message) == (
        404,
        'namespaces "team-zzz" not found',
    )
    store.delete(NAMESPACES, None, "user-a")
    assert store.objects(jobs) == []


TREE = """\
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: elasticquotatree, namespace: kube-system}
spec:
  root:
    name: root
    min: {cpu: "100"}
    max: {cpu: "100"}
    children:
"""

BAD_TREES = [
    pytest.param(
        '    - {name: a, min: {cpu: "80"}, max: {cpu: "60"}, namespaces: [user-a]}\n',
        'The ElasticQuotaTree "elasticquotatree" is invalid: spec.root.children[0].min: Invalid '
        'value: "object": min must not exceed max for any resource\n',
        id="min-above-max",
    ),
    pytest.param(
        '    - {name: a, min: {cpu: "1"}, max: {cpu: "2"}}\n'
        '    - {name: a, min: {cpu: "1"}, max: {cpu: "2"}}\n',
        'The ElasticQuotaTree "elasticquotatree" is invalid: spec.root.children: Invalid value: '
        '"array": children must have unique names\n',
        id="duplicate-child",
    ),
    pytest.param(
        '    - {name: a, min: {memory: "1Gi"}, max: {cpu: "2"}}\n',
        'The ElasticQuotaTree "elasticquotatree" is invalid: spec.root.children[0].min: Invalid '
        'value: "object": min names a resource that max does not\n',
        id="min-not-in-max",
    ),
    pytest.param(
        '    - {name: a, min: {cpu: "-1"}, max: {cpu: "2"}}\n',
        'The ElasticQuotaTree "elasticquotatree" is invalid: spec.root.children[0].min: Invalid '
        'value: "object": quantities must not be negative\n',
        id="negative",
    ),
    pytest.param(
        '    - {name: a, min: {cpu: "1x"}, max: {cpu: "2"}}\n',
        'The ElasticQuotaTree "elasticquotatree" is invalid: spec.root.children[0].min.cpu: '
        'Invalid value: "1x": spec.root.children[0].min.cpu in body should match '
        "'^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?"
        "(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$'\n",
        id="quantity",
    ),
    pytest.param(
        '    - {name: "a/b", min: {cpu: "1"}, max: {cpu: "2"}}\n',
        'The ElasticQuotaTree "elasticquotatree" is invalid: spec.root.children[0].name: Invalid '
        'value: "a/b": spec.root.children[0].name in body should match '
        "'^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$'\n",
        id="node-name",
    ),
]
"""A tree a cluster with deploy/base/crds refuses at the door (kubectl's wording of a 422:
helpers.go StandardErrorMessage; a CEL rule's cause is field.Invalid(path, <type>, message) in
apiextensions-apiserver's cel validation; a pattern's is kube-openapi's 'in body should
match'). What needs the whole tree (children's mins above the parent's) is Usher's check."""


@needs_kubectl
@pytest.mark.parametrize(("children", "answer"), BAD_TREES)
async def test_a_bad_tree_is_refused_by_the_crds_rules(
    emu: KubeEmulator, tmp_path: Path, children: str, answer: str
) -> None:
    assert await kubectl(emu, tmp_path, "apply", "-f", "-", stdin=TREE + children) == (1, answer)
    assert await kubectl(emu, tmp_path, "get", "eqt", "-A", "-o", "name") == (0, "")


@needs_kubectl
async def test_a_tree_only_usher_can_judge_is_stored(emu: KubeEmulator, tmp_path: Path) -> None:
    """Children's mins above their parent's: per object, every rule passes; the API server
    stores it and Usher's own check (status condition, Event) refuses it."""
    children = (
        '    - {name: a, min: {cpu: "80"}, max: {cpu: "100"}}\n'
        '    - {name: b, min: {cpu: "80"}, max: {cpu: "100"}}\n'
    )
    code, out = await kubectl(emu, tmp_path, "apply", "-f", "-", stdin=TREE + children)
    assert (code, out) == (0, "elasticquotatree.scheduling.sigs.k8s.io/elasticquotatree created\n")
    walkthrough = REPO / "usher" / "demo" / "walkthrough-tree.yaml"
    code, out = await kubectl(emu, tmp_path, "apply", "-f", str(walkthrough))
    assert (code, out) == (
        0,
        "elasticquotatree.scheduling.sigs.k8s.io/elasticquotatree configured\n",
    )


@needs_kubectl
async def test_server_side_apply_creates_then_updates(emu: KubeEmulator, tmp_path: Path) -> None:
    await kubectl(emu, tmp_path, "create", "namespace", "team-a")
    applied = (0, "job.batch/pi serverside-applied\n")  # server-side
    assert await kubectl(emu, tmp_path, "apply", "--server-side", "-f", "-", stdin=job()) == applied
    relabelled = job(label="etl")
    assert (
        await kubectl(emu, tmp_path, "apply", "--server-side", "-f", "-", stdin=relabelled)
        == applied
    )
    code, out = await kubectl(emu, tmp_path, "get", "jobs", "-n", "team-a", "-l", "team=etl")
    assert code == 0 and table(out)[1][0] == "pi"
