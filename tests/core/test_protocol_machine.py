"""Stateful test of the admission protocol: zone engines, the preemptor and a ledger model.

What it does: a hypothesis rule-based state machine plays the protocol of services/README.md
without servers: three zone engines (``Engine`` with ``EngineConfig(zones={zone})``) run
passes split by the dequeuer's own ``plan_pass``, send admissions to a model of the ledger
(``tests.core.ledger_model``) and reclaims to a preemptor engine (``check_preemption``) and
then the ledger, reverting refusals exactly as the dequeuer does. The ledger's decisions wait
in its outbox until a rule relays them to the log, so engines often decide on a log that lags
the ledger; each engine follows the log with its own cursor, restarts from a snapshot or from
scratch; a watcher reports preempted victims stopped and admitted jobs finished. After every
rule: no node over its cap (usage and running usage), no engine believing in an admission the
ledger did not grant, and every engine caught up on a settled log agreeing with the ledger on
usage, grants and stopping victims. At teardown everything is drained: every job must end.
The tree borrows and reclaims: Department-a min 60 / Department-b min 40 under a root of 100
cpu, one leaf with ``LowerPriority``, one with a minimum runtime, one with min 0 and a ready
timeout (R10): its admitted jobs that no rule reports ready in time are requeued through the
ledger, stop like preempted victims (counted until released) and come back after a backoff,
or end inadmissible after their last attempt (teardown deletes those). A second machine plays
the same rules over ``ZONED_TREE``, whose leaves guarantee part of their ``min`` per zone (Z4),
a third over ``LENDING_TREE``, whose leaves lend part or none of their idle guarantee and
reclaim from lower-priority borrowers only or not at all (L1, L2), and a fourth over
``POLICY_TREE``, whose leaves set the preemption policies P1-P3.
``USHER_LONG_TESTS=1`` (``make test-long``) runs many more and longer examples.
What it must never do: start servers, read the wall clock, or share state between examples.
"""

from __future__ import annotations

from dataclasses import dataclass

import hypothesis.strategies as st
import msgspec
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from schemas import (
    Millis,
    PodSet,
    Preempted,
    QuotaNode,
    QuotaTreeApplied,
    Reason,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    WorkloadProgress,
    Zone,
)
from tests.core.ledger_model import (
    ADMITTED,
    HELD,
    LENDING_LIMIT,
    MIN_RUNTIME,
    OWN_VICTIMS,
    PREEMPTING,
    RECLAIM_WITHIN,
    WHILE_BORROWING,
    WITHIN_QUOTA,
    WITHIN_QUOTA_REQUEST,
    ZONE_MAX,
    ZONE_MIN,
    Allocation,
    LedgerModel,
    Message,
)
from tests.long import LONG
from usher.core.engine.facade import Engine
from usher.core.engine.pass_plan import plan_pass
from usher.core.engine.snapshot import restore, snapshot
from usher.core.model import reasons
from usher.core.model.config import EngineConfig

CORE = 1000
ZONES = (Zone("zone-1"), Zone("zone-2"), Zone("zone-3"))
PREEMPTOR = "preemptor"
NAMESPACES = ("ns-a", "ns-b", "ns-c")
PRIORITIES = (0, 100, 1000)
MIN_RUNTIME_S = 3
READY_TIMEOUT_S = 2
READINESS = {
    "usher.io/ready-timeout-seconds": str(READY_TIMEOUT_S),
    "usher.io/requeue-backoff-seconds": "1",
    "usher.io/requeue-max-attempts": "3",
}
START_MS = 1_000_000


def _leaf(name: str, lo: int, hi: int, namespace: str, **attributes: str) -> QuotaNode:
    return QuotaNode(
        name=name,
        min={"cpu": lo * CORE},
        max={"cpu": hi * CORE},
        namespaces=[namespace],
        attributes=attributes,
    )


