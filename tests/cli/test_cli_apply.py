"""`usher apply` against the Kubernetes API emulator: after kubectl, and with hostile YAML.

kubectl keeps its last-applied annotation in its own shape (``"annotations": {}`` when the
manifest has none); ``usher apply`` of the same tree afterwards must work like a second
``kubectl apply``. YAML that is valid but no manifest needs (a node that contains itself, or
aliases that expand exponentially) gets one line naming the problem and exit code 3.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client, config

from usher.client.manifests import LAST_APPLIED, MAX_YAML_NODES, parse_yaml
from usher.local.kube_emulator import KubeEmulator

REPO = Path(__file__).resolve().parents[2]
TREE = REPO / "usher" / "demo" / "walkthrough-tree.yaml"
GROUP, VERSION, PLURAL = "scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees"
HEAD = """apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: elasticquotatree, namespace: kube-system}
"""
RECURSIVE = (
    HEAD
    + """spec:
  root: &r
    name: root
    max: {cpu: "100"}
    min: {cpu: "100"}
    children: [*r]
"""
)


def alias_bomb() -> str:
    """Nine levels of nine aliases: 9**9 namespaces once expanded, 1 KB on disk."""
    lines = [HEAD.rstrip(), 'x0: &x0 ["a", "b", "c", "d", "e", "f", "g", "h", "i"]']
    lines += [f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 9)}]" for i in range(1, 10)]
    lines.append('spec: {root: {name: root, max: {cpu: "1"}, min: {cpu: "1"}, namespaces: *x9}}')
    return "\n".join(lines) + "\n"


@pytest.fixture
async def emu(tmp_path: Path) -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator(kubeconfig_path=tmp_path / "kubeconfig") as emulator:
        yield emulator


async def usher(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "usher.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def kubectl_last_applied(manifest: dict[str, Any]) -> str:
    """What ``kubectl apply`` stores: the manifest with ``annotations: {}``, as Go marshals it."""
    meta = {**manifest["metadata"], "annotations": {}}
    return json.dumps({**manifest, "metadata": meta}, sort_keys=True, separators=(",", ":")) + "\n"


async def test_usher_apply_after_kubectl_apply_of_the_same_tree(
    emu: KubeEmulator, tmp_path: Path
) -> None:
    tree = yaml.safe_load(TREE.read_text())
    body = json.loads(json.dumps(tree))
    body["metadata"]["annotations"] = {
        LAST_APPLIED: kubectl_last_applied(tree),
        "example.com/owner": "platform-team",  # someone else's annotation
    }
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(emu.kubeconfig_path), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        custom = client.CustomObjectsApi(api)
        await custom.create_namespaced_custom_object(GROUP, VERSION, "kube-system", PLURAL, body)
        target = ("--kubeconfig", str(emu.kubeconfig_path))
        same = await usher("apply", "-f", str(TREE), *target)
        assert (same.returncode, same.stderr) == (0, "")
        label = "elasticquotatree.scheduling.sigs.k8s.io/elasticquotatree"
        assert same.stdout.strip() == f"{label} unchanged"
        # A change after kubectl: applied, someone else's annotation kept, ours recorded.
        tree["spec"]["root"]["children"][1]["max"]["cpu"] = "90"
        changed = tmp_path / "tree.yaml"
        changed.write_text(yaml.safe_dump(tree))
        applied = await usher("apply", "-f", str(changed), *target)
        assert (applied.returncode, applied.stdout.strip()) == (0, f"{label} configured")
        live = await custom.get_namespaced_custom_object(
            GROUP, VERSION, "kube-system", PLURAL, "elasticquotatree"
        )
    assert live["spec"]["root"]["children"][1]["max"]["cpu"] == "90"
    annotations = live["metadata"]["annotations"]
    assert annotations["example.com/owner"] == "platform-team"
    recorded = json.loads(annotations[LAST_APPLIED])
    assert recorded["spec"]["root"]["children"][1]["max"]["cpu"] == "90"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            RECURSIVE,
            "document 1: line 5 column 9: recursive YAML alias: the node anchored here "
            "contains an alias to itself",
        ),
        (
            alias_bomb(),
            f"document 1: YAML aliases expand to more than {MAX_YAML_NODES:,} nodes (an alias "
            "bomb?); write the values out instead",
        ),
    ],
    ids=["recursive", "alias-bomb"],
)
async def test_hostile_yaml_is_one_line_and_exit_3(
    emu: KubeEmulator, tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "tree.yaml"
    path.write_text(text)
    version = emu.store.resource_version
    for args in (
        ("apply", "-f", str(path), "--kubeconfig", str(emu.kubeconfig_path)),
        ("what-if", "--tree", str(path), "--oversell", "2", "--file", str(tmp_path / "none")),
    ):
        started = time.monotonic()
        result = await usher(*args)
        assert (result.returncode, result.stdout) == (3, ""), result.stderr
        assert result.stderr == f"usher: {path}: {expected}\n"
        assert time.monotonic() - started < 30
    assert emu.store.resource_version == version  # nothing was written


def test_aliases_that_only_share_values_still_load() -> None:
    text = (
        HEAD
        + """spec:
  root:
    name: root
    max: &all {cpu: "100"}
    min: *all
    children:
      - {name: a, max: *all, min: {cpu: "60"}, namespaces: &ns [user-a]}
      - {name: b, max: *all, min: {cpu: "40"}, namespaces: *ns}
"""
    )
    [tree] = parse_yaml(text, "shared.yaml")
    assert isinstance(tree, dict)
    children = tree["spec"]["root"]["children"]
    assert [c["max"] for c in children] == [{"cpu": "100"}, {"cpu": "100"}]
    assert children[1]["namespaces"] == ["user-a"]


def test_manifests_built_in_memory_are_checked_like_a_files_documents() -> None:
    """``AsyncClient.apply_manifests`` (the demo turns on a ready timeout with it) checks
    what it is given as ``usher apply`` checks a file, naming the source and the document."""
    from usher.client.errors import BadInput
    from usher.client.manifests import documents_of

    [tree] = yaml.safe_load_all(TREE.read_text())
    [document] = documents_of([tree], "demo: ready timeout")
    assert document.where == "demo: ready timeout: document 1"
    assert document.name == "elasticquotatree"
    with pytest.raises(BadInput) as refused:
        documents_of([tree, {"apiVersion": "v1", "kind": "Secret"}], "demo")
    assert refused.value.message.startswith("demo: document 2: usher apply does not handle Secret")
