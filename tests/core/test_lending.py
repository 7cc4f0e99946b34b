"""L1 reclaim within the cohort and L2 lending limit (usher/core/rules/lending.py): policies
inherited down the tree, what a node keeps of its idle guarantee, the check on the whole path
(tables and properties over generated trees), and the engine's preemptor check and reclaim
preview sparing whom ``usher.io/reclaim-within`` spares (scenario 182 played)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import QuotaPath, WorkloadKey
from tests.core.test_gates import _play
from usher.core.rules.lending import (
    LENDS_ALL,
    Lending,
    kept,
    lending_shortfall,
    may_reclaim_from,
    path_lending,
    reserving_nodes,
)

RECLAIM, LIMIT = "usher.io/reclaim-within", "usher.io/lending-limit"


@pytest.mark.parametrize(
    ("chain", "reclaim", "limit"),
    [
        ([{}, {}], "Any", {}),
        ([{RECLAIM: "Never"}, {}], "Never", {}),
        ([{RECLAIM: "Never"}, {RECLAIM: "Any"}], "Any", {}),
        ([{LIMIT: "cpu=4"}, {RECLAIM: "LowerPriority"}], "LowerPriority", {"cpu": 4000}),
        ([{LIMIT: "cpu=4"}, {LIMIT: "memory=1Ki"}], "Any", {"memory": 1024}),
        ([{RECLAIM: "never", LIMIT: "cpu=-1"}], "Any", {}),  # refused values read as absent
    ],
)
def test_policies_are_inherited_nearest_first(
    chain: list[dict[str, str]], reclaim: str, limit: dict[str, int]
) -> None:
    policy = path_lending(chain)
    assert (policy.reclaim, dict(policy.limit)) == (reclaim, limit)


@pytest.mark.parametrize(
    ("policy", "lendable", "restricted"),
    [
        (LENDS_ALL, None, False),
        (Lending("LowerPriority"), None, False),
        (Lending("Never"), 0, True),
        (Lending("Any", {"cpu": 3}), 3, True),
        (Lending("Any", {"memory": 3}), None, True),
        (Lending("Never", {"cpu": 3}), 0, True),
    ],
)
def test_what_a_policy_lends(policy: Lending, lendable: int | None, restricted: bool) -> None:
    assert policy.lendable("cpu") == lendable
    assert policy.restricted is restricted


@pytest.mark.parametrize(
    ("reclaim", "priority", "victim", "may"),
    [
        ("Any", 0, 1000, True),
        ("LowerPriority", 100, 99, True),
        ("LowerPriority", 100, 100, False),
        ("LowerPriority", 100, 1000, False),
        ("LowerPriority", 100, None, True),  # an ended victim: only its allocation lingers
        ("Never", 1000, 0, False),
    ],
)
def test_whom_a_reclaim_may_take(
    reclaim: str, priority: int, victim: int | None, may: bool
) -> None:
    assert may_reclaim_from(Lending(reclaim), priority, victim) is may  # type: ignore[arg-type]


# ------------------------------------------------------------------------ the path check


@dataclass
class Node:
    path: QuotaPath
    min: dict[str, int]
    used: dict[str, int]
    cap: dict[str, int]
    lending: Lending = LENDS_ALL
    children: list[QuotaPath] = field(default_factory=list)


def _tree(*nodes: Node) -> dict[QuotaPath, Node]:
    out = {node.path: node for node in nodes}
    for node in nodes:
        parent, slash, _ = node.path.rpartition("/")
        if slash:
            out[QuotaPath(parent)].children.append(node.path)
    return out


def _check(nodes: Mapping[QuotaPath, Node], leaf: str, cpu: int) -> tuple[str, int] | None:
    reserving = reserving_nodes(
        (p, QuotaPath(p.rpartition("/")[0]) if "/" in p else None, n.lending)
        for p, n in nodes.items()
    )
    parts = leaf.split("/")
    path: Sequence[Node] = [nodes[QuotaPath("/".join(parts[: i + 1]))] for i in range(len(parts))]
    short = lending_shortfall(path, nodes, reserving, [("cpu", cpu)])
    return None if short is None else (short.node, short.kept)


def _nested(a1: Lending, a1_used: int = 0) -> dict[QuotaPath, Node]:
    """Scenario 185: root 8 > D (min 6, max 6) > A1 (min 4), A2 (min 2); B (min 2)."""
    return _tree(
        Node(QuotaPath("root"), {"cpu": 8}, {"cpu": a1_used}, {"cpu": 8}),
        Node(QuotaPath("root/D"), {"cpu": 6}, {"cpu": a1_used}, {"cpu": 6}),
        Node(QuotaPath("root/D/A1"), {"cpu": 4}, {"cpu": a1_used}, {"cpu": 8}, a1),
        Node(QuotaPath("root/D/A2"), {"cpu": 2}, {}, {"cpu": 8}),
        Node(QuotaPath("root/B"), {"cpu": 2}, {}, {"cpu": 8}),
    )


@pytest.mark.parametrize(
    ("a1", "a1_used", "leaf", "cpu", "short"),
    [
        (LENDS_ALL, 0, "root/B", 8, None),
        (Lending("Never"), 0, "root/B", 4, None),  # 4 + 4 kept = 8
        (Lending("Never"), 0, "root/B", 5, ("root", 4)),
        (Lending("Never"), 0, "root/D/A2", 3, ("root/D", 4)),  # nearest node first
        (Lending("Never"), 0, "root/D/A1", 8, None),  # its own path keeps nothing from it
        (Lending("Never"), 3, "root/B", 5, ("root", 1)),  # what it uses is not idle
        (Lending("Any", {"cpu": 3}), 0, "root/B", 7, None),  # keeps 1
        (Lending("Any", {"cpu": 3}), 0, "root/B", 8, ("root", 1)),
        (Lending("Any", {"memory": 0}), 0, "root/B", 8, None),
    ],
)
def test_the_whole_path_is_checked(
    a1: Lending, a1_used: int, leaf: str, cpu: int, short: tuple[str, int] | None
) -> None:
    assert _check(_nested(a1, a1_used), leaf, cpu) == short


def test_a_parent_keeps_what_its_children_keep_within_its_own_idle() -> None:
    nodes = _nested(Lending("Never"))
    reserving = frozenset(nodes)
    assert kept(nodes[QuotaPath("root/D")], nodes, reserving, "cpu") == 4
    d = nodes[QuotaPath("root/D")]
    d.lending = Lending("Any", {"cpu": 1})  # keeps 5 of its own idle 6: more than A1's 4
    assert kept(d, nodes, reserving, "cpu") == 5


@st.composite
def _trees(draw: st.DrawFn) -> tuple[dict[QuotaPath, Node], str, int]:
    """Two departments of two leaves each under a root of 16 cpu, random policies and usage
    within each node's cap; a leaf and a request."""
    policies = st.sampled_from(
        [LENDS_ALL, Lending("LowerPriority"), Lending("Never")]
        + [Lending("Any", {"cpu": n}) for n in range(0, 6)]
    )
    nodes: list[Node] = [Node(QuotaPath("root"), {"cpu": 16}, {}, {"cpu": 16})]
    for dept in ("d0", "d1"):
        leaves = []
        for leaf in ("l0", "l1"):
            low = draw(st.integers(0, 4))
            used = draw(st.integers(0, 6))
            path = QuotaPath(f"root/{dept}/{leaf}")
            leaves.append(Node(path, {"cpu": low}, {"cpu": used}, {"cpu": 8}, draw(policies)))
        low = sum(n.min["cpu"] for n in leaves)
        used = sum(n.used["cpu"] for n in leaves)
        nodes.append(Node(QuotaPath(f"root/{dept}"), {"cpu": low}, {"cpu": used}, {"cpu": 12}))
        nodes[-1].lending = draw(policies)
        nodes.extend(leaves)
    nodes[0].used = {"cpu": sum(n.used["cpu"] for n in nodes if n.path.count("/") == 1)}
    leaf = draw(st.sampled_from([n.path for n in nodes if n.path.count("/") == 2]))
    return _tree(*nodes), leaf, draw(st.integers(1, 8))


