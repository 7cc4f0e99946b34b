"""ElasticQuotaTree parsing: the demo tree, every rule of T1 (docs/admission-rules.md), walks."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import FieldError, QuotaNode, QuotaPath
from usher.core.model.errors import TreeInvalid
from usher.core.tree.quota_tree import (
    iter_nodes,
    leaf_paths,
    leaf_queue_name,
    parse_tree,
    queue_name,
    validate_tree,
)

GI = 2**30

# The tree of scenarios/01-walkthrough-round.yaml (kube-queue's walkthrough), verbatim.
WALKTHROUGH_TREE_YAML = """
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: elasticquotatree, namespace: kube-system}
spec:
  root:
    name: root
    max: {cpu: "100", memory: 100Gi, nvidia.com/gpu: "4"}
    min: {cpu: "100", memory: 100Gi, nvidia.com/gpu: "4"}
    children:
      - name: Department-a
        max: {cpu: "100", memory: 100Gi, nvidia.com/gpu: "4"}
        min: {cpu: "60", memory: 60Gi, nvidia.com/gpu: "3"}
        namespaces: [user-a, user-b]
      - name: Department-b
        max: {cpu: "100", memory: 100Gi, nvidia.com/gpu: "4"}
        min: {cpu: "40", memory: 40Gi, nvidia.com/gpu: "1"}
        namespaces: [user-c]
