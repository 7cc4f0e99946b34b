"""``usher.core.history.dryrun``: what the next pass would do with a job not submitted yet.

The property: on any generated state, the dry run's verdict -- admitted by the next pass or
not, whom it preempts, the reason it would wait and the place it takes -- is what happens when
the same job is then observed and a pass runs at the same time.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from schemas import Admitted, Millis, Preempted, QuotaNode, QuotaTreeApplied, WorkloadObserved
from tests.builders.events import observed
from tests.core.test_properties import Op, trees
from tests.core.test_snapshot import (
    RECLAIM_STORY,
    TWO_LEAVES,
    Step,
    World,
    histories,
    snapshot_configs,
)
from usher.core.engine.facade import Engine
from usher.core.history.dryrun import (
    AlreadyKnown,
    DryRun,
    dry_run,
    render_dry_run_table,
    render_dry_runs_json,
)
from usher.core.model.config import EngineConfig, Policy, WithinQuota
from usher.core.state.indexed import JobState

NEW = "dry"


@settings(max_examples=150, deadline=None)
@given(
    snapshot_configs,
    trees(),
    trees(),
    histories,
    st.data(),
)
def test_dry_run_says_what_the_next_pass_does_with_the_job(
    config: EngineConfig,
    tree: QuotaNode,
    alternative: QuotaNode,
    history: list[Op | Step],
    data: st.DataObject,
) -> None:
    engine = Engine(config)
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    world = World(tree, alternative)
    # Late splits carry the most state (borrowers to reclaim from, holds): drawn more often.
    end = len(history)
    split = data.draw(st.one_of(st.integers(0, end), st.integers(end * 2 // 3, end)), label="split")
    for number in range(split):
        world.step(engine, number, history[number])
    now = Millis(split * 1000 + 500)
    job = observed(
        # Mostly a namespace a leaf takes ("orphan" is Unmapped), mostly a size that fits a
        # guarantee: the cases where the pass admits, waits or preempts for it.
        data.draw(st.one_of(st.sampled_from(world.namespaces[:-1]), st.just("orphan")), label="ns"),
        NEW,
        data.draw(st.one_of(st.integers(1, 12), st.integers(1, 40)), label="cores"),
        created=now,
        priority=data.draw(st.one_of(st.none(), st.integers(-2, 6)), label="priority"),
        priority_class=data.draw(st.sampled_from([None, "pc0", "pc1"]), label="class"),
        zone=data.draw(st.sampled_from(["default", "z2"]), label="zone"),
    )
    result = _check_dry_run(engine, job, now, split)
    event(f"admitted={result.admitted} preempts={bool(result.preempts)} state={result.state}")


@pytest.mark.parametrize("policy", [Policy.ROUND, Policy.BLOCK])
@pytest.mark.parametrize("within", ["Never", "LowerPriority"])
def test_dry_run_at_every_step_of_a_reclaim_story(policy: Policy, within: WithinQuota) -> None:
    # Random histories seldom reclaim; this story does (holds, preemptors, stopping victims).
    config = EngineConfig(policy=policy, within_quota=within, min_runtime_ms=3000)
    seen: set[tuple[bool, bool]] = set()
    for split in range(len(RECLAIM_STORY) + 1):
        for namespace, cores, priority in (("ns0", 5, 0), ("ns0", 10, 5), ("ns1", 3, 9)):
            engine = Engine(config)
            engine.apply(QuotaTreeApplied(root=TWO_LEAVES), Millis(0))
            world = World(TWO_LEAVES, TWO_LEAVES)
            for number in range(split):
                world.step(engine, number, RECLAIM_STORY[number])
            now = Millis(split * 1000 + 500)
            job = observed(namespace, NEW, cores, created=now, priority=priority)
            result = _check_dry_run(engine, job, now, split)
            seen.add((result.admitted, bool(result.preempts)))
    assert {(True, True), (True, False), (False, False)} <= seen


def _check_dry_run(engine: Engine, job: WorkloadObserved, now: Millis, seq: int) -> DryRun:
    """Dry-run ``job`` on ``engine`` (spent), then submit it to a copy and run a pass: the two
    must agree on everything the dry run says."""
    real = copy.deepcopy(engine)  # the reference: the job is submitted and a pass runs

    result = dry_run(engine, job, now, [], as_of_seq=seq)

    real.apply(job, now)
    arrived = real.job_state(job.workload)
    assert arrived is not None
    decided = real.decide(now)
    after = real.job_state(job.workload)
    assert after is not None
    admitted = any(isinstance(d, Admitted) and d.workload == job.workload for d in decided)
    assert result.admitted == admitted
    assert result.state == after.state
    assert result.preempts == [
        d
        for d in decided
        if isinstance(d, Preempted) and d.preemptor == job.workload and d.workload != job.workload
    ]
    assert (result.queue, result.quota, result.position, result.priority) == (
        arrived.queue,
        arrived.quota,
        arrived.position,
        arrived.priority,
    )
    assert result.reason == (None if admitted else after.reason)
    assert (result.estimate is not None) == (arrived.state == JobState.PENDING)

    return result


def test_a_job_already_on_the_log_is_refused() -> None:
    engine = Engine(EngineConfig())
    engine.apply(QuotaTreeApplied(root=TWO_LEAVES), Millis(0))
    engine.apply(observed("ns0", "a", 4), Millis(1))
    with pytest.raises(AlreadyKnown, match="ns0/a already exists"):
        dry_run(engine, observed("ns0", "a", 4), Millis(2), [], as_of_seq=2)


def test_what_people_read_of_a_dry_run_that_preempts() -> None:
    # L1 borrowed all of root; a job of L0 within its min reclaims: the pass preempts for it.
    config = EngineConfig()
    engine = Engine(config)
    engine.apply(QuotaTreeApplied(root=TWO_LEAVES), Millis(0))
    engine.apply(observed("ns1", "big", 20), Millis(1))
    for decision in engine.decide(Millis(2)):
        engine.apply(decision, Millis(2))  # the ledger's record comes back on the log
    result = dry_run(engine, observed("ns0", "mine", 8, created=3000), Millis(3000), [], 3)
    assert result.admitted  # on the capacity its victim frees (held for it until it stops)
    assert [v.workload for v in result.preempts] == ["ns1/big"]
    assert [v.reason.code for v in result.preempts] == ["Reclaim"]
    table = render_dry_run_table(result)
    assert "ns0/mine (dry run: nothing was created)" in table
    assert "next pass admits it: yes, once the jobs it preempts have stopped" in table
    assert "ns1/big on root/L1: Reclaim:" in table
    doc = json.loads(render_dry_runs_json([result]))
    assert doc["job"] == "ns0/mine"
    assert doc["preempts"][0]["job"] == "ns1/big"
    assert doc["preempts"][0]["preempting_job"] == "ns0/mine"
    assert doc["requests"] == {"cpu": "8"}
    assert isinstance(json.loads(render_dry_runs_json([result, result])), list)
