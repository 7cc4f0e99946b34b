"""Holds and drains of quota nodes (docs/admission-rules.md R14, R15), in the core.

Scenarios 60-66 pin the rules with instant release; here, table by table: which orders are
refused and naming which field, which hold governs a node, what a running system's engine
decides under a hold and a drain (a drained workload counts until the ledger's ``Released``),
the tree attributes, snapshots, and what the log checks say of admissions and drains.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from schemas import (
    Admitted,
    HoldAction,
    Millis,
    NodeHeld,
    NodeResumed,
    Preempted,
    QueueName,
    QuotaNode,
    QuotaPath,
    QuotaTreeApplied,
    Reason,
    Released,
    WorkloadKey,
)
from tests.builders.events import cpu, observed
from tests.builders.log import BASE_MS, Log
from tests.builders.trees import two_leaf_tree
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import restore, snapshot
from usher.core.history import audit, explain, invariants, whatif
from usher.core.model.config import EngineConfig
from usher.core.model.errors import TreeInvalid
from usher.core.rules import holds
from usher.core.rules.holds import HoldOrder, HoldRecord
from usher.core.state.indexed import JobState
from usher.core.tree.quota_tree import parse_tree

ROOT = QuotaPath("root")
A = QuotaPath("root/A")
B = QuotaPath("root/B")
RUNNING = WorkloadKey("a1/running")
WAITING = WorkloadKey("a1/waiting")
OTHER = WorkloadKey("b1/other")


def nested_tree() -> QuotaNode:
    """root (12 cpu) > research (8) > vision [v], nlp [n]; and ops [o] beside research."""
    return QuotaNode(
        name="root",
        min=cpu(12),
        max=cpu(12),
        children=[
            QuotaNode(
                name="research",
                min=cpu(8),
                max=cpu(8),
                children=[
                    QuotaNode(name="vision", min=cpu(4), max=cpu(8), namespaces=["v"]),
                    QuotaNode(
                        name="nlp",
                        min=cpu(4),
                        max=cpu(8),
                        namespaces=["n"],
                        attributes={"usher.io/drain-grace-seconds": "45"},
                    ),
                ],
            ),
            QuotaNode(name="ops", min=cpu(4), max=cpu(12), namespaces=["o"]),
        ],
    )


# ---------------------------------------------------------------- orders: judged, then recorded


@pytest.mark.parametrize(
    ("action", "target", "grace", "field", "code"),
    [
        ("Hold", "root/nowhere", None, "target", "unknown-node"),
        ("Drain", "nowhere", 10, "target", "unknown-node"),
        ("Drain", "research", -1, "grace_seconds", "invalid-grace"),
        ("Hold", "research", 30, "grace_seconds", "unexpected"),
        ("Resume", "research", None, "target", "not-held"),
    ],
)
def test_a_bad_order_is_refused_naming_the_field(
    action: HoldAction, target: str, grace: int | None, field: str, code: str
) -> None:
    order = HoldOrder(action=action, target=target, by="alice", grace_seconds=grace)
    refused = holds.carry_out(order, nested_tree(), {}, Millis(0))
    assert isinstance(refused, list)
    assert [(e.path, e.code) for e in refused] == [(field, code)]


def test_an_order_without_a_tree_is_refused() -> None:
    refused = holds.carry_out(HoldOrder(action="Hold", target="A", by="x"), None, {}, Millis(0))
    assert isinstance(refused, list)
    assert refused[0].message == "no quota tree is in force"


@pytest.mark.parametrize(
    ("target", "path"),
    [
        ("root/research", "root/research"),  # a path
        ("research", "root/research"),  # a node name
        ("root-research-vision-v", "root/research/vision"),  # a leaf's queue
        ("root", "root"),
    ],
)
def test_an_order_names_a_node_by_path_name_or_queue(target: str, path: str) -> None:
    order = HoldOrder(action="Hold", target=target, by="alice", reason="why")
    recorded = holds.carry_out(order, nested_tree(), {}, Millis(5))
    assert recorded == NodeHeld(
        node=QuotaPath(path), mode="Hold", by="alice", reason="why", at_ms=Millis(5)
    )


@pytest.mark.parametrize(
    ("target", "grace", "expected"),
    [
        ("nlp", None, 45),  # the node's own attribute
        ("nlp", 0, 0),  # the order's, even 0
        ("vision", None, 0),  # nothing says: no grace
        ("root/research/nlp", 7, 7),
    ],
)
def test_a_drain_takes_its_grace_from_the_order_else_the_tree(
    target: str, grace: int | None, expected: int
) -> None:
    order = HoldOrder(action="Drain", target=target, by="alice", grace_seconds=grace)
    recorded = holds.carry_out(order, nested_tree(), {}, Millis(0))
    assert isinstance(recorded, NodeHeld)
    assert (recorded.mode, recorded.grace_seconds) == ("Drain", expected)


def test_a_resume_lifts_only_an_order() -> None:
    ordered = {QuotaPath("root/research"): _record("root/research", "Hold")}
    order = HoldOrder(action="Resume", target="research", by="bob", reason="done")
    assert holds.carry_out(order, nested_tree(), ordered, Millis(9)) == NodeResumed(
        node=QuotaPath("root/research"), by="bob", reason="done", at_ms=Millis(9)
    )


# ---------------------------------------------------------------- which hold governs


def _record(node: str, mode: str, grace: int = 0, by: str = "alice", since: int = 0) -> HoldRecord:
    return HoldRecord(
        node=QuotaPath(node),
        mode="Hold" if mode == "Hold" else "Drain",
        grace_ms=grace,
        by=by,
        since_ms=since,
    )


@pytest.mark.parametrize(
    ("ordered", "from_tree", "wins"),
    [
        (_record("root/A", "Hold"), _record("root/A", "Drain", 50, "the quota tree"), "tree"),
        (_record("root/A", "Drain", 10), _record("root/A", "Drain", 50, "t"), "order"),
        (_record("root/A", "Drain", 90), _record("root/A", "Drain", 50, "t"), "tree"),
        (_record("root/A", "Hold"), _record("root/A", "Hold", by="the quota tree"), "order"),
    ],
)
def test_a_node_is_governed_by_the_stronger_hold(
    ordered: HoldRecord, from_tree: HoldRecord, wins: str
) -> None:
    governing = holds.in_force({A: ordered}, {A: from_tree})[A]
    assert governing == (ordered if wins == "order" else from_tree)


def test_the_nearest_held_node_governs_a_leaf() -> None:
    research = QuotaPath("root/research")
    in_force = {ROOT: _record("root", "Hold"), research: _record("root/research", "Drain", 5)}
    leaves = [QuotaPath(p) for p in ("root/research/vision", "root/ops")]
    assert holds.held_leaves(in_force, leaves) == {
        leaves[0]: in_force[research],
        leaves[1]: in_force[ROOT],
    }


def test_a_tree_applied_again_keeps_a_drains_start() -> None:
    tree = two_leaf_tree(
        a_attributes={"usher.io/hold": "drain", "usher.io/drain-grace-seconds": "9"}
    )
    first = holds.tree_holds(tree, {}, Millis(100))
    assert holds.tree_holds(tree, first, Millis(700)) == first
    changed = two_leaf_tree(a_attributes={"usher.io/hold": "drain"})
    assert holds.tree_holds(changed, first, Millis(700))[A].since_ms == 700


@pytest.mark.parametrize(
    ("attributes", "path"),
    [
        ({"usher.io/hold": "Hold"}, "spec.root.children[0](A).attributes.usher.io/hold"),
        (
            {"usher.io/drain-grace-seconds": "-5"},
            "spec.root.children[0](A).attributes.usher.io/drain-grace-seconds",
        ),
    ],
)
def test_the_tree_refuses_a_bad_hold_attribute_naming_it(
    attributes: dict[str, str], path: str
) -> None:
    manifest = {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
        "kind": "ElasticQuotaTree",
        "spec": {
            "root": {
                "name": "root",
                "max": {"cpu": "8"},
                "min": {"cpu": "8"},
                "children": [{"name": "A", "max": {"cpu": "8"}, "attributes": attributes}],
            }
        },
    }
    with pytest.raises(TreeInvalid) as refused:
        parse_tree(manifest)
    assert [e.path for e in refused.value.errors] == [path]


# ---------------------------------------------------------------- a running system's engine


def running(tree: QuotaNode | None = None) -> Engine:
    """No instant release: ``running`` (40 cpu) admitted in A and granted at t=0."""
    engine = Engine(EngineConfig())
    engine.apply(QuotaTreeApplied(root=tree or two_leaf_tree()), Millis(0))
    engine.apply(observed("a1", "running", 40), Millis(0))
    [admitted] = engine.decide(Millis(0))
    assert isinstance(admitted, Admitted)
    engine.apply(admitted, Millis(0))
    return engine


def held(node: QuotaPath, mode: str = "Hold", grace: int = 0, at: int = 1000) -> NodeHeld:
    return NodeHeld(
        node=node,
        mode="Hold" if mode == "Hold" else "Drain",
        grace_seconds=grace,
        by="alice",
        reason="maintenance",
        at_ms=Millis(at),
    )


@pytest.mark.parametrize("node", [A, ROOT])
def test_a_held_node_admits_nothing_below_it_and_says_why(node: QuotaPath) -> None:
    engine = running()
    engine.apply(held(node), Millis(1000))
    engine.apply(observed("a1", "waiting", 10, created=2000), Millis(2000))
    assert engine.decide(Millis(2000)) == []
    view = engine.job_state(WAITING)
    assert view is not None and view.reason is not None
    assert (view.state, view.reason.code, view.reason.node) == (JobState.PENDING, "Held", node)
    assert view.reason.message == f"{node} held by alice at 1970-01-01T00:00:01Z: maintenance"
    assert engine.reason_now(WAITING) == view.reason
    still = engine.job_state(RUNNING)
    assert still is not None and still.state == JobState.ADMITTED
    assert engine.stale_offer_keys() == []


def test_a_sibling_of_a_held_node_admits_and_resume_admits_again() -> None:
    engine = running()
    engine.apply(held(A), Millis(1000))
    engine.apply(observed("a1", "waiting", 10, created=2000), Millis(2000))
    engine.apply(observed("b1", "other", 10, created=2000), Millis(2000))
    [admitted] = engine.decide(Millis(2000))
    assert isinstance(admitted, Admitted) and admitted.workload == OTHER
    engine.apply(NodeResumed(node=A, by="alice", at_ms=Millis(3000)), Millis(3000))
    assert engine.holds_in_force() == {}
    [again] = engine.decide(Millis(3000))
    assert isinstance(again, Admitted) and again.workload == WAITING
    assert engine.stale_offer_keys() == []


def test_a_drain_preempts_after_its_grace_and_not_before() -> None:
    engine = running()
    engine.apply(held(A, "Drain", grace=30, at=1000), Millis(1000))
    assert engine.decide(Millis(1000)) == []
    assert engine.next_wakeup() == Millis(31_000)
    assert engine.decide(Millis(30_999)) == []
    assert engine.check_drain(RUNNING, Millis(30_999)) is not None
    assert engine.check_drain(RUNNING, Millis(31_000)) is None
    [drained] = engine.decide(Millis(31_000))
    assert isinstance(drained, Preempted)
    assert (drained.workload, drained.preemptor, drained.quota) == (RUNNING, RUNNING, A)
    assert drained.reason.code == "Drained"
    assert drained.reason.message == (
        "root/A drained by alice at 1970-01-01T00:00:01Z, grace 30 s over: maintenance"
    )
    # It counts until the ledger's Released (R7), and waits at its place.
    assert engine.quota_used()[A] == cpu(40)
    engine.apply(drained, Millis(31_000))  # the ledger's decision on the log: no change
    assert engine.quota_used()[A] == cpu(40)
    engine.apply(
        Released(workload=RUNNING, quota=A, requests=cpu(40), cause="Preempted"), Millis(32_000)
    )
    assert engine.quota_used()[A] == {}
    view = engine.job_state(RUNNING)
    assert view is not None and view.state == JobState.PENDING
    assert engine.decide(Millis(33_000)) == []
    why = engine.reason(RUNNING)
    assert why == engine.reason_now(RUNNING)
    assert why is not None and why.code == "Held"


def test_a_drain_decided_elsewhere_is_applied_from_the_log() -> None:
    engine = running()
    engine.apply(held(A, "Drain", grace=0), Millis(1000))
    reason = Reason(code="Drained", message="root/A drained")
    engine.apply(
        Preempted(
            workload=RUNNING,
            queue=QueueName("root-a-a1"),
            quota=A,
            preemptor=RUNNING,
            reason=reason,
        ),
        Millis(1000),
    )
    view = engine.job_state(RUNNING)
    assert view is not None and view.state == JobState.PENDING
    assert engine.state.held == {}  # its own preemptor holds nothing (no capacity kept for it)
    assert engine.quota_used()[A] == cpu(40)  # counted until Released (R7)


def test_a_tree_attribute_holds_and_the_next_tree_lifts_it() -> None:
    engine = running()
    drained = two_leaf_tree(
        a_attributes={"usher.io/hold": "drain", "usher.io/drain-grace-seconds": "20"}
    )
    engine.apply(QuotaTreeApplied(root=drained), Millis(5000))
    assert engine.holds_in_force()[A].by == holds.TREE_HOLDER
    assert engine.next_wakeup() == Millis(25_000)
    engine.apply(QuotaTreeApplied(root=two_leaf_tree()), Millis(6000))
    assert engine.holds_in_force() == {}
    assert engine.next_wakeup() is None


def test_holds_survive_a_snapshot() -> None:
    engine = running()
    engine.apply(held(A, "Drain", grace=30), Millis(1000))
    tree = two_leaf_tree(a_attributes={"usher.io/hold": "hold"})
    engine.apply(QuotaTreeApplied(root=tree), Millis(1500))
    engine.apply(observed("a1", "waiting", 10, created=2000), Millis(2000))
    engine.decide(Millis(2000))
    twin = restore(snapshot(engine), EngineConfig())
    assert twin.holds_in_force() == engine.holds_in_force()
    assert twin.state.tree_holds == engine.state.tree_holds
    assert twin.decide(Millis(31_000)) == engine.decide(Millis(31_000))


# ---------------------------------------------------------------- the log checks (audit)


def _ms(at: float) -> Millis:
    return Millis(BASE_MS + int(at * 1000))


def test_the_audit_finds_an_admission_below_a_held_node() -> None:
    log = Log().tree(0).job(1, "user-a/j", 10)
    log.add(2, held(QuotaPath("root/Department-a"), at=_ms(2)))
    log.admitted(3, "user-a/j", 10)
    [found] = invariants.check_log(log.history().items, EngineConfig(), at_end=False)
    assert (found.check, found.node) == (invariants.ADMITTED_WHILE_HELD, "root/Department-a")


@pytest.mark.parametrize(("at", "justified"), [(29, False), (32, True)])
def test_the_audit_accepts_a_drain_preemption_only_once_the_grace_ran_out(
    at: float, justified: bool
) -> None:
    log = Log().tree(0).job(1, "user-a/j", 10).admitted(1, "user-a/j", 10)
    log.add(2, held(QuotaPath("root/Department-a"), "Drain", grace=30, at=_ms(2)))
    log.preempted(at, "user-a/j", "user-a/j")
    found = invariants.check_log(log.history().items, EngineConfig(), at_end=False)
    assert [f.check for f in found] == ([] if justified else [invariants.PREEMPTION_REFUSED])


def test_the_audit_follows_a_drain_to_its_release() -> None:
    """R15 through the audit: the drain's Preempted (its own preemptor) and its release as a
    stopped victim are justified; nobody holds capacity for the drained workload."""
    log = Log().tree(0).job(1, "user-a/j", 10).admitted(1, "user-a/j", 10)
    log.add(2, held(QuotaPath("root/Department-a"), "Drain", grace=5, at=_ms(2)))
    log.preempted(8, "user-a/j", "user-a/j")
    log.job(9, "user-a/j", 10)  # seen suspended: its pods stopped
    log.released(10, "user-a/j", 10, "Preempted")
    findings, decisions = audit.audit_log(log.history(), EngineConfig(), quiescent=True)
    assert findings == [], findings
    assert decisions == 3


def test_what_if_keeps_what_operators_ordered() -> None:
    """What-if replays holds as inputs (R14): a counterfactual policy does not admit a job
    an operator held; resumed, both runs admit it."""
    department = QuotaPath("root/Department-a")
    log = Log().tree(0)
    log.add(1, held(department, at=_ms(1)))
    log.job(2, "user-a/j", 10)
    spec = whatif.WhatIfSpec(
        baseline=whatif.Variant(config=EngineConfig()),
        changed=whatif.Variant(config=EngineConfig(oversell_rate=Fraction(2))),
    )
    report = whatif.what_if(log.history(), spec)
    assert (report.overall.baseline.admitted, report.overall.whatif.admitted) == (0, 0)
    log.add(3, NodeResumed(node=department, by="alice", at_ms=_ms(3)))
    report = whatif.what_if(log.history(), spec)
    assert (report.overall.baseline.admitted, report.overall.whatif.admitted) == (1, 1)
    assert report.inputs == 4


def test_explain_tells_a_drain_from_a_reclaim() -> None:
    log = Log().tree(0).job(1, "user-a/j", 10).admitted(1, "user-a/j", 10)
    log.add(2, held(QuotaPath("root/Department-a"), "Drain", grace=5, at=_ms(2)))
    log.preempted(8, "user-a/j", "user-a/j")
    told = explain.explain(log.history(), EngineConfig(), WorkloadKey("user-a/j"), _ms(9))
    [line] = [line for line in told.history if line.what in ("Preempted", "preempts")]
    assert (line.what, line.detail) == ("Preempted", "by a drain on root/Department-a")