def _tree(root: dict[str, str], team_a: dict[str, str], team_b: dict[str, str]) -> QuotaNode:
    """Department-a (team-a, min 60) and Department-b (team-b, min 40; team-c, no guarantee,
    readiness timeouts) under a root of 100 cpu; ``root``, ``team_a`` and ``team_b`` are
    those nodes' attributes."""
    return QuotaNode(
        name="root",
        min={"cpu": 100 * CORE},
        max={"cpu": 100 * CORE},
        attributes=root,
        children=[
            QuotaNode(
                name="Department-a",
                min={"cpu": 60 * CORE},
                max={"cpu": 100 * CORE},
                children=[_leaf("team-a", 60, 100, "ns-a", **team_a)],
            ),
            QuotaNode(
                name="Department-b",
                min={"cpu": 40 * CORE},
                max={"cpu": 100 * CORE},
                children=[
                    _leaf("team-b", 40, 100, "ns-b", **team_b),
                    _leaf("team-c", 0, 50, "ns-c", **READINESS),
                ],
            ),
        ],
    )


TREE = _tree({}, {WITHIN_QUOTA: "LowerPriority"}, {MIN_RUNTIME: str(MIN_RUNTIME_S)})


ZONED_TREE = _tree(
    {ZONE_MAX: "zone-1: cpu=40"},
    {ZONE_MIN: "zone-1: cpu=30"},
    {MIN_RUNTIME: str(MIN_RUNTIME_S), ZONE_MIN: "zone-1: cpu=10; zone-2: cpu=20"},
)
"""TREE with zone-1 capped at 40 cpu (Z1, so it fills while the root has room) and guarantees
per zone (Z4): team-a and team-b reclaim in zone-1 (team-b in zone-2 too) from each other's
usage there beyond their zone guarantees, though within ``min``."""


LENDING_TREE = _tree(
    {},
    {WITHIN_QUOTA: "LowerPriority", RECLAIM_WITHIN: "LowerPriority", LENDING_LIMIT: "cpu=50"},
    {MIN_RUNTIME: str(MIN_RUNTIME_S), RECLAIM_WITHIN: "Never"},
)
"""TREE with lending policies (L1, L2): team-a lends at most 50 of its idle 60 cpu and
reclaims only from lower-priority borrowers; team-b never reclaims, so it lends nothing of its
idle 40 (team-c, guaranteed nothing, borrows only what team-a lends)."""


@dataclass(frozen=True)
class JobSpec:
    namespace: str
    zone: Zone
    cpu: int
    pods: int
    priority: int


job_specs = st.builds(
    JobSpec,
    namespace=st.sampled_from(NAMESPACES),
    zone=st.sampled_from(ZONES),
    cpu=st.integers(1, 10),
    pods=st.integers(1, 3),
    priority=st.sampled_from(PRIORITIES),
)


@st.composite
def bursts(draw: st.DrawFn) -> list[JobSpec]:
    """Jobs created together; often all of one team, so that one department borrows."""
    specs = draw(st.lists(job_specs, min_size=1, max_size=8))
    team = draw(st.sampled_from((None, *NAMESPACES)))
    if team is None:
        return specs
    return [JobSpec(team, s.zone, s.cpu, s.pods, s.priority) for s in specs]


RESTARTS = ("save", "snapshot", "scratch")


def _config(zone: Zone | None) -> EngineConfig:
    return EngineConfig(zones=frozenset({zone}) if zone is not None else None)


def _admitted_in(engine: Engine) -> set[WorkloadKey]:
    return {key for key, view in engine.jobs().items() if view.state == "Admitted"}


def _held_in(engine: Engine) -> set[WorkloadKey]:
    # No public query lists holds (``reason_now`` tells them apart from stopping victims only
    # by its message), so the test reads the engine's index of them.
    return set(engine.state.held)


def _stopping_in(engine: Engine) -> set[WorkloadKey]:
    return set(engine.stopping)


