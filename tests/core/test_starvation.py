"""No starvation (N1): the bound a reservation guarantees, in generated planning runs, and a
snapshot taken while a head starves carries its clock.

The property: a large workload `big` (its own leaf, the guard on there; no leaf has a
guarantee, so nobody reclaims) arrives among a stream of small jobs that finish by themselves
(``runSeconds``). It is admitted by ``arrival + R`` if nothing is admitted past it, else by
``first passed over + threshold + R``, R being the longest runtime (what any job running when
the reservation starts has left at most). Without the guard the same stream may starve it.
With backfill on (N2: leaf a opts in, every small job declares its runtime) the bound holds
all the same, and so it does in a tree that sets no threshold (the default is on).
"""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import Admitted, Millis, QuotaTreeApplied, WorkloadFinished, WorkloadKey
from tests.builders.events import observed
from tests.builders.log import Log
from tests.builders.manifests import (
    batch_job,
    container,
    elastic_quota_tree,
    pod_template,
    quota_node,
)
from tests.builders.trees import departments_tree
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import restore, snapshot
from usher.core.history import replay as history
from usher.core.history import sim
from usher.core.model.config import EngineConfig, Policy
from usher.core.tree.quota_tree import parse_tree
from usher.core.values.registry import DEFAULT_STARVATION_SECONDS

CAPACITY = 16
CONFIG = EngineConfig(policy=Policy.ROUND, instant_release=True)


def _tree(threshold: int | None, backfill: bool = False) -> dict[str, object]:
    """``threshold`` None: no node sets one (the default is in force)."""
    capacity = str(CAPACITY)
    backfills = {"usher.io/backfill": "true"} if backfill else None  # N2
    guard = None if threshold is None else {"usher.io/starvation-seconds": str(threshold)}
    # No guarantees below the root: nobody reclaims (R5), the head waits only for skip-ahead
    # to stop.
    leaves = [
        quota_node("a", max_cpu=capacity, namespaces=["a"], attributes=backfills),
        quota_node("b", max_cpu=capacity, namespaces=["b"], attributes=guard),
    ]
    return elastic_quota_tree(
        quota_node("root", max_cpu=capacity, min_cpu=capacity, children=leaves)
    )


def _job(namespace: str, name: str, cpu: int, runtime: int | None = None) -> dict[str, object]:
    declares = None if runtime is None else {"usher.io/max-runtime-seconds": str(runtime)}  # RT1
    template = pod_template(container("w", "x", cpu=str(cpu)))
    return batch_job(name, namespace, template=template, annotations=declares)


