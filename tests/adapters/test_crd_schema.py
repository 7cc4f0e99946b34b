"""The CRDs' schemas and CEL rules as the emulator applies them (``crd_schema``).

Table: what one object shows is refused with kube-apiserver's wording and field path. Property:
the CEL rule "min must not exceed max" and Usher's own tree check agree on every node written
in any Kubernetes notation (to the millicore, Usher's unit), so a tree the API server stores is
never refused by Usher for it, and the other way round.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from usher.core.model.errors import InputError
from usher.core.tree.quota_tree import parse_tree
from usher.local.kube_emulator import resource
from usher.local.kube_emulator.crd_schema import NOT_CHECKED, crd_causes

TREES = resource("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees")
QUEUES = resource("scheduling.x-k8s.io", "v1alpha1", "queues")


def tree(*children: dict[str, Any]) -> dict[str, Any]:
    root = {"name": "root", "min": {"cpu": "1000"}, "max": {"cpu": "1000"}}
    return {
        "apiVersion": TREES.api_version,
        "kind": TREES.kind,
        "metadata": {"name": "t", "namespace": "kube-system"},
        "spec": {"root": {**root, "children": list(children)}},
    }


CASES = [
    (tree({"name": "a", "min": {"cpu": "2"}, "max": {"cpu": "3"}}), []),
    (
        tree({"name": "a", "min": {"cpu": 4}, "max": {"cpu": "3500m"}}),
        [("spec.root.children[0].min", "min must not exceed max for any resource")],
    ),
    (
        tree({"name": "a", "children": [{"name": "b"}, {"name": "b"}]}),
        [("spec.root.children[0].children", "children must have unique names")],
    ),
    (
        tree({"name": "a", "namespaces": ["x", "x"]}),
        [("spec.root.children[0].namespaces", "namespaces must be unique")],
    ),
    (
        tree({"name": "a", "namespaces": ["x"], "children": [{"name": "b"}]}),
        [("spec.root.children[0].namespaces", "namespaces are only allowed on leaves")],
    ),
    (
        tree({"min": {"cpu": "1"}}),
        [
            ("spec.root.children[0].name", "Required value"),
            ("<nil>", f'Invalid value: "null": {NOT_CHECKED}'),
        ],
    ),
    (
        tree({"name": "a", "max": {"cpu": True}}),
        [
            (
                "spec.root.children[0].max.cpu",
                'Invalid value: "boolean": spec.root.children[0].max.cpu in body must be of '
                'type integer,string: "boolean"',
            ),
            ("<nil>", f'Invalid value: "null": {NOT_CHECKED}'),
        ],
    ),
]


@pytest.mark.parametrize(("obj", "expected"), CASES)
def test_a_tree_is_refused_naming_the_field(obj: dict[str, Any], expected: list[Any]) -> None:
    found = [(path, message) for _, path, message in crd_causes(TREES, obj)]
    assert [path for path, _ in found] == [path for path, _ in expected]
    for (_, message), (_, wanted) in zip(found, expected, strict=True):
        assert message.endswith(wanted), message


def test_a_queue_is_refused_by_its_enum_and_bounds() -> None:
    queue = {"spec": {"priority": 2**31, "queuePolicy": "Fifo", "priorityClassName": "p"}}
    assert crd_causes(QUEUES, queue) == [
        (
            "FieldValueInvalid",
            "spec.priority",
            "Invalid value: 2147483648: spec.priority in body should be less than or equal "
            "to 2147483647",
        ),
        (
            "FieldValueNotSupported",
            "spec.queuePolicy",
            'Unsupported value: "Fifo": supported values: "Round", "Block"',
        ),
    ]


NOTATIONS = [
    lambda m: f"{m}m",
    lambda m: str(m // 1000) if m % 1000 == 0 else f"{m}m",
    lambda m: f"{m / 1000:.3f}",
    lambda m: m // 1000 if m % 1000 == 0 else f"{m}m",
    lambda m: f"{m}e-3",
]


@given(
    st.integers(0, 10**7),
    st.integers(0, 10**7),
    st.sampled_from(NOTATIONS),
    st.sampled_from(NOTATIONS),
)
def test_the_crd_and_usher_agree_on_min_within_max(
    low: int, high: int, write_min: Any, write_max: Any
) -> None:
    child = {"name": "a", "min": {"cpu": write_min(low)}, "max": {"cpu": write_max(high)}}
    obj = tree(child)
    obj["spec"]["root"]["min"] = obj["spec"]["root"]["max"] = {"cpu": "100000"}
    refused_by_crd = any("min must not exceed max" in m for _, _, m in crd_causes(TREES, obj))
    try:
        parse_tree(obj)
        codes: list[str] = []
    except InputError as exc:
        codes = [error.code for error in exc.errors]
    assert refused_by_crd == ("min-exceeds-max" in codes) == (low > high)