def _end_of(row: Allocation) -> Message:
    """The log entry after which no engine may hold ``row`` as admitted.

    Its ``Preempted``, ``WorkloadFinished`` or ``WorkloadDeleted``; but an engine that saw a
    workload deleted or finished before the ledger's ``Admitted`` reached the log admits it
    on that ``Admitted`` again, until the ``Released`` that follows it.
    """
    end, started = row.ended_by, row.started_by
    assert end is not None, f"{row.workload} {row.state} with no entry ending it"
    if started is None or started.seq is None or end.seq is None:
        return end
    if started.seq > end.seq:
        assert row.released_by is not None
        return row.released_by
    return end


def _count(data: st.DataObject | None, what: str, why: Reason | None) -> None:
    """Statistics (``--hypothesis-show-statistics``): which paths the examples reached."""
    if data is not None:
        event(f"{what} {'granted' if why is None else 'refused ' + why.code}")


def _count_victims(data: st.DataObject | None, leaf: str, victims: list[Preempted]) -> None:
    """Statistics: each victim's reason, and reclaims taking the preemptor's own leaf's work
    and other leaves' together (P1)."""
    if data is None:
        return
    for victim in victims:
        event(f"victim {victim.reason.code}")
    if len({victim.quota == leaf for victim in victims}) == 2:
        event("victims of its own leaf and of others together")


def _said(what: str, key: WorkloadKey, why: Reason | None) -> str:
    return f"{what} {key}: " + ("granted" if why is None else f"{why.code} {why.message}")