smalls = st.lists(
    st.tuples(st.integers(0, 120), st.integers(1, 4), st.integers(1, 40)),
    min_size=1,
    max_size=30,
)
heads_and_streams = given(
    st.integers(1, 60),
    st.integers(0, 120),
    st.integers(CAPACITY // 2, CAPACITY),
    smalls,
)
"""A threshold, when the big head arrives and its cpu, and the stream of small jobs."""


def _play(
    threshold: int | None,
    big_at: int,
    big_cpu: int,
    stream: list[tuple[int, int, int]],
    backfill: bool = False,
) -> tuple[sim.SimResult, int]:
    """With ``backfill``, leaf a opts in (N2) and every small job declares its runtime;
    ``threshold`` None: the tree sets none."""
    longest = max([run for _, _, run in stream] + [10])
    timeline: list[dict[str, object]] = [
        {
            "at": at,
            "create": _job("a", f"s{i:02d}", cpu, run if backfill else None),
            "runSeconds": run,
        }
        for i, (at, cpu, run) in enumerate(stream)
    ]
    timeline.append({"at": big_at, "create": _job("b", "big", big_cpu), "runSeconds": 10})
    timeline.sort(key=lambda entry: int(entry["at"]))  # type: ignore[call-overload]
    in_force = DEFAULT_STARVATION_SECONDS if threshold is None else threshold
    until = 121 + in_force + 3 * longest
    data = {
        "name": "starvation-bound",
        "config": {"policy": "Round", "oversellRate": 1.0},
        "objects": [_tree(threshold, backfill)],
        "timeline": timeline,
        "until": until,
    }
    return sim.run(sim.load_scenario(data, "generated")), longest


@settings(max_examples=40, deadline=None)
@heads_and_streams
def test_a_reserved_head_waits_at_most_threshold_plus_longest_run(
    threshold: int, big_at: int, big_cpu: int, stream: list[tuple[int, int, int]]
) -> None:
    result, longest = _play(threshold, big_at, big_cpu, stream)
    _assert_bound(result, longest, threshold, big_at)


@settings(max_examples=40, deadline=None)
@heads_and_streams
def test_with_backfill_a_reserved_head_still_waits_at_most_threshold_plus_longest_run(
    threshold: int, big_at: int, big_cpu: int, stream: list[tuple[int, int, int]]
) -> None:
    """N2: small jobs that declare their runtime may be admitted beside the reservation;
    the bound N1 promises holds all the same, and each one admitted past the reserved head
    while it was reserved ended by the time the head was admitted."""
    result, longest = _play(threshold, big_at, big_cpu, stream, backfill=True)
    _assert_bound(result, longest, threshold, big_at)
    big = WorkloadKey("b/big")
    big_at_ms = next(
        d.at_ms
        for d in result.decisions
        if isinstance(d.decision, Admitted) and d.decision.workload == big
    )
    runs = {f"a/s{i:02d}": run for i, (_, _, run) in enumerate(stream)}
    for d in result.decisions:
        reason = d.decision.reason if isinstance(d.decision, Admitted) else None
        if reason is not None and reason.code == "Backfilled":
            assert d.at_ms + runs[d.decision.workload] * 1000 <= big_at_ms


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 120), st.integers(CAPACITY // 2, CAPACITY), smalls)
def test_with_no_threshold_set_the_default_bounds_the_wait(
    big_at: int, big_cpu: int, stream: list[tuple[int, int, int]]
) -> None:
    """No node sets ``usher.io/starvation-seconds``: the default guard is on and bounds the
    head's wait by the default threshold plus the longest run."""
    result, longest = _play(None, big_at, big_cpu, stream)
    _assert_bound(result, longest, DEFAULT_STARVATION_SECONDS, big_at)


def test_with_no_threshold_set_a_stream_no_longer_starves_the_head() -> None:
    """The stream that starves the head with the guard off (below) does not once no node
    sets a threshold: the default reserves for it."""
    stream = [(at, 1, 8) for at in range(0, 900, 2)]  # arriving past the default threshold
    result, _ = _play(None, 1, CAPACITY, stream)
    assert result.jobs[WorkloadKey("b/big")].state == "Finished"


def _assert_bound(result: sim.SimResult, longest: int, threshold: int, big_at: int) -> None:
    big = WorkloadKey("b/big")
    admitted = [d.at_ms for d in result.decisions if isinstance(d.decision, Admitted)]
    big_admitted = [
        d.at_ms
        for d in result.decisions
        if isinstance(d.decision, Admitted) and d.decision.workload == big
    ]
    assert big_admitted, "big was never admitted"
    arrival = big_at * 1000
    passed = [at for at in admitted if arrival <= at < big_admitted[0]]
    bound = arrival + longest * 1000
    if passed:
        bound = max(bound, min(passed) + (threshold + longest) * 1000)
    assert big_admitted[0] <= bound


def test_without_the_guard_the_same_stream_starves_the_head() -> None:
    stream = [(at, 1, 8) for at in range(0, 200, 2)]  # still arriving at the horizon
    guarded, _ = _play(5, 1, CAPACITY, stream)
    assert guarded.jobs[WorkloadKey("b/big")].state == "Finished"
    unguarded, _ = _play(0, 1, CAPACITY, stream)
    assert unguarded.jobs[WorkloadKey("b/big")].state == "Pending"


def _engine_until_passed_over() -> Engine:
    """``big`` (16 cpu, leaf b, guard 30 s) passed over at t=2 by a 1-cpu job of leaf a."""
    engine = Engine(CONFIG)
    engine.apply(QuotaTreeApplied(root=parse_tree(_tree(30))), Millis(0))
    engine.apply(observed("a", "s0", 14), Millis(0))
    engine.decide(Millis(0))
    engine.apply(observed("b", "big", CAPACITY, created=1000), Millis(1000))
    engine.decide(Millis(1000))
    engine.apply(observed("a", "s1", 1, created=2000), Millis(2000))
    engine.decide(Millis(2000))
    return engine


def _rest(engine: Engine) -> bytes:
    """The same later history on either engine: a small job arrives under the reservation
    (it must wait, saying why), then the running jobs finish and ``big`` is admitted."""
    said: list[object] = []
    said += engine.apply(observed("a", "s2", 1, created=32000), Millis(32000))
    said += engine.decide(Millis(32000))
    said.append(engine.reason(WorkloadKey("a/s2")))
    said.append(engine.reason(WorkloadKey("b/big")))
    for name in ("s0", "s1"):
        said += engine.apply(WorkloadFinished(workload=WorkloadKey(f"a/{name}")), Millis(40000))
    said += engine.decide(Millis(40000))
    return msgspec.msgpack.encode(said)


def test_a_snapshot_carries_the_starvation_clock() -> None:
    """Restored between passes, an engine reserves when the original does, with the same
    reasons, and admits the starved head at the same instant."""
    original = _engine_until_passed_over()
    assert original.state.starving == {WorkloadKey("b/big"): 2000}
    restored = restore(snapshot(original), CONFIG)
    assert restored.state.starving == original.state.starving
    assert restored.next_wakeup() == original.next_wakeup() == 32000
    straight = _rest(original)
    assert _rest(restored) == straight
    decoded = msgspec.msgpack.decode(straight)
    assert any("BehindReservation" in str(item) for item in decoded)
    assert original.jobs()[WorkloadKey("b/big")].state == "Admitted"


def test_replay_of_the_log_alone_shows_the_reservation() -> None:
    """``usher explain``/``replay`` run no pass: the clock starts at the log's ``Admitted`` of
    a workload admitted past the head, and the reasons name the reservation."""
    root = msgspec.structs.replace(
        departments_tree(), attributes={"usher.io/starvation-seconds": "60"}
    )
    log = (
        Log()
        .tree(0, root)
        .job(1, "user-a/run", 50)
        .admitted(1.5, "user-a/run", 50)
        .job(2, "user-a/big", 60)
        .job(3, "user-a/small", 10)
        .admitted(3.5, "user-a/small", 10)
        .job(100, "user-a/later", 10)
    )
    rows = {row.job: row for row in history.replay(log.history(), EngineConfig()).jobs}
    big, later = rows[WorkloadKey("user-a/big")].reason, rows[WorkloadKey("user-a/later")].reason
    assert big is not None and later is not None
    assert big.message == (
        "root/Department-a holds cpu 40 of 60 for it since 2024-05-01T12:01:03Z, "
        "waited 96.5 s at the head"
    )
    assert (later.code, later.blocker) == ("BehindReservation", "user-a/big")
    # Before the threshold has run out nothing is held: the usual shortfall.
    early = history.replay(log.history(), EngineConfig(), until_seq=6)
    waiting = next(row for row in early.jobs if row.job == "user-a/big")
    assert waiting.reason is not None and waiting.reason.code == "QuotaExceeded"


def test_a_preview_under_a_reservation_is_the_pass_and_changes_nothing() -> None:
    engine = _engine_until_passed_over()
    engine.apply(observed("a", "s2", 1, created=32000), Millis(32000))
    before = snapshot(engine)
    preview = engine.preview_pass(Millis(32000))
    assert snapshot(engine) == before
    assert preview.decisions == engine.decide(Millis(32000)) == []
    reason = preview.waiting[WorkloadKey("a/s2")].reason
    assert reason is not None and reason.code == "BehindReservation"
