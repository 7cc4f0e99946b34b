"""What the e2e tests against ``usher up`` share to set a stack up: a node, and the
walkthrough's tree with the demo's budget leaf (B1), applied as ``usher apply`` does.
Never imports a test module and never starts a process of its own but ``usher apply``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.cli.stack_process import usher
from tests.e2e.harness import node_manifest
from usher.adapters.kube import KubeClient, Resource
from usher.core.tree.budget_spec import BUDGETS_ATTRIBUTE
from usher.demo.budget import budget_leaf

REPO = Path(__file__).resolve().parents[2]
TREE = REPO / "usher" / "demo" / "walkthrough-tree.yaml"


async def add_node(home: Path, cpu: str, memory: str) -> None:
    """A node ``node-1`` of ``cpu`` and ``memory``, created with its status as a kubelet
    registers one (the emulator's kubelet then runs pods on it)."""
    node = node_manifest({"name": "node-1", "allocatable": {"cpu": cpu, "memory": memory}})
    kubeconfig = Path(json.loads((home / "stack.json").read_text())["kubeconfig"])
    async with await KubeClient.from_kubeconfig(kubeconfig) as kube:
        await kube.create(Resource("", "v1", "nodes", "Node"), None, node)


def budget_tree(budget: str | None = None) -> dict[str, Any]:
    """The walkthrough's tree with the demo's budget leaf (its budget replaced when given)."""
    tree: dict[str, Any] = yaml.safe_load(TREE.read_text())
    leaf = budget_leaf()
    if budget is not None:
        leaf["attributes"][BUDGETS_ATTRIBUTE] = budget
    tree["spec"]["root"]["children"].append(leaf)
    return tree


def apply_tree(home: Path, tree: dict[str, Any], folder: Path) -> None:
    """``usher apply -f`` the tree, written to ``folder`` (as JSON: YAML reads it)."""
    path = folder / "tree.yaml"
    path.write_text(json.dumps(tree))
    applied = usher(home, "apply", "-f", str(path))
    assert applied.returncode == 0, applied.stderr