"""

FULL = {"cpu": 100_000, "memory": 100 * GI, "nvidia.com/gpu": 4}

WALKTHROUGH_ROOT = QuotaNode(
    name="root",
    min=FULL,
    max=FULL,
    children=[
        QuotaNode(
            name="Department-a",
            min={"cpu": 60_000, "memory": 60 * GI, "nvidia.com/gpu": 3},
            max=FULL,
            namespaces=["user-a", "user-b"],
        ),
        QuotaNode(
            name="Department-b",
            min={"cpu": 40_000, "memory": 40 * GI, "nvidia.com/gpu": 1},
            max=FULL,
            namespaces=["user-c"],
        ),
    ],
)

A = "spec.root.children[0](Department-a)"
B = "spec.root.children[1](Department-b)"

Manifest = dict[str, Any]


def walkthrough() -> Manifest:
    loaded: Manifest = yaml.safe_load(WALKTHROUGH_TREE_YAML)
    return loaded


def root_of(manifest: Manifest) -> dict[str, Any]:
    node: dict[str, Any] = manifest["spec"]["root"]
    return node


def child(manifest: Manifest, index: int) -> dict[str, Any]:
    node: dict[str, Any] = root_of(manifest)["children"][index]
    return node


def errors_of(manifest: object) -> list[tuple[str, str, str]]:
    with pytest.raises(TreeInvalid) as caught:
        parse_tree(manifest)
    return [(e.path, e.code, e.message) for e in caught.value.errors]


def test_walkthrough_tree_parses_to_canonical_integers() -> None:
    assert parse_tree(walkthrough()) == WALKTHROUGH_ROOT


def test_walkthrough_tree_is_valid_as_typed_tree() -> None:
    assert validate_tree(WALKTHROUGH_ROOT) == []


def test_tree_with_attributes_and_depth_parses() -> None:
    manifest = walkthrough()
    department_a = child(manifest, 0)
    department_a.pop("namespaces")
    department_a["attributes"] = {
        "usher.io/within-quota": "LowerPriority",
        "usher.io/min-runtime-seconds": "60",
    }
    department_a["children"] = [
        {"name": "team_x", "min": {"cpu": "10"}, "max": {"cpu": "50"}, "namespaces": ["x"]},
        {"name": "team-y", "namespaces": ["y"]},
    ]
    root = parse_tree(manifest)
    parsed_a = root.children[0]
    assert parsed_a.attributes == {
        "usher.io/within-quota": "LowerPriority",
        "usher.io/min-runtime-seconds": "60",
    }
    assert parsed_a.children == [
        QuotaNode(name="team_x", min={"cpu": 10_000}, max={"cpu": 50_000}, namespaces=["x"]),
        QuotaNode(name="team-y", namespaces=["y"]),
    ]


Mutation = Callable[[Manifest], object]


def _set(path: list[Any], value: object) -> Mutation:
    def mutate(manifest: Manifest) -> None:
        target: Any = manifest
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _delete(path: list[Any]) -> Mutation:
    def mutate(manifest: Manifest) -> None:
        target: Any = manifest
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return mutate


R = ["spec", "root"]
CA = [*R, "children", 0]
CB = [*R, "children", 1]

ERROR_CASES: list[Any] = [
    pytest.param(
        [_set(["apiVersion"], "v1")],
        [
            (
                "apiVersion",
                "invalid-api-version",
                "apiVersion must be scheduling.sigs.k8s.io/v1beta1, got 'v1'",
            )
        ],
        id="wrong-api-version",
    ),
    pytest.param(
        [_set(["kind"], "ElasticQuota")],
        [("kind", "invalid-kind", "kind must be ElasticQuotaTree, got 'ElasticQuota'")],
        id="wrong-kind",
    ),
    pytest.param(
        [_delete(["spec"])],
        [("spec", "missing-field", "spec is required")],
        id="missing-spec",
    ),
    pytest.param(
        [_delete(R)],
        [("spec.root", "missing-field", "spec.root is required")],
        id="missing-root",
    ),
    pytest.param(
        [_set(R, ["root"])],
        [("spec.root", "invalid-type", "spec.root must be a mapping, got list")],
        id="root-not-mapping",
    ),
    pytest.param(
        [_delete([*CA, "name"])],
        [("spec.root.children[0].name", "missing-field", "every node needs a name")],
        id="missing-name",
    ),
    pytest.param(
        [_set([*CA, "name"], 7)],
        [("spec.root.children[0].name", "invalid-type", "name must be a string, got int")],
        id="name-not-string",
    ),
    pytest.param(
        [_set([*CA, "name"], "")],
        [("spec.root.children[0].name", "invalid-name", "a node name must not be empty")],
        id="empty-name",
    ),
    pytest.param(
        [_set([*CA, "name"], "a/b")],
        [
            (
                "spec.root.children[0](a/b).name",
                "invalid-name",
                "node name 'a/b' must not contain '/'",
            )
        ],
        id="slash-in-name",
    ),
    pytest.param(
        [_set([*CB, "name"], "Department-a")],
        [
            (
                "spec.root.children[1](Department-a).name",
                "duplicate-name",
                f"node name 'Department-a' is already used at {A}",
            )
        ],
        id="duplicate-sibling-name",
    ),
    pytest.param(
        [_set([*CB, "name"], "root")],
        [
            (
                "spec.root.children[1](root).name",
                "duplicate-name",
                "node name 'root' is already used at spec.root",
            )
        ],
        id="child-named-like-root",
    ),
    pytest.param(
        [_set([*CB, "namespaces"], ["user-c", "user-b"])],
        [
            (
                f"{B}.namespaces[1]",
                "duplicate-namespace",
                "namespace 'user-b' already belongs to root/Department-a",
            )
        ],
        id="namespace-in-two-leaves",
    ),
    pytest.param(
        [_set([*CA, "namespaces"], ["user-a", "user-a"])],
        [
            (
                f"{A}.namespaces[1]",
                "duplicate-namespace",
                "namespace 'user-a' already belongs to root/Department-a",
            )
        ],
        id="namespace-twice-in-one-leaf",
    ),
    pytest.param(
        [_set([*R, "namespaces"], ["ops"])],
        [
            (
                "spec.root.namespaces",
                "namespaces-on-inner-node",
                "namespaces are only allowed on leaves; root has children",
            )
        ],
        id="namespaces-on-inner-node",
    ),
    pytest.param(
        [_set([*CA, "namespaces"], "user-a")],
        [(f"{A}.namespaces", "invalid-type", "namespaces must be a list, got str")],
        id="namespaces-not-list",
    ),
    pytest.param(
        [_set([*CA, "namespaces"], ["user-a", 3, ""])],
        [
            (f"{A}.namespaces[1]", "invalid-type", "a namespace must be a non-empty string, got 3"),
            (
                f"{A}.namespaces[2]",
                "invalid-type",
                "a namespace must be a non-empty string, got ''",
            ),
        ],
        id="namespace-not-string",
    ),
    pytest.param(
        [_set([*CA, "max", "cpu"], "50500m")],
        [(f"{A}.min.cpu", "min-exceeds-max", "min 60 > max 50500m")],
        id="min-above-max",
    ),
    pytest.param(
        [_delete([*CA, "max", "nvidia.com/gpu"])],
        [
            (
                f"{A}.min.nvidia.com/gpu",
                "min-key-not-in-max",
                "min names nvidia.com/gpu but max does not",
            )
        ],
        id="min-key-missing-from-max",
    ),
    pytest.param(
        [_delete([*CA, "max"])],
        [
            (f"{A}.min.cpu", "min-key-not-in-max", "min names cpu but max does not"),
            (f"{A}.min.memory", "min-key-not-in-max", "min names memory but max does not"),
            (
                f"{A}.min.nvidia.com/gpu",
                "min-key-not-in-max",
                "min names nvidia.com/gpu but max does not",
            ),
        ],
        id="child-without-max-but-with-min",
    ),
    pytest.param(
        [_set([*CA, "min", "cpu"], "80")],
        [
            (
                "spec.root.min.cpu",
                "children-min-exceed-parent-min",
                "sum of children min cpu 120 > parent root min 100",
            )
        ],
        id="children-min-above-parent-min",
    ),
    pytest.param(
        [_set([*CA, "min", "example.com/fpga"], "1"), _set([*CA, "max", "example.com/fpga"], "2")],
        [
            (
                "spec.root.min.example.com/fpga",
                "children-min-exceed-parent-min",
                "sum of children min example.com/fpga 1 > parent root min 0",
            )
        ],
        id="child-min-resource-parent-lacks",
    ),
    pytest.param(
        [_set([*R, "max", "cpu"], "110")],
        [
            ("spec.root.min.cpu", "root-min-not-max", "root min cpu 100 must equal max 110"),
        ],
        id="root-min-below-max",
    ),
    pytest.param(
        [_delete([*R, "min", "nvidia.com/gpu"])],
        [
            (
                "spec.root.min.nvidia.com/gpu",
                "children-min-exceed-parent-min",
                "sum of children min nvidia.com/gpu 4 > parent root min 0",
            ),
            (
                "spec.root.min.nvidia.com/gpu",
                "root-min-not-max",
                "root min nvidia.com/gpu is missing; it must equal max 4",
            ),
        ],
        id="root-min-lacks-resource",
    ),
    pytest.param(
        [_delete([*R, "max"])],
        [
            (
                "spec.root.max",
                "missing-field",
                "the root must set max (root min == max is the cluster's capacity)",
            ),
        ],
        id="root-without-max",
    ),
    pytest.param(
        [_delete([*R, "min"])],
        [
            (
                "spec.root.min",
                "missing-field",
                "the root must set min (root min == max is the cluster's capacity)",
            ),
        ],
        id="root-without-min",
    ),
    pytest.param(
        [_set([*CA, "min", "cpu"], "-1")],
        [(f"{A}.min.cpu", "invalid-quantity", "quantity '-1' is negative")],
        id="negative-quantity",
    ),
    pytest.param(
        [_set([*R, "min", "memory"], "lots")],
        [
            (
                "spec.root.min.memory",
                "invalid-quantity",
                "quantity 'lots' is not Kubernetes notation (e.g. 100, 500m, 1.5, 10Gi, 1e3)",
            )
        ],
        id="malformed-quantity-suppresses-rules-about-it",
    ),
    pytest.param(
        [_set([*CA, "max"], ["cpu"])],
        [
            (
                f"{A}.max",
                "not-a-mapping",
                "expected a mapping of resource name to quantity, got list",
            )
        ],
        id="max-not-mapping",
    ),
    pytest.param(
        [_set([*R, "children"], {"name": "x"})],
        [("spec.root.children", "invalid-type", "children must be a list, got dict")],
        id="children-not-list",
    ),
    pytest.param(
        [_set([*R, "children", 1], "Department-b")],
        [("spec.root.children[1]", "not-a-mapping", "a child must be a mapping, got str")],
        id="child-not-mapping",
    ),
    pytest.param(
        [_set([*CA, "attributes"], {"usher.io/min-runtime-seconds": 60})],
        [
            (
                f"{A}.attributes.usher.io/min-runtime-seconds",
                "invalid-type",
                "attribute values must be strings (quote them), got 60",
            )
        ],
        id="attribute-not-string",
    ),
    pytest.param(
        [_set([*CA, "attributes"], ["x"])],
        [(f"{A}.attributes", "invalid-type", "attributes must be a mapping, got list")],
        id="attributes-not-mapping",
    ),
    pytest.param(
        [_set([*CA, "attributes"], {"usher.io/within-quota": "Always"})],
        [
            (
                f"{A}.attributes.usher.io/within-quota",
                "invalid-attribute",
                "usher.io/within-quota must be one of Never, LowerPriority, got 'Always'",
            )
        ],
        id="within-quota-unknown",
    ),
    pytest.param(
        [_set([*CA, "attributes"], {"usher.io/min-runtime-seconds": "-5"})],
        [
            (
                f"{A}.attributes.usher.io/min-runtime-seconds",
                "invalid-attribute",
                "usher.io/min-runtime-seconds must be a whole number of seconds from 0 to 2592000 "
                "(ASCII digits only), got '-5'",
            )
        ],
        id="min-runtime-negative",
    ),
    pytest.param(
        [_set([*CA, "attributes"], {"usher.io/min-runtime-seconds": "1.5"})],
        [
            (
                f"{A}.attributes.usher.io/min-runtime-seconds",
                "invalid-attribute",
                "usher.io/min-runtime-seconds must be a whole number of seconds from 0 to 2592000 "
                "(ASCII digits only), got '1.5'",
            )
        ],
        id="min-runtime-fractional",
    ),
    pytest.param(
        [_set([*CB, "name"], "department_a"), _set([*CB, "namespaces"], ["user-a-x"])],
        [],  # distinct queue names: root-department-a-user-a vs root-department-a-user-a-x
        id="similar-names-distinct-queues",
    ),
    pytest.param(
        [
            _set([*CB, "name"], "department_a"),
            _delete([*CA, "namespaces"]),
            _delete([*CB, "namespaces"]),
        ],
        [
            (
                "spec.root.children[1](department_a).name",
                "duplicate-queue-name",
                "queue name root-department-a of root/department_a is also root/Department-a's",
            )
        ],
        id="colliding-queue-names",
    ),
    pytest.param(
        [
            _set([*CA, "min", "cpu"], "170"),
            _set([*CB, "name"], "Department-a"),
            _set([*R, "min", "memory"], "x"),
        ],
        [
            (
                "spec.root.min.memory",
                "invalid-quantity",
                "quantity 'x' is not Kubernetes notation (e.g. 100, 500m, 1.5, 10Gi, 1e3)",
            ),
            (
                "spec.root.children[1](Department-a).name",
                "duplicate-name",
                f"node name 'Department-a' is already used at {A}",
            ),
            (
                "spec.root.min.cpu",
                "children-min-exceed-parent-min",
                "sum of children min cpu 210 > parent root min 100",
            ),
            (f"{A}.min.cpu", "min-exceeds-max", "min 170 > max 100"),
        ],
        id="every-error-is-reported",
    ),
]


@pytest.mark.parametrize(("mutations", "expected"), ERROR_CASES)
def test_parse_tree_reports_every_violation(
    mutations: list[Mutation], expected: list[tuple[str, str, str]]
) -> None:
    manifest = copy.deepcopy(walkthrough())
    for mutate in mutations:
        mutate(manifest)
    if not expected:
        parse_tree(manifest)
        return
    assert errors_of(manifest) == expected


@pytest.mark.parametrize("manifest", [None, [], "tree", 3], ids=["null", "list", "str", "int"])
def test_parse_tree_rejects_non_mapping(manifest: object) -> None:
    [(path, code, _)] = errors_of(manifest)
    assert (path, code) == ("", "not-a-mapping")


def test_child_max_may_exceed_parent_max() -> None:
    manifest = walkthrough()
    child(manifest, 0)["max"]["cpu"] = "500"
    assert parse_tree(manifest).children[0].max["cpu"] == 500_000


def test_missing_min_is_empty_and_missing_max_means_no_limit() -> None:
    manifest = walkthrough()
    department_b = child(manifest, 1)
    del department_b["min"]
    del department_b["max"]
    parsed = parse_tree(manifest).children[1]
    assert (parsed.min, parsed.max) == ({}, {})


def test_unknown_node_keys_are_ignored() -> None:
    manifest = walkthrough()
    child(manifest, 0)["description"] = "research"
    assert parse_tree(manifest) == WALKTHROUGH_ROOT


def test_validate_tree_on_typed_tree_names_nodes() -> None:
    bad = msgspec.structs.replace(
        WALKTHROUGH_ROOT,
        children=[
            msgspec.structs.replace(WALKTHROUGH_ROOT.children[0], min={"cpu": 200_000}),
            msgspec.structs.replace(WALKTHROUGH_ROOT.children[1], name="", namespaces=["user-a"]),
        ],
    )
    assert validate_tree(bad) == [
        FieldError(
            path="spec.root.children[1].name",
            code="invalid-name",
            message="a node name must not be empty",
        ),
        FieldError(
            path="spec.root.children[1].namespaces[0]",
            code="duplicate-namespace",
            message="namespace 'user-a' already belongs to root/Department-a",
        ),
        FieldError(
            path="spec.root.min.cpu",
            code="children-min-exceed-parent-min",
            message="sum of children min cpu 240 > parent root min 100",
        ),
        FieldError(path=f"{A}.min.cpu", code="min-exceeds-max", message="min 200 > max 100"),
    ]


def test_iter_nodes_is_pre_order_with_parents() -> None:
    tree = QuotaNode(
        name="root",
        children=[
            QuotaNode(name="a", children=[QuotaNode(name="a1"), QuotaNode(name="a2")]),
            QuotaNode(name="b"),
        ],
    )
    assert [(path, node.name, parent) for path, node, parent in iter_nodes(tree)] == [
        ("root", "root", None),
        ("root/a", "a", "root"),
        ("root/a/a1", "a1", "root/a"),
        ("root/a/a2", "a2", "root/a"),
        ("root/b", "b", "root"),
    ]


def test_leaf_paths_of_the_walkthrough_tree() -> None:
    assert leaf_paths(WALKTHROUGH_ROOT) == {
        "root/Department-a": WALKTHROUGH_ROOT.children[0],
        "root/Department-b": WALKTHROUGH_ROOT.children[1],
    }


def test_root_alone_is_a_leaf() -> None:
    lone = QuotaNode(name="root", namespaces=["ns"])
    assert leaf_paths(lone) == {"root": lone}


@pytest.mark.parametrize(
    ("path", "namespace", "expected"),
    [
        pytest.param("root/Department-a", "user-a", "root-department-a-user-a", id="walkthrough-a"),
        pytest.param("root/Department-b", "user-c", "root-department-b-user-c", id="walkthrough-b"),
        pytest.param("root/Research/ML_Team", "ml_ns", "root-research-ml-team-ml-ns", id="deep"),
        pytest.param("root/Ops", None, "root-ops", id="no-namespace"),
        pytest.param("root/Ops", "", "root-ops", id="empty-namespace"),
        pytest.param("root", "ns", "root-ns", id="root-leaf"),
    ],
)
def test_queue_name(path: str, namespace: str | None, expected: str) -> None:
    assert queue_name(QuotaPath(path), namespace) == expected


def test_leaf_queue_name_uses_first_namespace() -> None:
    assert leaf_queue_name(QuotaPath("root/Department-a"), WALKTHROUGH_ROOT.children[0]) == (
        "root-department-a-user-a"
    )


_names = st.text(alphabet="abcXYZ-_", min_size=1, max_size=6)


@settings(max_examples=200)
@given(
    parts=st.lists(_names, min_size=1, max_size=4),
    namespace=st.text("abc-_", min_size=1, max_size=5),
)
def test_queue_name_is_lowercase_dash_joined(parts: list[str], namespace: str) -> None:
    name = queue_name(QuotaPath("/".join(parts)), namespace)
    assert name == "-".join([*parts, namespace]).lower().replace("_", "-")
    assert "/" not in name and "_" not in name and name == name.lower()
