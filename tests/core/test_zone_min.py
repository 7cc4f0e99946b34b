"""Guarantees per zone in the quota tree (Z4, ``usher.io/zone-min``), table-driven.

Parsing (T1 names the attribute), T1's checks against ``min``, ``zone-max`` and the parent's
zone guarantee, the two predicates the engine and the ledger share, and reclaim through the
engine: who is taken for an owner below its guarantee in a zone, and the preemptor's check
(``Engine.check_preemption``, on the log alone) accepting exactly what the pass chose.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from schemas import (
    Admitted,
    Millis,
    Preempted,
    QuotaNode,
    QuotaPath,
    QuotaTreeApplied,
    WorkloadKey,
    WorkloadObserved,
    Zone,
)
from tests.builders.events import CORE, admitted, cpu, observed
from tests.builders.manifests import elastic_quota_tree, quota_node
from usher.core.engine.facade import Engine
from usher.core.model.config import EngineConfig
from usher.core.model.errors import TreeInvalid
from usher.core.tree.quota_tree import parse_tree
from usher.core.tree.zone_quota import (
    ZONE_MIN_ATTRIBUTE,
    ZoneCaps,
    parse_zone_min,
    within_zone_min,
    zone_borrowed_resource,
)

A100, H100 = Zone("a100"), Zone("h100")
FIELD = f"spec.root.attributes.{ZONE_MIN_ATTRIBUTE}"


# ---------------------------------------------------------------- parsing and T1


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "no zone given"),
        ("cpu=8", "is not '<zone>: <resource>=<quantity>, ...'"),
        ("a100:", "guarantees no resource"),
        ("a100: cpu=1; a100: cpu=2", "zone a100 is guaranteed twice"),
        ("a100: cpu=eight", ""),
    ],
)
def test_zone_min_refuses_bad_values_naming_the_attribute(text: str, says: str) -> None:
    minimums, errors = parse_zone_min({ZONE_MIN_ATTRIBUTE: text}, "spec.root.attributes")
    assert minimums == {}
    assert errors and all(e.path.startswith(FIELD) for e in errors)
    assert any(says in e.message for e in errors)


def test_zone_min_parses_like_zone_max() -> None:
    text = "a100: cpu=2, memory=1Gi; h100: cpu=500m"
    assert parse_zone_min({ZONE_MIN_ATTRIBUTE: text}, "") == (
        {A100: {"cpu": 2000, "memory": 2**30}, H100: {"cpu": 500}},
        [],
    )


def _manifest(
    root_attributes: dict[str, str], children: Sequence[tuple[int, dict[str, str]]]
) -> dict[str, object]:
    """A root of 100 cpu with children ``(min cores, attributes)``."""
    kids = [
        quota_node(f"t{i}", max_cpu="100", min_cpu=str(low), attributes=attrs)
        for i, (low, attrs) in enumerate(children)
    ]
    root = quota_node(
        "root", max_cpu="100", min_cpu="100", attributes=root_attributes, children=kids
    )
    return elastic_quota_tree(root, name="t")


ZMIN, ZMAX = ZONE_MIN_ATTRIBUTE, "usher.io/zone-max"
KID0 = "spec.root.children[0](t0).attributes.usher.io/zone-min"


@pytest.mark.parametrize(
    ("case", "root", "children", "refused"),
    [
        ("within min and zone-max", {ZMAX: "a100: cpu=40"}, [(40, {ZMIN: "a100: cpu=20"})], []),
        ("above the node's min", {}, [(10, {ZMIN: "a100: cpu=20"})], [(KID0, "> min 10")]),
        (
            "a resource its min does not name",
            {},
            [(10, {ZMIN: "a100: memory=1Gi"})],
            [(KID0, "zone a100 memory 1Gi > min 0")],
        ),
        (
            "above its own zone-max",
            {},
            [(40, {ZMIN: "a100: cpu=20", ZMAX: "a100: cpu=10"})],
            [(KID0, "> usher.io/zone-max 10")],
        ),
        (
            "children above the parent's zone guarantee",
            {ZMIN: "a100: cpu=30"},
            [(40, {ZMIN: "a100: cpu=20"}), (40, {ZMIN: "a100: cpu=20"})],
            [(FIELD, "sum of children zone-min cpu in zone a100 40 > parent root zone-min 30")],
        ),
        (
            "a parent guaranteeing nothing there bounds them by min only",
            {},
            [(40, {ZMIN: "a100: cpu=40"}), (40, {ZMIN: "a100: cpu=40"})],
            [],
        ),
    ],
)
def test_t1_checks_zone_min_as_it_checks_min(
    case: str,
    root: dict[str, str],
    children: list[tuple[int, dict[str, str]]],
    refused: list[tuple[str, str]],
) -> None:
    manifest = _manifest(root, children)
    if not refused:
        parse_tree(manifest)
        return
    with pytest.raises(TreeInvalid) as caught:
        parse_tree(manifest)
    errors = [(e.path, e.message) for e in caught.value.errors]
    for path, says in refused:
        assert any(p == path and says in m for p, m in errors), (case, errors)
    assert len(errors) == len(refused), (case, errors)


# ---------------------------------------------------------------- the shared predicates


@pytest.mark.parametrize(
    ("minimums", "used", "asked", "within", "borrowed"),
    [
        ({}, {A100: {"cpu": 50}}, [("cpu", 10)], True, None),  # none declared: min decides
        ({A100: {"cpu": 20}}, {}, [("cpu", 20)], True, None),
        ({A100: {"cpu": 20}}, {A100: {"cpu": 10}}, [("cpu", 11)], False, None),
        ({A100: {"cpu": 20}}, {A100: {"cpu": 30}}, [("cpu", 1)], False, "cpu"),
        ({A100: {"cpu": 20}}, {A100: {"cpu": 30, "gpu": 9}}, [("gpu", 1)], True, None),
        ({H100: {"cpu": 0}}, {H100: {"cpu": 5}}, [("cpu", 1)], True, None),  # another zone
    ],
)
def test_zone_guarantee_predicates(
    minimums: ZoneCaps,
    used: ZoneCaps,
    asked: list[tuple[str, int]],
    within: bool,
    borrowed: str | None,
) -> None:
    assert within_zone_min(minimums, used, A100, asked) is within
    assert zone_borrowed_resource(minimums, used, A100, asked) == borrowed


# ---------------------------------------------------------------- reclaim through the engine


def _tree(a: str | None, b: str | None) -> QuotaNode:
    """root 100 cpu, a100 capped at 40; A and B min 40, C min 20; zone-mins as given."""

    def leaf(name: str, low: int, zone_min: str | None) -> QuotaNode:
        attributes = {ZONE_MIN_ATTRIBUTE: zone_min} if zone_min else {}
        return QuotaNode(
            name=name,
            min=cpu(low),
            max=cpu(100),
            namespaces=[name.lower()],
            attributes=attributes,
        )

    return QuotaNode(
        name="root",
        min=cpu(100),
        max=cpu(100),
        attributes={"usher.io/zone-max": "a100: cpu=40"},
        children=[leaf("A", 40, a), leaf("B", 40, b), leaf("C", 20, None)],
    )


@dataclass(frozen=True)
class Case:
    name: str
    a: str | None
    b: str | None
    running: list[tuple[str, str, int]]
    """``(namespace/name, zone, cores)`` admitted before the owner comes."""
    victims: list[str]
    """What the pass preempts for ``a/owner`` (20 cpu in a100)."""
    refused: list[str] = field(default_factory=list)
    """Victims the preemptor's check refuses for it, each alone."""


