"""Property tests of the core: quota never over-committed, reclaim honours min, replay is exact."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings

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
from tests.builders.events import observed
from tests.builders.generated import Op, configs, leaves_of, ops, paths_of, trees
from usher.core.engine.facade import Engine
from usher.core.model.config import EngineConfig
from usher.core.rules.arbitration import effective_cap


def namespace_of(tree: QuotaNode, op: Op) -> str:
    """The namespace ``play`` creates ``op``'s workload in: a leaf's, or one no leaf owns."""
    namespaces = [n.namespaces[0] for n in leaves_of(tree)] + ["orphan"]
    return namespaces[op.index % len(namespaces)]


def play(
    config: EngineConfig, tree: QuotaNode, stream: list[Op], after_pass: object = None
) -> list[Decision]:
    engine = Engine(config)
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    created: list[str] = []
    decisions: list[Decision] = []
    for step, op in enumerate(stream):
        now = Millis(step * 1000)
        if op.kind == "create":
            namespace = namespace_of(tree, op)
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


@settings(max_examples=200, deadline=None)
@given(configs, trees(), ops)
def test_no_node_is_ever_over_committed_and_every_pending_has_a_reason(
    config: EngineConfig, tree: QuotaNode, stream: list[Op]
) -> None:
    nodes = paths_of(tree)

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
    nodes = paths_of(tree)
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
