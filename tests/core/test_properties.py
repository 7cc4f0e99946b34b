"""Property tests of the core: quota never over-committed, reclaim honours min, replay is exact."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import (
    Admitted,
    Decision,
    Millis,
    Preempted,
    QuotaNode,
    QuotaPath,
    QuotaTreeApplied,
    Released,
    WorkloadDeleted,
    WorkloadFinished,
)
from tests.core.test_engine_api import observed
from usher.core.arbitration import effective_cap
from usher.core.config import EngineConfig
from usher.core.engine import Engine

CORE = 1000


@st.composite
def trees(draw: st.DrawFn) -> QuotaNode:
    total = draw(st.integers(20, 80))
    departments = draw(st.integers(1, 3))
    deep = draw(st.booleans())
    children = []
    left = total
    leaf_number = 0
    for d in range(departments):
        d_min = left if d == departments - 1 else draw(st.integers(0, left))
        left -= d_min
        d_max = draw(st.integers(max(d_min, 1), total * 3 // 2))
        if deep:
            kids = []
            k_left = d_min
            count = draw(st.integers(1, 3))
            for k in range(count):
                k_min = k_left if k == count - 1 else draw(st.integers(0, k_left))
                k_left -= k_min
                k_max = draw(st.integers(max(k_min, 1), total * 3 // 2))
                kids.append(
                    QuotaNode(
                        name=f"L{leaf_number}",
                        min={"cpu": k_min * CORE},
                        max={"cpu": k_max * CORE},
                        namespaces=[f"ns{leaf_number}"],
                    )
                )
                leaf_number += 1
            children.append(
                QuotaNode(
                    name=f"D{d}",
                    min={"cpu": d_min * CORE},
                    max={"cpu": d_max * CORE},
                    children=kids,
                )
            )
        else:
            children.append(
                QuotaNode(
                    name=f"L{leaf_number}",
                    min={"cpu": d_min * CORE},
                    max={"cpu": d_max * CORE},
                    namespaces=[f"ns{leaf_number}"],
                )
            )
            leaf_number += 1
    return QuotaNode(
        name="root", min={"cpu": total * CORE}, max={"cpu": total * CORE}, children=children
    )


@dataclass(frozen=True)
class Op:
    kind: str  # create | finish | delete | pass
    index: int
    cores: int = 0
    priority: int = 0
    zone: str = "default"


creates = st.builds(
    Op,
    kind=st.just("create"),
    index=st.integers(0, 8),
    cores=st.integers(1, 25),
    priority=st.integers(0, 3),
    zone=st.sampled_from(["default", "z2"]),
)
ops = st.lists(
    st.one_of(
        creates,
        creates,
        creates,
        st.builds(Op, kind=st.sampled_from(["finish", "delete"]), index=st.integers(0, 60)),
        st.builds(Op, kind=st.just("pass"), index=st.just(0)),
    ),
    min_size=8,
    max_size=40,
)
configs = st.builds(
    EngineConfig,
    policy=st.sampled_from(["Round", "Block"]),
    oversell_rate=st.sampled_from([Fraction(1), Fraction(3, 2), Fraction(2)]),
    within_quota=st.sampled_from(["Never", "LowerPriority"]),
    min_runtime_ms=st.sampled_from([0, 3000]),
    # The rules of SEMANTICS as scenarios state them: no ledger here, so a victim stops and a
    # finished workload releases at once. The running system's rule (R7: usage leaves with
    # the ledger's Released) is driven by tests/core/test_protocol_machine.py.
    instant_release=st.just(True),
)


def play(
    config: EngineConfig, tree: QuotaNode, stream: list[Op], after_pass: object = None
) -> list[Decision]:
    engine = Engine(config)
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    namespaces = [n.namespaces[0] for n in _leaves(tree)] + ["orphan"]
    created: list[str] = []
    decisions: list[Decision] = []
    for step, op in enumerate(stream):
        now = Millis(step * 1000)
        if op.kind == "create":
            namespace = namespaces[op.index % len(namespaces)]
            event = observed(
                namespace, f"j{step}", op.cores, created=now, priority=op.priority, zone=op.zone
            )
            created.append(event.workload)
            decisions += engine.apply(event, now)
        elif op.kind in ("finish", "delete") and created:
            target = created[op.index % len(created)]
            event2 = (
                WorkloadFinished(workload=target)
                if op.kind == "finish"
                else WorkloadDeleted(workload=target)
            )
            decisions += engine.apply(event2, now)  # type: ignore[arg-type]
        if op.kind == "pass" or step % 3 == 2:
            made = engine.decide(now)
            decisions += made
            if callable(after_pass):
                after_pass(engine, made)
    return decisions


def _leaves(node: QuotaNode) -> list[QuotaNode]:
    if not node.children:
        return [node]
    return [leaf for child in node.children for leaf in _leaves(child)]


def _paths(node: QuotaNode, prefix: str = "") -> dict[QuotaPath, QuotaNode]:
    path = QuotaPath(f"{prefix}/{node.name}" if prefix else node.name)
    out = {path: node}
    for child in node.children:
        out.update(_paths(child, path))
    return out


@settings(max_examples=200, deadline=None)
@given(configs, trees(), ops)
def test_no_node_is_ever_over_committed_and_every_pending_has_a_reason(
    config: EngineConfig, tree: QuotaNode, stream: list[Op]
) -> None:
    nodes = _paths(tree)

    def verify(engine: Engine, made: list[Decision]) -> None:
        used = engine.quota_used()
        for path, node in nodes.items():
            for resource, maximum in node.max.items():
                cap = effective_cap(maximum, config.oversell_rate)
                assert used[path].get(resource, 0) <= cap, (path, used[path], cap)
        for view in engine.jobs().values():
            if view.state == "Pending":
                assert view.reason is not None, view

    play(config, tree, [*stream, Op("pass", 0)], verify)


@settings(max_examples=200, deadline=None)
@given(configs, trees(), ops)
def test_reclaim_takes_only_from_borrowers_and_preemptor_stays_within_min(
    config: EngineConfig, tree: QuotaNode, stream: list[Op]
) -> None:
    nodes = _paths(tree)
    decisions = play(config, tree, [*stream, Op("pass", 0)])
    shadow: dict[str, dict[str, int]] = {}
    requests: dict[str, tuple[str, dict[str, int]]] = {}
    reclaiming: set[str] = set()

    def add(path: str, amounts: dict[str, int], sign: int) -> None:
        leaf = shadow.setdefault(path, {})
        for resource, amount in amounts.items():
            leaf[resource] = leaf.get(resource, 0) + sign * amount

    for decision in decisions:
        if isinstance(decision, Preempted):
            path, amounts = requests.pop(decision.workload)
            if decision.reason.code == "Reclaim":
                minimum = nodes[QuotaPath(path)].min
                assert any(shadow[path].get(r, 0) > minimum.get(r, 0) for r in amounts), decision
                reclaiming.add(decision.preemptor)
            add(path, amounts, -1)
        elif isinstance(decision, Admitted):
            if decision.workload in reclaiming:
                reclaiming.discard(decision.workload)
                minimum = nodes[decision.quota].min
                after = shadow.get(decision.quota, {})
                for resource, amount in decision.requests.items():
                    assert after.get(resource, 0) + amount <= minimum.get(resource, 0), decision
            requests[decision.workload] = (decision.quota, decision.requests)
            add(decision.quota, decision.requests, 1)
        elif isinstance(decision, Released) and decision.workload in requests:
            path, amounts = requests.pop(decision.workload)
            add(path, amounts, -1)


@settings(max_examples=200, deadline=None)
@given(configs, trees(), ops)
def test_replay_gives_identical_decisions(
    config: EngineConfig, tree: QuotaNode, stream: list[Op]
) -> None:
    first = play(config, tree, [*stream, Op("pass", 0)])
    second = play(config, tree, [*stream, Op("pass", 0)])
    assert msgspec.json.encode(first) == msgspec.json.encode(second)