CASES = [
    Case(
        "an owner below its zone-min takes a borrower of the zone within its total min",
        "a100: cpu=20",
        "a100: cpu=20",
        [("b/one", "a100", 20), ("b/two", "a100", 20)],
        ["b/two"],
    ),
    Case(
        "without zone-min nobody borrows: the old reclaim",
        None,
        None,
        [("b/one", "a100", 20), ("b/two", "a100", 20)],
        [],
        ["b/two"],
    ),
    Case(
        "only a declared guarantee lends",
        "a100: cpu=20",
        None,
        [("b/one", "a100", 20), ("b/two", "a100", 20)],
        [],
        ["b/two"],
    ),
    Case(
        "an owner without a guarantee in the zone reclaims by min only",
        None,
        "a100: cpu=20",
        [("b/one", "a100", 20), ("b/two", "a100", 20)],
        [],
        ["b/two"],
    ),
    Case(
        "an owner beyond its zone-min does not reclaim, though within its min",
        "a100: cpu=10",
        "a100: cpu=10",
        [("b/one", "a100", 20), ("b/two", "a100", 20)],
        [],
        ["b/two"],
    ),
    Case(
        "victims above a guarantee in another zone are never taken",
        "a100: cpu=20",
        "a100: cpu=20; h100: cpu=0",
        [("b/a", "a100", 20), ("b/h", "h100", 20), ("c/a", "a100", 20)],
        [],
        ["b/h", "c/a"],
    ),
    Case(
        "a total borrower is still taken (R5), in the zone it lends (Z1)",
        "a100: cpu=20",
        "a100: cpu=20",
        [("b/a", "a100", 20), ("c/a", "a100", 20), ("c/more", "h100", 20)],
        ["c/a"],
    ),
]