class ProtocolMachine(RuleBasedStateMachine):
    """Zone engines, the preemptor's engine, the ledger model, the log and its outbox."""

    tree = TREE

    def __init__(self) -> None:
        super().__init__()
        self.now = START_MS
        self.ledger = LedgerModel.of_tree(self.tree, EngineConfig().oversell_rate)
        self.log: list[Message] = []
        self.names = [*ZONES, PREEMPTOR]
        self.engines: dict[str, Engine] = {n: Engine(self._config_of(n)) for n in self.names}
        self.cursor: dict[str, int] = dict.fromkeys(self.names, 0)
        self.saved: dict[str, tuple[bytes, int]] = {}
        self.specs: dict[WorkloadKey, WorkloadObserved] = {}
        self.gone: set[WorkloadKey] = set()
        self.created = 0
        self.trace: list[str] = []
        """What the passes asked and were answered, for failure messages."""
        self.ready_seen: set[int] = set()
        """The admissions (``id`` of their ``Admitted`` message) whose pods were reported ready."""

    @staticmethod
    def _config_of(name: str) -> EngineConfig:
        return _config(None if name == PREEMPTOR else Zone(name))

    # ------------------------------------------------------------------ plumbing

    def _append(self, message: Message) -> None:
        message.seq, message.time_ms = len(self.log), self.now
        self.log.append(message)

    def _follow_to(self, name: str, target: int) -> None:
        engine = self.engines[name]
        while self.cursor[name] < min(target, len(self.log)):
            entry = self.log[self.cursor[name]]
            engine.apply(entry.event, Millis(entry.time_ms))
            self.cursor[name] += 1

    def _relay(self, count: int) -> None:
        for message in self.ledger.outbox[:count]:
            self._append(message)
        del self.ledger.outbox[:count]

    def _running(self) -> list[WorkloadKey]:
        """Jobs whose pods may run: granted, and the watcher saw their ``Admitted``."""
        out = []
        for key, row in sorted(self.ledger.live.items()):
            if row.state in (ADMITTED, PREEMPTING) and self._started(key):
                out.append(key)
        return out

    def _started(self, key: WorkloadKey) -> bool:
        started = self.ledger.live[key].started_by
        return started is not None and started.seq is not None

    def _stoppable(self) -> list[WorkloadKey]:
        """Victims whose ``Preempted`` is on the log (the watcher suspends them from it)."""
        return sorted(
            key
            for key, row in self.ledger.live.items()
            if row.state == PREEMPTING and row.ended_by is not None and row.ended_by.seq is not None
        )

    # ------------------------------------------------------------------ rules

    @initialize(burst=bursts(), settled=st.booleans(), data=st.data())
    def preload(self, burst: list[JobSpec], settled: bool, data: st.DataObject) -> None:
        """The tree, then a first burst decided at once: a team borrows before others come."""
        self._append(Message(QuotaTreeApplied(root=self.tree)))
        self.create(burst)
        for zone in ZONES:
            self.decide_caught_up(zone, data)
        if settled:
            self.settle()

    @rule(burst=bursts())
    def create(self, burst: list[JobSpec]) -> None:
        for spec in burst:
            self.created += 1
            name = f"j{self.created}"
            key = WorkloadKey(f"{spec.namespace}/{name}")
            event = WorkloadObserved(
                workload=key,
                namespace=spec.namespace,
                name=name,
                kind="batch/v1/Job",
                zone=spec.zone,
                priority=spec.priority,
                created_ms=Millis(self.now),
                pod_sets=[PodSet(name="main", count=spec.pods, requests={"cpu": spec.cpu * CORE})],
            )
            self.specs[key] = event
            self._append(Message(event))

    @rule(name=st.sampled_from([*ZONES, PREEMPTOR]), steps=st.integers(1, 8))
    def follow(self, name: str, steps: int) -> None:
        self._follow_to(name, self.cursor[name] + steps)

    @rule(count=st.integers(1, 6))
    def relay(self, count: int) -> None:
        self._relay(count)

    @rule()
    def settle(self) -> None:
        """Outbox relayed, every engine caught up: the state invariant 3 compares."""
        self._relay(len(self.ledger.outbox))
        for name in self.names:
            self._follow_to(name, len(self.log))

    @rule(zone=st.sampled_from(ZONES), data=st.data())
    def decide(self, zone: Zone, data: st.DataObject) -> None:
        """A pass on whatever part of the log the engine has seen."""
        self._pass(zone, data)

    @rule(zone=st.sampled_from(ZONES), data=st.data())
    def decide_caught_up(self, zone: Zone, data: st.DataObject) -> None:
        """A pass right after reading the whole log (the outbox may still lag)."""
        self._follow_to(zone, len(self.log))
        self._pass(zone, data)

    # No preconditions: a rule with nothing to act on does nothing (filtered rule draws make
    # hypothesis reject most examples and shrink slowly).
    @rule(data=st.data())
    def victim_stopped(self, data: st.DataObject) -> None:
        if not self._stoppable():
            return
        key = data.draw(st.sampled_from(self._stoppable()), label="stopped")
        self._append(Message(self.specs[key]))
        self.ledger.stopped(key, self.now)

    @rule(data=st.data())
    def ready(self, data: st.DataObject) -> None:
        """The watcher sees every pod of a running job ready (R10)."""
        if not self._running():
            return
        self._report_ready(data.draw(st.sampled_from(self._running()), label="ready"))

    def _report_ready(self, key: WorkloadKey) -> None:
        pods = sum(p.count for p in self.specs[key].pod_sets)
        self._append(Message(WorkloadProgress(workload=key, ready=pods, total=pods)))
        self.ready_seen.add(id(self.ledger.live[key].started_by))

    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        if not self._running():
            return
        self._end(data.draw(st.sampled_from(self._running()), label="finished"), deleted=False)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        alive = sorted(set(self.specs) - self.gone)
        if not alive:
            return
        self._end(data.draw(st.sampled_from(alive), label="deleted"), deleted=True)

    @rule(ms=st.integers(1, 2500))
    def tick(self, ms: int) -> None:
        self.now += ms

    @rule(name=st.sampled_from([*ZONES, PREEMPTOR]), how=st.sampled_from(RESTARTS))
    def restart(self, name: str, how: str) -> None:
        """Save a snapshot, or restart from the last one saved (now if none), or from scratch."""
        config = self._config_of(name)
        if how == "save":
            self.saved[name] = (snapshot(self.engines[name]), self.cursor[name])
        elif how == "snapshot":
            data, cursor = self.saved.get(name, (snapshot(self.engines[name]), self.cursor[name]))
            self.engines[name], self.cursor[name] = restore(data, config), cursor
        else:
            self.engines[name], self.cursor[name] = Engine(config), 0
            self._follow_to(name, len(self.log))

    # ------------------------------------------------------------------ the dequeuer's pass

    def _pass(self, zone: Zone, data: st.DataObject | None) -> bool:
        """One pass carried out as ``services.dequeuer.service.Dequeuer.decide`` does.

        True when it asked anything of the ledger (the pass changed or tried to change it).
        """
        engine = self.engines[zone]
        plan = plan_pass(engine.decide(Millis(self.now)))
        for requeued in plan.requeues:
            # A refusal needs no revert: the ledger refuses only what already ended or was
            # preempted, and the log brings that to the engine (R10).
            why = self.ledger.requeue(requeued)
            _count(data, "requeue", why)
            self.trace.append(_said(f"{zone} requeue", requeued.workload, why))
        for admitted in plan.admissions:
            why = self.ledger.reserve(admitted, self.now)
            _count(data, "reservation", why)
            self.trace.append(_said(f"{zone} reserve", admitted.workload, why))
            if why is not None:
                engine.revert_admission(admitted.workload, why)
        for preemptor, victims in plan.reclaims:
            _count_victims(data, preemptor.quota, victims)
            why = self._check(zone, preemptor.workload, [v.workload for v in victims], data)
            _count(data, "reclaim (preemptor)", why)
            if why is None:
                why = self.ledger.preempt(preemptor, victims, self.now)
                _count(data, "reclaim (ledger)", why)
            self.trace.append(
                _said(
                    f"{zone} reclaim of {[v.workload for v in victims]} for",
                    preemptor.workload,
                    why,
                )
            )
            if why is not None:
                engine.revert_preemption(preemptor.workload, victims, why)
        return bool(plan.admissions or plan.reclaims or plan.requeues)

    def _check(
        self,
        zone: Zone,
        preemptor: WorkloadKey,
        victims: list[WorkloadKey],
        data: st.DataObject | None,
    ) -> Reason | None:
        """The preemptor service: reach the proposer's log position (or give up), check."""
        wanted = self.cursor[zone]
        if data is None:
            self._follow_to(PREEMPTOR, len(self.log))
        elif self.cursor[PREEMPTOR] < wanted and data.draw(st.integers(0, 4), label="late") == 0:
            return reasons.stale_view(preemptor, "the preemptor is behind")
        else:
            start = max(wanted, self.cursor[PREEMPTOR])
            self._follow_to(PREEMPTOR, data.draw(st.integers(start, len(self.log)), label="pre"))
        return self.engines[PREEMPTOR].check_preemption(preemptor, victims, Millis(self.now))

    def _end(self, key: WorkloadKey, *, deleted: bool) -> None:
        event = WorkloadDeleted(workload=key) if deleted else WorkloadFinished(workload=key)
        message = Message(event)
        self._append(message)
        self.ledger.ended(key, message, self.now)
        if deleted or key not in self.ledger.live:
            self.gone.add(key)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def offer_keys_are_fresh(self) -> None:
        """0. Every engine's cached interleave keys equal freshly computed ones."""
        for name in self.names:
            assert self.engines[name].stale_offer_keys() == [], name

    @invariant()
    def within_caps(self) -> None:
        """1. Safety: usage (groups count max(victims, hold)) and running usage <= cap."""
        assert not self.ledger.over_cap(self.ledger.usage()), self.ledger.over_cap(
            self.ledger.usage()
        )
        running = self.ledger.running_usage()
        assert not self.ledger.over_cap(running), f"running: {self.ledger.over_cap(running)}"
        assert not self.ledger.orphan_holds(), f"held, no victim left: {self.ledger.orphan_holds()}"

    @invariant()
    def beliefs_come_from_grants(self) -> None:
        """2. Every engine's Admitted workload was granted, unless it has not seen the end."""
        for name in self.names:
            phantoms = self._phantoms(name)
            assert not phantoms, f"{name} believes in admissions the ledger has not: {phantoms}"

    def _phantoms(self, name: str) -> list[str]:
        out = []
        for key in sorted(_admitted_in(self.engines[name])):
            row = self.ledger.latest.get(key)
            if row is None:
                out.append(f"{key}: never granted")
            elif row.state not in (ADMITTED, HELD):
                end = _end_of(row)
                if end.seq is not None and end.seq < self.cursor[name]:
                    out.append(f"{key}: {row.state}, ended by log entry {end.seq} it applied")
        return out

    @invariant()
    def settled_engines_agree(self) -> None:
        """3. Caught up on the whole log with the outbox empty: the engine equals the ledger."""
        if self.ledger.outbox:
            return
        for name in self.names:
            if self.cursor[name] == len(self.log):
                self._agrees(name)

    def _agrees(self, name: str) -> None:
        engine = self.engines[name]
        used = {p: u for p, u in engine.quota_used().items() if u}
        assert used == self.ledger.usage(), f"{name} usage {used} != ledger {self.ledger.usage()}"
        admitted, held = _admitted_in(engine), _held_in(engine)
        ledger_admitted = {k for k, r in self.ledger.live.items() if r.state == ADMITTED}
        ledger_held = {k for k, r in self.ledger.live.items() if r.state == HELD}
        assert admitted | held == ledger_admitted | ledger_held, (
            f"{name}: admitted {sorted(admitted)} held {sorted(held)}; ledger admitted "
            f"{sorted(ledger_admitted)} held {sorted(ledger_held)}"
        )
        assert ledger_admitted <= admitted, f"{name} misses {sorted(ledger_admitted - admitted)}"
        assert held <= ledger_held, f"{name} holds {sorted(held - ledger_held)}"
        preempting = {k for k, r in self.ledger.live.items() if r.state == PREEMPTING}
        assert _stopping_in(engine) == preempting, (
            f"{name} stopping {sorted(_stopping_in(engine))} != ledger {sorted(preempting)}"
        )

    # ------------------------------------------------------------------ liveness

    def teardown(self) -> None:
        """4. Drained, every job ends; at every quiet point nobody waits while it fits."""
        for _ in range(len(self.specs) + 5):
            self._quiesce()
            if self.gone >= set(self.specs):
                assert not self.ledger.live, f"allocations outlive their jobs: {self.ledger.live}"
                return
            for key in self._running():
                self._end(key, deleted=False)
            for key in sorted(set(self.specs) - self.gone):
                view = self.engines[self.specs[key].zone].job_state(key)
                if view is not None and view.state == "Inadmissible":
                    self._end(key, deleted=True)  # out of attempts: only people end it
            self.now += MIN_RUNTIME_S * 1000
        stuck = {k: self.engines[self.specs[k].zone].reason(k) for k in set(self.specs) - self.gone}
        raise AssertionError(f"jobs never finished: {stuck}")

    def _quiesce(self) -> None:
        """Relay, stop victims, catch up and pass until a pass asks nothing of the ledger.

        A refused pass is retried a second later (the dequeuer's backoff): engines date an
        admission by when they saw it, so a min-runtime protection may end a little later in
        the preemptor's engine than in the proposer's.
        """
        for _ in range(100):
            self.settle()
            # Pods of what runs become ready at a quiet point (a never-ready gang would be
            # requeued until it is out of attempts: the steps before explore that, R10).
            for key in self._running():
                if id(self.ledger.live[key].started_by) not in self.ready_seen:
                    self._report_ready(key)
            self.settle()
            while self._stoppable():
                for key in self._stoppable():
                    self._append(Message(self.specs[key]))
                    self.ledger.stopped(key, self.now)
                self.settle()
            self.settled_engines_agree()
            asked = [zone for zone in ZONES if self._pass(zone, None)]
            self.beliefs_come_from_grants()
            if not asked and not self.ledger.outbox:
                self._nobody_fits_and_waits()
                return
            self.now += 1000
        last = "\n".join(self.trace[-12:])
        raise AssertionError(f"passes keep asking the ledger, no fixpoint; last:\n{last}")

    def _nobody_fits_and_waits(self) -> None:
        for zone in ZONES:
            engine = self.engines[zone]
            for key, view in engine.jobs().items():
                if view.state == "Pending" and self.specs[key].zone == zone:
                    assert view.reason is None or view.reason.code != "NotYetEvaluated", (
                        f"{key} waits in {zone} though a pass ran: {view.reason}"
                    )


