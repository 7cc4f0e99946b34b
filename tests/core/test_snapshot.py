"""Engine snapshots: restore + the tail of the log decides exactly as a full replay.

The property drives an engine through a random history (the workload generators of
``test_properties`` plus nodes, priority classes, tree changes, decisions made elsewhere,
ledger refusals and preemptor checks), snapshots it after a random number of steps, restores
it and plays the rest on the restored engine. Everything it says from then on, and its final
state, must be identical to the engine that never stopped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import msgspec
import pytest
from hypothesis import currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from schemas import (
    Admitted,
    Decision,
    Millis,
    NodeName,
    NodeObserved,
    NodeRemoved,
    Preempted,
    PriorityClassDeleted,
    PriorityClassObserved,
    QueueName,
    QuotaNode,
    QuotaPath,
    QuotaTreeApplied,
    QuotaTreeRejected,
    Reason,
    ReleaseCause,
    Released,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    Zone,
    ZoneServed,
)
from tests.builders.events import CORE, observed
from tests.builders.generated import Op, configs, creates, leaves_of, paths_of, trees
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import (
    ENCODED,
    FORMAT,
    REBUILT,
    JobRecord,
    SnapshotError,
    fingerprint,
    restore,
    snapshot,
)
from usher.core.model import reasons
from usher.core.model.config import EngineConfig, Policy, WithinQuota
from usher.core.state.durable import EngineState
from usher.core.state.indexed import Job


@dataclass(frozen=True)
class Step:
    """One thing that happens to an engine besides the creates of ``test_properties``."""

    kind: str
    a: int = 0
    b: int = 0
    c: int = 0
    zone: str = "default"
    flag: bool = False


ZONES = st.sampled_from(["default", "z2"])
small = st.integers(0, 60)
bursts = st.builds(
    # Several workloads of one namespace at once: leaves fill up and borrow, and a burst
    # in a leaf under its min then reclaims (holds, preemptors, the reclaim memo).
    Step,
    kind=st.just("burst"),
    a=st.integers(2, 6),
    b=st.integers(0, 8),
    c=st.integers(1, 10),
    zone=ZONES,
)
extra_steps = st.one_of(
    st.builds(Step, kind=st.sampled_from(["finish", "delete"]), a=small, flag=st.booleans()),
    st.builds(Step, kind=st.just("pass")),
    st.builds(
        # A create with a priority class (a) and/or a quota label (b).
        Step,
        kind=st.just("create"),
        a=st.integers(0, 2),
        b=st.integers(0, 3),
        c=st.integers(1, 25),
        zone=ZONES,
    ),
    st.builds(
        Step,
        kind=st.just("reobserve"),
        a=small,
        b=st.integers(0, 3),
        c=st.integers(1, 25),
        zone=ZONES,
    ),
    st.builds(
        Step,
        kind=st.just("node"),
        a=st.integers(0, 2),
        c=st.integers(0, 40),
        zone=ZONES,
        flag=st.booleans(),
    ),
    st.builds(Step, kind=st.just("node-removed"), a=st.integers(0, 2), zone=ZONES),
    st.builds(Step, kind=st.just("class"), a=st.integers(0, 1), b=st.integers(-2, 5)),
    st.builds(Step, kind=st.just("class-deleted"), a=st.integers(0, 1)),
    st.builds(Step, kind=st.just("served"), zone=ZONES),
    st.builds(Step, kind=st.just("tree"), flag=st.booleans()),
    st.builds(Step, kind=st.just("tree-rejected")),
    st.builds(Step, kind=st.just("refuse"), a=small),
    st.builds(Step, kind=st.just("refuse-reclaim"), a=small),
    st.builds(Step, kind=st.just("confirm")),
    st.builds(Step, kind=st.just("admitted-elsewhere"), a=small, b=st.integers(0, 5)),
    st.builds(Step, kind=st.just("preempted-elsewhere"), a=small, b=small),
    st.builds(
        Step,
        kind=st.just("released"),
        a=small,
        b=st.integers(0, 3),
    ),
    st.builds(Step, kind=st.just("check"), a=small, b=small),
)
histories = st.lists(st.one_of(creates, creates, bursts, extra_steps), min_size=20, max_size=80)
snapshot_configs = st.builds(
    dataclasses.replace,
    configs,
    zones=st.sampled_from([None, frozenset({Zone("default")})]),
)
CAUSES: tuple[ReleaseCause, ...] = ("Finished", "Failed", "Deleted", "Preempted")


class World:
    """The outside of an engine: the log's events and the ledger's answers, step by step.

    It is kept across the snapshot; only the engine is swapped, as a restarted service would.
    """

    def __init__(self, tree: QuotaNode, alternative: QuotaNode) -> None:
        self.trees = (tree, alternative)
        self.namespaces = [n.namespaces[0] for n in leaves_of(tree)] + ["orphan"]
        self.leaves = [QuotaPath(p) for p, n in paths_of(tree).items() if not n.children]
        self.created: list[WorkloadKey] = []
        self.last_pass: list[Decision] = []

    def pick(self, index: int) -> WorkloadKey | None:
        return self.created[index % len(self.created)] if self.created else None

    def step(self, engine: Engine, number: int, op: Op | Step) -> list[object]:
        """Play one step at time ``number`` seconds; what the engine said, in order."""
        now = Millis(number * 1000)
        out: list[object] = []
        if isinstance(op, Op):
            if op.kind == "create":
                namespace = self.namespaces[op.index % len(self.namespaces)]
                event = observed(
                    namespace,
                    f"j{number}",
                    op.cores,
                    created=now,
                    priority=op.priority,
                    zone=op.zone,
                )
                self.created.append(event.workload)
                out += engine.apply(event, now)
        else:
            out += self._extra(engine, now, number, op)
        if op.kind == "pass" or number % 3 == 2:
            self.last_pass = engine.decide(now)
            out += self.last_pass
        return out

    def _extra(self, engine: Engine, now: Millis, number: int, op: Step) -> list[object]:
        target = self.pick(op.a)
        match op.kind:
            case "create":
                namespace = self.namespaces[number % len(self.namespaces)]
                quota = [None, "L0", "D0", "nowhere"][op.b]
                event = observed(
                    namespace,
                    f"j{number}",
                    op.c,
                    created=now,
                    priority_class=[None, "pc0", "pc1"][op.a],
                    zone=op.zone,
                    quota_name=quota,
                    count=2 if op.c % 2 == 0 else 1,
                )
                self.created.append(event.workload)
                return list(engine.apply(event, now))
            case "burst":
                namespace = self.namespaces[op.b % len(self.namespaces)]
                out: list[object] = []
                for n in range(op.a):
                    event = observed(namespace, f"j{number}-{n}", op.c, created=now, zone=op.zone)
                    self.created.append(event.workload)
                    out += engine.apply(event, now)
                return out
            case "finish" if target is not None:
                return list(engine.apply(WorkloadFinished(workload=target, succeeded=op.flag), now))
            case "delete" if target is not None:
                return list(engine.apply(WorkloadDeleted(workload=target), now))
            case "reobserve" if target is not None:
                namespace, _, name = target.partition("/")
                event = observed(
                    namespace, name, op.c, created=Millis(op.b * 500), priority=op.b, zone=op.zone
                )
                return list(engine.apply(event, now))
            case "node":
                node = NodeObserved(
                    node=NodeName(f"n{op.a}"),
                    zone=Zone(op.zone),
                    allocatable={"cpu": op.c * CORE},
                    unschedulable=op.flag,
                )
                return list(engine.apply(node, now))
            case "node-removed":
                removed = NodeRemoved(node=NodeName(f"n{op.a}"), zone=Zone(op.zone))
                return list(engine.apply(removed, now))
            case "class":
                return list(engine.apply(PriorityClassObserved(name=f"pc{op.a}", value=op.b), now))
            case "served":
                return list(engine.apply(ZoneServed(zone=Zone(op.zone)), now))
            case "class-deleted":
                return list(engine.apply(PriorityClassDeleted(name=f"pc{op.a}"), now))
            case "tree":
                applied = QuotaTreeApplied(root=self.trees[1 if op.flag else 0])
                return list(engine.apply(applied, now))
            case "tree-rejected":
                return list(engine.apply(QuotaTreeRejected(errors=[]), now))
            case "refuse":
                # The ledger refused one reservation of the last pass.
                admitted = [d for d in self.last_pass if isinstance(d, Admitted)]
                if admitted:
                    key = admitted[op.a % len(admitted)].workload
                    engine.revert_admission(key, reasons.stale_view(key, "refused"))
            case "refuse-reclaim":
                victims = [d for d in self.last_pass if isinstance(d, Preempted)]
                if victims:
                    preemptor = victims[op.a % len(victims)].preemptor
                    mine = [v for v in victims if v.preemptor == preemptor]
                    engine.revert_preemption(preemptor, mine, reasons.stale_view(preemptor, "no"))
            case "confirm":
                # The ledger's outbox: the last pass's decisions come back through the log.
                confirmed: list[object] = []
                for decision in self.last_pass:
                    confirmed += engine.apply(decision, now)
                return confirmed
            case "admitted-elsewhere" if target is not None:
                leaf = self.leaves[op.b % len(self.leaves)]
                decision = Admitted(
                    workload=target,
                    queue=QueueName("q"),
                    quota=leaf,
                    zone=Zone("z2"),
                    requests={"cpu": (op.b + 1) * CORE},
                    priority=op.b,
                )
                return list(engine.apply(decision, now))
            case "preempted-elsewhere" if target is not None:
                holder = self.pick(op.b)
                assert holder is not None
                decision2 = Preempted(
                    workload=target,
                    queue=QueueName("q"),
                    quota=self.leaves[0],
                    preemptor=holder,
                    reason=reasons.stale_view(holder, "elsewhere"),
                )
                return list(engine.apply(decision2, now))
            case "released" if target is not None:
                decision3 = Released(
                    workload=target, quota=self.leaves[0], requests={}, cause=CAUSES[op.b]
                )
                return list(engine.apply(decision3, now))
            case "check" if target is not None:
                victim = self.pick(op.b)
                assert victim is not None
                return [engine.check_preemption(target, [victim], now)]
        return []


def _label_coverage(engine: Engine) -> None:
    # Shown by --hypothesis-show-statistics: how often each part of the state was non-empty.
    if not currently_in_test_context():
        return
    for part in ("_held", "_preemptors", "_wakeups", "_announce", "_reclaim_failed", "_nodes"):
        event(f"{part} at the split: {'yes' if getattr(engine.state, part[1:]) else 'no'}")
    noted = any(job.note is not None for job in engine.state.jobs.values())
    event(f"notes at the split: {'yes' if noted else 'no'}")


def _observable(engine: Engine) -> bytes:
    """Everything a caller can ask the engine, encoded (``next_wakeup`` last: it prunes)."""
    jobs = engine.jobs()
    return msgspec.msgpack.encode(
        [
            jobs,
            engine.queues(),
            engine.quota_used(),
            {key: engine.reason(key) for key in jobs},
            engine.next_wakeup(),
        ]
    )


def _check_split(
    config: EngineConfig,
    tree: QuotaNode,
    alternative: QuotaNode,
    history: list[Op | Step],
    split: int,
) -> None:
    """Play ``history`` straight, and again with a snapshot/restore after ``split`` steps."""

    def play(engine: Engine, world: World, steps: range) -> list[object]:
        said: list[object] = []
        for number in steps:
            said += world.step(engine, number, history[number])
        return said

    def fresh() -> tuple[Engine, World]:
        engine = Engine(config)
        engine.apply(QuotaTreeApplied(root=tree), Millis(0))
        return engine, World(tree, alternative)

    straight, world = fresh()
    said_straight = play(straight, world, range(len(history)))

    before, world = fresh()
    said_before = play(before, world, range(split))
    data_at_split = snapshot(before)
    _label_coverage(before)
    restored = restore(data_at_split, config)
    # Restoring loses nothing the snapshot carries: the same bytes come out again.
    assert snapshot(restored) == data_at_split
    said_after = play(restored, world, range(split, len(history)))

    assert msgspec.msgpack.encode(said_before + said_after) == msgspec.msgpack.encode(said_straight)
    assert snapshot(restored) == snapshot(straight)
    assert _observable(restored) == _observable(straight)


@settings(max_examples=200, deadline=None)
@given(snapshot_configs, trees(), trees(), histories, st.data())
def test_restored_engine_decides_exactly_as_the_one_that_never_stopped(
    config: EngineConfig,
    tree: QuotaNode,
    alternative: QuotaNode,
    history: list[Op | Step],
    data: st.DataObject,
) -> None:
    history = [*history, Step("pass")]
    # Late splits carry the most state (holds, preemptors, memo): draw them more often.
    end = len(history)
    split = data.draw(st.one_of(st.integers(0, end), st.integers(end * 2 // 3, end)), label="split")
    _check_split(config, tree, alternative, history, split)


TWO_LEAVES = QuotaNode(
    name="root",
    min={"cpu": 20 * CORE},
    max={"cpu": 20 * CORE},
    children=[
        QuotaNode(name="L0", min={"cpu": 10 * CORE}, max={"cpu": 20 * CORE}, namespaces=["ns0"]),
        QuotaNode(name="L1", min={"cpu": 10 * CORE}, max={"cpu": 20 * CORE}, namespaces=["ns1"]),
    ],
)
RECLAIM_STORY: list[Op | Step] = [
    Step("class", a=0, b=3),
    Step("burst", a=4, b=1, c=5),  # L1 borrows 10 cores of L0's min
    Step("pass"),
    Op("create", index=0, cores=10),  # L0 asks for its min back...
    Step("pass"),  # ...too early: the borrowers run < 3 s (a live reclaim memo entry)
    Step("tree-rejected"),  # the pass at t=5 s reclaims: Preempted x2 + the preemptor
    Step("refuse", a=0),  # the ledger refuses the preemptor: it keeps a hold
    Step("confirm"),  # the outbox's decisions come back
    Step("burst", a=2, b=0, c=5),
    Op("create", index=1, cores=5, priority=3),  # same-leaf reclaim with LowerPriority
    Step("pass"),
    Step("refuse-reclaim", a=0),
    Step("preempted-elsewhere", a=0, b=5),  # a hold decided by another zone
    Step("released", a=2, b=2),
    Step("finish", a=1, flag=True),
    Step("node", a=0, c=15),
    Step("admitted-elsewhere", a=3, b=1),
    Step("check", a=5, b=1),
    Step("pass"),
]


@pytest.mark.parametrize("policy", ["Round", "Block"])
@pytest.mark.parametrize("within", ["Never", "LowerPriority"])
def test_every_split_of_a_reclaim_story(policy: Policy, within: WithinQuota) -> None:
    # Holds, preemptors, live memo entries and wakeups are rare in random histories: this
    # story has each of them at some split, and every split is checked.
    config = EngineConfig(policy=policy, within_quota=within, min_runtime_ms=3000)
    for split in range(len(RECLAIM_STORY) + 1):
        _check_split(config, TWO_LEAVES, TWO_LEAVES, RECLAIM_STORY, split)


# ---------------------------------------------------------------------- table tests


def _busy_engine(config: EngineConfig) -> Engine:
    """A small engine with something in every part of the state."""
    root = QuotaNode(
        name="root",
        min={"cpu": 10 * CORE},
        max={"cpu": 10 * CORE},
        children=[
            QuotaNode(name="A", min={"cpu": 6 * CORE}, max={"cpu": 10 * CORE}, namespaces=["a"]),
            QuotaNode(
                name="B",
                min={"cpu": 4 * CORE},
                max={"cpu": 10 * CORE},
                namespaces=["b"],
                attributes={"usher.io/min-runtime-seconds": "30"},
            ),
        ],
    )
    engine = Engine(config)
    engine.apply(QuotaTreeApplied(root=root), Millis(0))
    engine.apply(PriorityClassObserved(name="high", value=100), Millis(0))
    engine.apply(
        NodeObserved(node=NodeName("n1"), zone=Zone("default"), allocatable={"cpu": 8 * CORE}),
        Millis(0),
    )
    engine.apply(observed("b", "borrower", 8, created=1), Millis(1))
    engine.apply(observed("a", "waits", 3, created=2, priority_class="high"), Millis(2))
    engine.apply(observed("nowhere", "lost", 1, created=3), Millis(3))
    engine.decide(Millis(10))
    for n in range(5):
        engine.apply(observed("a", f"more{n}", 2, created=10 + n), Millis(11))
    return engine


def test_snapshot_bytes_are_deterministic() -> None:
    config = EngineConfig(min_runtime_ms=1000)
    first, second = _busy_engine(config), _busy_engine(config)
    data = snapshot(first)
    assert data == snapshot(first) == snapshot(second)
    assert snapshot(restore(data, config)) == data
    empty = snapshot(Engine(config))  # no tree, nothing known yet
    assert snapshot(restore(empty, config)) == empty


@pytest.mark.parametrize(
    ("changed", "field"),
    [
        (EngineConfig(policy="Block"), "policy=Block"),
        (EngineConfig(oversell_rate=Fraction(3, 2)), "oversell=3/2"),
        (EngineConfig(within_quota="LowerPriority"), "within=LowerPriority"),
        (EngineConfig(min_runtime_ms=5000), "min_runtime_ms=5000"),
        (EngineConfig(zones=frozenset({Zone("default")})), "zones=default"),
        (EngineConfig(half_life_ms=3_600_000), "half_life_ms=3600000"),  # F1
    ],
)
def test_snapshot_of_another_config_is_refused(changed: EngineConfig, field: str) -> None:
    data = snapshot(_busy_engine(EngineConfig()))
    with pytest.raises(SnapshotError) as caught:
        restore(data, changed)
    error = caught.value
    assert error.reason == "config"
    assert error.expected == fingerprint(changed) and field in error.expected
    assert error.found == fingerprint(EngineConfig())
    assert error.errors[0].path == "snapshot.config"
    assert not error.transient


def test_snapshot_of_another_format_is_refused() -> None:
    record = msgspec.msgpack.decode(snapshot(_busy_engine(EngineConfig())))
    record["format"] = FORMAT + 1
    with pytest.raises(SnapshotError) as caught:
        restore(msgspec.msgpack.encode(record), EngineConfig())
    assert caught.value.reason == "format"
    assert (caught.value.expected, caught.value.found) == (str(FORMAT), str(FORMAT + 1))


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\x00 not a snapshot",
        b"\xc1",
        msgspec.msgpack.encode({"format": FORMAT}),
        msgspec.msgpack.encode([1, 2, 3]),
        msgspec.json.encode({"format": FORMAT}),
    ],
)
def test_garbage_is_refused_with_a_typed_error(garbage: bytes) -> None:
    with pytest.raises(SnapshotError) as caught:
        restore(garbage, EngineConfig())
    assert caught.value.reason == "undecodable"


def test_truncated_snapshot_is_refused() -> None:
    data = snapshot(_busy_engine(EngineConfig()))
    for cut in (1, len(data) // 2, len(data) - 1):
        with pytest.raises(SnapshotError):
            restore(data[:cut], EngineConfig())


def test_contradictory_snapshot_is_refused_as_inconsistent() -> None:
    record = msgspec.msgpack.decode(snapshot(_busy_engine(EngineConfig())))
    record["used"] = record["used"][:1]  # usage for fewer nodes than the tree has
    with pytest.raises(SnapshotError) as caught:
        restore(msgspec.msgpack.encode(record), EngineConfig())
    assert caught.value.reason == "inconsistent"


def test_every_engine_attribute_and_job_field_is_accounted_for() -> None:
    # A new attribute of the engine or of Job must be added to the snapshot deliberately.
    fields = set(EngineState.__slots__)
    assert fields == ENCODED, fields ^ ENCODED
    attributes = set(vars(Engine())) - {"state"}
    assert attributes == REBUILT, attributes ^ REBUILT
    assert set(Job.__slots__) == set(JobRecord.__struct_fields__)


def test_restored_engine_answers_like_the_original() -> None:
    config = EngineConfig(min_runtime_ms=1000)
    original = _busy_engine(config)
    restored = restore(snapshot(original), config)
    assert _observable(restored) == _observable(original)
    later: Callable[[Engine], list[Decision]] = lambda e: e.decide(Millis(40_000))  # noqa: E731
    assert msgspec.msgpack.encode(later(restored)) == msgspec.msgpack.encode(later(original))
    assert restored.job_state(WorkloadKey("a/waits")) == original.job_state(WorkloadKey("a/waits"))
    assert isinstance(restored.reason(WorkloadKey("nowhere/lost")), Reason)