def _log(case: Case) -> list[WorkloadObserved | Admitted]:
    out: list[WorkloadObserved | Admitted] = []
    for created, (key, zone, cores) in enumerate(case.running):
        namespace, _, name = key.partition("/")
        out.append(observed(namespace, name, cores, zone=zone, created=created))
        leaf = QuotaPath(f"root/{namespace.upper()}")
        queue = f"root-{namespace}-{namespace}"
        out.append(admitted(key, cores, quota=leaf, queue=queue, zone=zone))
    out.append(observed("a", "owner", 20, zone="a100", created=len(case.running)))
    return out


def _engine(case: Case) -> Engine:
    engine = Engine(EngineConfig())
    engine.apply(QuotaTreeApplied(root=_tree(case.a, case.b)), Millis(0))
    for event in _log(case):
        engine.apply(event, Millis(1))
    return engine


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reclaim_restores_a_guarantee_in_its_zone(case: Case) -> None:
    proposer = _engine(case)
    decided = [d for d in proposer.decide(Millis(2)) if isinstance(d, Preempted)]
    assert sorted(d.workload for d in decided) == sorted(case.victims), case.name
    owner = WorkloadKey("a/owner")
    checker = _engine(case)  # the preemptor's projection: the log alone, no pass of its own
    before = checker.quota_used()
    if decided:
        assert checker.check_preemption(owner, [d.workload for d in decided], Millis(2)) is None
    for victim in case.refused:
        reason = checker.check_preemption(owner, [WorkloadKey(victim)], Millis(2))
        assert reason is not None and reason.code == "StaleView", (case.name, victim)
    assert checker.quota_used() == before


def test_a_zone_reclaim_names_the_zone_and_the_numbers() -> None:
    proposer = _engine(CASES[0])
    [decided] = [d for d in proposer.decide(Millis(2)) if isinstance(d, Preempted)]
    reason = decided.reason
    assert reason is not None and reason.code == "Reclaim"
    assert reason.message == (
        "a/owner reclaims the guarantee of root/A in zone a100: "
        "root/B cpu in zone a100: 40 used > min 20"
    )
    assert (reason.node, reason.used, reason.limit) == ("root/B", 40 * CORE, 20 * CORE)


def test_a_preview_says_why_an_owner_beyond_its_zone_min_cannot_reclaim() -> None:
    engine = _engine(CASES[4])
    why, victims = engine.reclaim_preview(WorkloadKey("a/owner"), Millis(2))
    assert victims == []
    assert why is not None and why.startswith(
        "root/A cpu in zone a100: 0 used + 20 requested > min 10"
    )
