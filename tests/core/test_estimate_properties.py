"""The start estimate never says "now" for a workload a pass at that instant would not admit
(issue 28), over random trees, configurations and histories.

The histories are the property tests' (``tests.builders.generated``: creations in served and
unserved zones, finishes, deletions, passes) with a hold placed on a random node at a random
step; after every step, between passes as well as right after one, each pending workload's
estimate is compared with a trial pass previewed at the same instant (``Engine.preview_pass``,
what ``usher explain`` and the dry run read): its words are ``now`` exactly when that pass
admits it, and a time it gives is never before the instant its shutting gate can open.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import (
    Admitted,
    Decision,
    Millis,
    NodeHeld,
    QuotaNode,
    QuotaTreeApplied,
    WorkloadDeleted,
    WorkloadFinished,
)
from tests.builders.events import observed
from tests.builders.generated import Op, configs, ops, paths_of, trees
from tests.core.test_properties import namespace_of
from usher.core.engine.facade import Engine
from usher.core.history.estimate import estimate_pending
from usher.core.history.usage import UsageFold
from usher.core.model.config import EngineConfig


def check(engine: Engine, now: Millis, usage: UsageFold) -> None:
    """Every pending workload's estimate at ``now`` against a pass previewed at ``now``."""
    views = engine.jobs()
    preview = engine.preview_pass(now)
    admitted = {d.workload for d in preview.decisions if isinstance(d, Admitted)}
    found = estimate_pending(engine, now, views, preview, usage.intervals())
    for key, estimate in found.items():
        assert (estimate.words(now) == "now") == (key in admitted), (key, estimate)
        assert estimate.says == estimate.words(now)
        shut = engine.refusal_of(key)
        if shut is not None and not shut.stands:
            assert key not in admitted
            if shut.until is None:  # only an event opens it: no time can be given
                assert not estimate.known, (key, estimate)
            elif estimate.early_ms is not None:
                assert estimate.early_ms >= shut.until, (key, estimate, shut)


def play_and_check(
    config: EngineConfig, tree: QuotaNode, stream: list[Op], hold_at: int, held: int
) -> None:
    engine = Engine(config)
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    usage = UsageFold()
    created: list[str] = []
    nodes = sorted(paths_of(tree))
    for step, op in enumerate(stream):
        now = Millis(step * 1000)
        made: list[Decision] = []
        if step == hold_at:
            order = NodeHeld(
                node=nodes[held % len(nodes)], mode="Hold", by="admin", at_ms=now, reason="test"
            )
            made += engine.apply(order, now)
        if op.kind == "create":
            event = observed(
                namespace_of(tree, op),
                f"j{step}",
                op.cores,
                created=now,
                priority=op.priority,
                zone=op.zone,
            )
            created.append(event.workload)
            made += engine.apply(event, now)
        elif op.kind in ("finish", "delete") and created:
            target = created[op.index % len(created)]
            gone = WorkloadFinished if op.kind == "finish" else WorkloadDeleted
            made += engine.apply(gone(workload=target), now)  # type: ignore[arg-type]
            usage.stopped(target, now)  # instant release: the allocation ends with the run
        for decision in made:
            usage.apply(decision, now)
        check(engine, now, usage)
        if op.kind == "pass" or step % 3 == 2:
            for decision in engine.decide(now):
                usage.apply(decision, now)
            check(engine, now, usage)


@settings(max_examples=150, deadline=None)
@given(configs, trees(), ops, st.integers(0, 60), st.integers(0, 20))
def test_an_estimate_says_now_only_when_a_pass_at_that_instant_admits_it(
    config: EngineConfig, tree: QuotaNode, stream: list[Op], hold_at: int, held: int
) -> None:
    play_and_check(config, tree, stream, hold_at, held)