def _machine_settings(examples: int, long_examples: int) -> settings:
    """How a protocol machine runs: ``examples`` histories, ``long_examples`` with LONG."""
    return settings(
        max_examples=long_examples if LONG else examples,
        stateful_step_count=80 if LONG else 50,
        deadline=None,
        report_multiple_bugs=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


ProtocolMachine.TestCase.settings = _machine_settings(500, 5000)
TestProtocol = ProtocolMachine.TestCase


class ZonedProtocolMachine(ProtocolMachine):
    """The same protocol over ZONED_TREE: reclaims of guarantees per zone (Z4) proposed by the
    engines, checked by the preemptor and granted by the ledger model alike."""

    tree = ZONED_TREE


ZonedProtocolMachine.TestCase.settings = _machine_settings(200, 2000)
TestZonedProtocol = ZonedProtocolMachine.TestCase


class LendingProtocolMachine(ProtocolMachine):
    """The same protocol over LENDING_TREE: what the engines admit and reclaim under L1 and
    L2, checked by the preemptor and granted by the ledger model alike (a disagreement leaves
    passes asking forever, which teardown refuses)."""

    tree = LENDING_TREE


LendingProtocolMachine.TestCase.settings = _machine_settings(200, 2000)
TestLendingProtocol = LendingProtocolMachine.TestCase


def _with_leaf_attributes(
    root: QuotaNode, extra: dict[str, dict[str, str]], sizes: dict[str, tuple[int, int]]
) -> QuotaNode:
    """``root`` with ``extra[name]`` added to the attributes of the node called ``name`` and
    ``sizes[name]`` cpu as its min and max."""
    children = [_with_leaf_attributes(child, extra, sizes) for child in root.children]
    attributes = {**root.attributes, **extra.get(root.name, {})}
    low, high = sizes.get(root.name, (root.min["cpu"] // CORE, root.max["cpu"] // CORE))
    return msgspec.structs.replace(
        root,
        attributes=attributes,
        children=children,
        min={"cpu": low * CORE},
        max={"cpu": high * CORE},
    )


POLICY_TREE = _with_leaf_attributes(
    TREE,
    {
        "team-a": {OWN_VICTIMS: "true"},
        "team-b": {WHILE_BORROWING: "LowerPriorityBorrowersOnly:100"},
        "team-c": {WITHIN_QUOTA: "LowerPriority", WITHIN_QUOTA_REQUEST: "WithinMin"},
    },
    {
        "root": (40, 40),
        "Department-a": (20, 40),
        "team-a": (10, 40),
        "Department-b": (20, 40),
        "team-b": (20, 40),
        "team-c": (0, 20),
    },
)
"""TREE on a root of 40 cpu (so that it is often full) with the preemption policies set on
some leaves (P1-P3): team-a (LowerPriority, min 10) takes its own victims and other leaves'
borrowers in one search; team-b beyond its guarantee takes borrowers of priority below its own
and at most 100, only what they borrow beyond their guarantee (with plain ``LowerPriority``
preemptions go round for ever here: team-a's own-leaf preemptions make it borrow again);
team-c (min 0, LowerPriority) may not preempt in its leaf, every request being beyond its
min."""


class PolicyProtocolMachine(ProtocolMachine):
    """The same protocol over POLICY_TREE: reclaims the preemption policies allow, proposed by
    the engines, checked by the preemptor and granted by the ledger model alike."""

    tree = POLICY_TREE


PolicyProtocolMachine.TestCase.settings = _machine_settings(200, 2000)
TestPolicyProtocol = PolicyProtocolMachine.TestCase