@settings(max_examples=300, deadline=None)
@given(_trees())
def test_properties_of_the_path_check(case: tuple[dict[QuotaPath, Node], str, int]) -> None:
    """Without a restriction nothing is refused; Never is a limit of 0; a higher limit never
    refuses more; what a refusal names is on the request's path and keeps some idle
    guarantee beside it."""
    nodes, leaf, cpu = case
    short = _check(nodes, leaf, cpu)
    if short is not None:
        assert leaf.startswith(short[0]) and short[1] > 0
    saved = {p: n.lending for p, n in nodes.items()}
    for node in nodes.values():
        node.lending = LENDS_ALL
    assert _check(nodes, leaf, cpu) is None
    for path, node in nodes.items():
        policy = saved[path]
        node.lending = Lending("Any", {"cpu": 0}) if policy.reclaim == "Never" else policy
    assert _check(nodes, leaf, cpu) == short
    for node in nodes.values():
        limit = node.lending.limit.get("cpu")
        if limit is not None:
            node.lending = Lending("Any", {"cpu": limit + 1})
    if short is None:
        assert _check(nodes, leaf, cpu) is None


# ------------------------------------------------------------------------ the engine


def test_the_preemptor_and_the_preview_spare_an_equal_priority_borrower() -> None:
    """182 at 15 s: a/owner (priority 0, LowerPriority) waits beside b/borrower (priority 0).
    The preemptor's check refuses to take it, naming the policy; the reclaim preview finds no
    victim."""
    engine = _play("182-reclaim-within-lower-priority-spares-equal.yaml", until_ms=15_000)
    owner, borrower = WorkloadKey("a/owner"), WorkloadKey("b/borrower")
    refusal = engine.check_preemption(owner, [borrower], engine.state.now)
    assert refusal is not None and refusal.code == "StaleView"
    assert "usher.io/reclaim-within is LowerPriority" in refusal.message, refusal.message
    why, victims = engine.reclaim_preview(owner, engine.state.now)
    assert victims == [] and why is not None


def test_the_preview_of_a_leaf_that_never_reclaims_says_so() -> None:
    """187 at 20 s: A (usher.io/reclaim-within: Never) waits beside B's borrower; neither the
    preview nor the preemptor takes it."""
    engine = _play("187-reclaim-within-never-keeps-borrowers.yaml", until_ms=20_000)
    owner, borrower = WorkloadKey("a/owner"), WorkloadKey("b/borrower")
    why, victims = engine.reclaim_preview(owner, engine.state.now)
    assert (why, victims) == (
        "root/A reclaims from no other leaf (usher.io/reclaim-within: Never, L1)",
        [],
    )
    refusal = engine.check_preemption(owner, [borrower], engine.state.now)
    assert refusal is not None and "may not reclaim from other leaves" in refusal.message
    assert engine.state.tree.reserving == frozenset({QuotaPath("root"), QuotaPath("root/A")})
