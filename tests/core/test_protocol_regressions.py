"""The quota-safety defects of issue 12, each reproduced in the pure core (no servers).

1. A pass admitted X and picked X as a reclaim victim for Y; the ledger refused X, the
   preemptor refused the reclaim, and the reverts put X back to "admitted" though the ledger
   never granted it: X was never decided again and its quota counted for ever.
2. A victim's usage left the engine at its preemption, so the rest of a large victim's quota
   was handed to others while the victim still ran (root 110/100 on the log).
"""

from __future__ import annotations

from schemas import (
    Admitted,
    Decision,
    Millis,
    Preempted,
    QuotaNode,
    QuotaPath,
    QuotaTreeApplied,
    Reason,
    Released,
    WorkloadKey,
)
from tests.builders.events import CORE, admitted, observed_key
from tests.builders.events import resources as res
from usher.core.engine.facade import Engine
from usher.core.model import reasons


def leaf(name: str, minimum: dict[str, int], namespace: str) -> QuotaNode:
    return QuotaNode(name=name, min=minimum, max=res(100, 100), namespaces=[namespace], children=[])


def released(key: str, quota: str, cpu: int, cause: str = "Preempted") -> Released:
    return Released(
        workload=WorkloadKey(key),
        quota=QuotaPath(quota),
        requests=res(cpu),
        cause=cause,  # type: ignore[arg-type]
    )


def split(decisions: list[Decision]) -> tuple[list[str], list[tuple[str, str]]]:
    """Admitted workloads and (victim, preemptor) pairs of one pass."""
    admits = [d.workload for d in decisions if isinstance(d, Admitted)]
    victims = [(d.workload, d.preemptor) for d in decisions if isinstance(d, Preempted)]
    return admits, victims


def phantom_setup() -> Engine:
    """X is a held preemptor in A (capacity freed for it elsewhere); Y in B is within its
    guarantee but B's dominant share is infinite (memory used, no memory min), so the pass
    offers X first: X's admission makes A borrow, then Y needs room and A's newest admission,
    X, is the natural victim."""
    engine = Engine()
    tree = QuotaNode(
        name="root",
        min=res(100, 100),
        max=res(100, 100),
        children=[
            leaf("A", res(60, 100), "a"),
            leaf("B", {"cpu": 40 * CORE}, "b"),
            leaf("C", {}, "c"),
        ],
    )
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    for event in (
        observed_key("a/base", 50),
        admitted("a/base", 50, quota="root/A", queue="root-a"),
        observed_key("b/mem", 1, 10),
        admitted("b/mem", 1, quota="root/B", queue="root-b", memory_gi=10),
        observed_key("c/v", 20),
        admitted("c/v", 20, quota="root/C", queue="root-c"),
        observed_key("a/x", 20, created=1),
    ):
        engine.apply(event, Millis(0))  # type: ignore[arg-type]
    # Another zone's dequeuer reclaimed c/v for a/x: the ledger holds a/x's 20; c/v stops.
    engine.apply(
        Preempted(
            workload=WorkloadKey("c/v"),
            queue="root-c",  # type: ignore[arg-type]
            quota=QuotaPath("root/C"),
            preemptor=WorkloadKey("a/x"),
            reason=Reason(code="Reclaim", message="elsewhere"),
        ),
        Millis(1),
    )
    engine.apply(released("c/v", "root/C", 20), Millis(2))
    engine.apply(observed_key("b/y", 30, created=3), Millis(3))
    return engine


def test_a_pass_never_preempts_what_it_admits() -> None:
    engine = phantom_setup()
    admits, victims = split(engine.decide(Millis(10)))
    assert "a/x" in admits
    assert ("a/x", "b/y") not in victims, "a/x admitted and preempted in one pass"
    assert not set(admits) & {victim for victim, _ in victims}


def test_refusals_leave_the_engine_as_the_ledger_has_it() -> None:
    """The dequeuer's reverts after both the reservation and the reclaim are refused."""
    engine = phantom_setup()
    before = engine.quota_used()
    decisions = engine.decide(Millis(10))
    _, victims = split(decisions)
    no = reasons.stale_view(WorkloadKey("a/x"), "refused by the ledger")
    for decision in decisions:
        if isinstance(decision, Admitted) and decision.workload not in {p for _, p in victims}:
            engine.revert_admission(decision.workload, no)
    for preemptor in sorted({p for _, p in victims}):
        mine = [d for d in decisions if isinstance(d, Preempted) and d.preemptor == preemptor]
        engine.revert_preemption(WorkloadKey(preemptor), mine, no)
    # Nothing the ledger did not grant is believed admitted, and the usage is as before.
    states = {key: view.state for key, view in engine.jobs().items()}
    assert states["a/x"] == "Pending" and states["b/y"] == "Pending"
    assert states["a/base"] == "Admitted" and states["b/mem"] == "Admitted"
    # a/x's hold was its own: after a refused plain admission it waits without it, and the
    # next pass decides it again (it is not stuck as "admitted").
    assert engine.quota_used()[QuotaPath("root")]["cpu"] <= before[QuotaPath("root")]["cpu"]
    again, _ = split(engine.decide(Millis(20)))
    assert "a/x" in again or "b/y" in again


def test_a_victim_counts_until_it_is_seen_stopped() -> None:
    """Preempting a 20-cpu victim for an 8-cpu preemptor frees nothing for a 16-cpu job
    until the victim's Released is on the log (the issue's lg-0162 / lg-0177 case)."""
    engine = Engine()
    tree = QuotaNode(
        name="root",
        min=res(100),
        max=res(100),
        children=[
            QuotaNode(name="A", min=res(60), max=res(100), namespaces=["a"]),
            QuotaNode(name="B", min=res(40), max=res(100), namespaces=["b"]),
        ],
    )
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    for key, cpu, created in (("b/fill", 40, 0), ("a/base", 40, 0), ("b/big", 20, 1)):
        engine.apply(observed_key(key, cpu, created=created), Millis(0))
    engine.decide(Millis(1))  # root 100: b borrows 20
    engine.apply(observed_key("a/claim", 8, created=2), Millis(2))
    admits, victims = split(engine.decide(Millis(2)))
    assert victims == [("b/big", "a/claim")] and admits == ["a/claim"]
    engine.apply(observed_key("a/next", 12, created=3), Millis(3))
    engine.apply(observed_key("b/other", 4, created=3), Millis(3))
    # b/big still runs: root counts 40 + 40 + max(20, 8) = 100; nothing else fits.
    assert engine.quota_used()[QuotaPath("root")] == res(100)
    assert split(engine.decide(Millis(4)))[0] == []
    reason = engine.reason(WorkloadKey("a/next"))
    assert reason is not None and reason.code == "VictimsStopping", reason
    engine.apply(released("b/big", "root/B", 20), Millis(5))
    # Stopped: 40 + 40 + 8 = 88; a/next (12) fits now, and only it.
    assert engine.quota_used()[QuotaPath("root")] == res(88)
    assert split(engine.decide(Millis(6)))[0] == ["a/next"]
