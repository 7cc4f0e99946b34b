"""One decision pass offers each workload at most once (R3), and under Block a workload preempted
in a pass still stops its queue for the rest of it: properties over random trees and streams.

The offers are watched by a subclass of the real pass that only records what ``pop`` hands to
``run`` (every candidate the pass looks at goes through it) and changes nothing; the engine is
the real one. The preemption property is read from the decisions alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from unittest.mock import patch

from hypothesis import example, given, settings

from schemas import Admitted, Decision, Preempted, QuotaNode, QuotaPath, WorkloadKey
from tests.builders.events import cpu
from tests.builders.generated import Op, configs, ops, trees
from tests.core.test_properties import namespace_of, play
from usher.core.engine import facade as engine_module
from usher.core.engine.decision_pass import DecisionPass
from usher.core.engine.facade import Engine
from usher.core.model.config import EngineConfig
from usher.core.state.indexed import Job

# Scenario 141's shape: ns0's leaf (share 0) offers small first, which fails on the full root;
# ns1's high then evicts low in its own leaf (LowerPriority), freeing room in the same pass.
FREED_IN_PASS = (
    QuotaNode(
        name="root",
        min=cpu(6),
        max=cpu(6),
        children=[
            QuotaNode(name="L0", min=cpu(0), max=cpu(6), namespaces=["ns0"]),
            QuotaNode(name="L1", min=cpu(0), max=cpu(6), namespaces=["ns1"]),
        ],
    ),
    [
        Op("create", 1, cores=6, priority=0),  # ns1/j0: low, fills the root
        Op("pass", 0),
        Op("pass", 0),
        Op("create", 0, cores=2, priority=0),  # ns0/j3: small
        Op("create", 1, cores=1, priority=3),  # ns1/j4: high, evicts low
        Op("pass", 0),
    ],
)

# Scenario 140's: ns0/j0 (priority 1) uses the whole root; ns0/j2 waits behind it; ns1/j3 is
# within its guarantee and reclaims ns0/j0, after which ns0/j2 would fit.
VICTIM_AT_HEAD = (
    QuotaNode(
        name="root",
        min=cpu(4),
        max=cpu(4),
        children=[
            QuotaNode(name="L0", min=cpu(2), max=cpu(4), namespaces=["ns0"]),
            QuotaNode(name="L1", min=cpu(2), max=cpu(4), namespaces=["ns1"]),
        ],
    ),
    [
        Op("create", 0, cores=4, priority=1),  # ns0/j0: use-all
        Op("pass", 0),
        Op("create", 0, cores=1, priority=0),  # ns0/j2: pending (a pass follows)
        Op("create", 1, cores=1, priority=0),  # ns1/j3: the preemptor
        Op("pass", 0),
    ],
)


# A create whose index wraps around the leaves (4 % 4 namespaces -> ns0): the property must place
# it in the namespace ``play`` puts it in (found by CI: ns0/j7 was read as ns4/j7).
WRAPPED_INDEX = (
    QuotaNode(
        name="root",
        min=cpu(20),
        max=cpu(20),
        children=[
            QuotaNode(name="L0", min=cpu(0), max=cpu(1), namespaces=["ns0"]),
            QuotaNode(name="L1", min=cpu(0), max=cpu(1), namespaces=["ns1"]),
            QuotaNode(name="L2", min=cpu(20), max=cpu(20), namespaces=["ns2"]),
        ],
    ),
    [
        Op("create", 0, cores=1, priority=0),
        Op("create", 0, cores=1, priority=1),
        *[Op("finish", 0)] * 5,
        Op("create", 4, cores=1, priority=2),
    ],
)


def _config(policy: str) -> EngineConfig:
    return EngineConfig(
        policy=policy,  # type: ignore[arg-type]
        oversell_rate=Fraction(1),
        within_quota="LowerPriority",
        instant_release=True,
    )


class _RecordingPass(DecisionPass):
    """The real pass; ``pop`` also appends each candidate it hands out to ``offers``."""

    passes: list[list[WorkloadKey]] = []

    def __init__(
        self,
        engine: Engine,
        decisions: list[Decision],
        skip: list[WorkloadKey] | None = None,
        victims: list[Job] | None = None,
    ) -> None:
        super().__init__(engine, decisions, skip, victims)
        self.offers: list[WorkloadKey] = []
        _RecordingPass.passes.append(self.offers)

    def pop(self) -> tuple[QuotaPath, Job] | None:
        popped = super().pop()
        if popped is not None:
            self.offers.append(popped[1].key)
        return popped


@contextmanager
def _recorded_passes() -> Iterator[list[list[WorkloadKey]]]:
    _RecordingPass.passes = []
    with patch.object(engine_module, "DecisionPass", _RecordingPass):
        yield _RecordingPass.passes


@settings(max_examples=200, deadline=None)
@given(configs, trees(), ops)
@example(_config("Round"), *FREED_IN_PASS)
@example(_config("Block"), *FREED_IN_PASS)
def test_a_pass_offers_each_workload_at_most_once(
    config: EngineConfig, tree: QuotaNode, stream: list[Op]
) -> None:
    with _recorded_passes() as passes:
        play(config, tree, [*stream, Op("pass", 0)])
    assert passes, "the engine ran its passes through DecisionPass"
    for offers in passes:
        twice = sorted({key for key in offers if offers.count(key) > 1})
        assert not twice, f"offered more than once in one pass: {twice} in {offers}"


def test_the_recorded_example_offers_small_once_and_leaves_it_pending() -> None:
    with _recorded_passes() as passes:
        decisions = play(_config("Round"), *FREED_IN_PASS)
    last = passes[-1]
    assert last.count(WorkloadKey("ns0/j3")) == 1, last
    admitted = [d.workload for d in decisions if isinstance(d, Admitted)]
    assert admitted == ["ns1/j0", "ns1/j4"], admitted


def _sort_keys(tree: QuotaNode, stream: list[Op]) -> dict[WorkloadKey, tuple[int, int]]:
    """Queue order (R1) of every workload ``play`` creates: priority descending, creation
    ascending (then the name, which the key itself carries)."""
    return {
        WorkloadKey(f"{namespace_of(tree, op)}/j{step}"): (-op.priority, step)
        for step, op in enumerate(stream)
        if op.kind == "create"
    }


@settings(max_examples=200, deadline=None)
@given(configs, trees(), ops)
@example(_config("Block"), *VICTIM_AT_HEAD)
@example(_config("Block"), *WRAPPED_INDEX)
def test_under_block_a_victim_stops_its_queue_for_the_rest_of_its_pass(
    config: EngineConfig, tree: QuotaNode, stream: list[Op]
) -> None:
    block = EngineConfig(
        policy="Block",
        oversell_rate=config.oversell_rate,
        within_quota=config.within_quota,
        min_runtime_ms=config.min_runtime_ms,
        instant_release=True,
    )
    order = _sort_keys(tree, stream)
    passes: list[list[Decision]] = []
    play(block, tree, [*stream, Op("pass", 0)], lambda _e, made: passes.append(made))
    for made in passes:
        stands: dict[str, tuple[tuple[int, int], WorkloadKey]] = {}
        for decision in made:
            if isinstance(decision, Preempted) and decision.workload in order:
                place = (order[decision.workload], decision.workload)
                stands[decision.queue] = min(stands.get(decision.queue, place), place)
            elif isinstance(decision, Admitted) and decision.queue in stands:
                victim = stands[decision.queue]
                admitted = (order[decision.workload], decision.workload)
                assert decision.workload != victim[1], f"{victim[1]} re-admitted in its pass"
                assert admitted < victim, f"{decision.workload} admitted behind {victim[1]}"
