"""The dequeuer over real NATS: replay, announcements of its own zone, poison entries parked,
and a requeue for readiness carried out with the real ledger (R10)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from nats.js import JetStreamContext

from schemas import (
    Admitted,
    DeadLetter,
    Envelope,
    EventId,
    Inadmissible,
    LogEvent,
    Millis,
    NodeHeld,
    PassRan,
    Preempted,
    QueueName,
    QuotaPath,
    QuotaTreeApplied,
    Released,
    Requeued,
    Retried,
    Unmapped,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    Zone,
    decode,
)
from services.common.settings import ServiceSettings
from services.dequeuer.service import main
from services.ledger.service import main as ledger_main
from tests.builders.events import observed
from tests.builders.trees import two_leaf_tree
from tests.conftest import Infra
from tests.e2e.harness import read_log
from tests.services.helpers import eventually, log_events, publish, running
from usher.adapters.nats.log import publish_envelope
from usher.adapters.nats.subjects import Subjects
from usher.core.engine.facade import Engine
from usher.core.engine.pass_plan import PassPlan, plan_pass
from usher.core.history.pass_audit import audit_passes
from usher.core.model.config import EngineConfig
from usher.core.protocol.log import log_entry


def _settings(infra: Infra, subjects: Subjects, zone: str) -> ServiceSettings:
    return ServiceSettings(
        nats_url=infra.nats_url,
        prefix=subjects.prefix,
        zone=Zone(zone),
        engine=EngineConfig(zones=frozenset({Zone(zone)})),
        request_timeout_s=1.0,
    )


async def test_replays_the_log_then_announces_only_its_zone(
    infra: Infra, subjects: Subjects, js: JetStreamContext
) -> None:
    await publish(js, subjects.quota, QuotaTreeApplied(root=two_leaf_tree()))
    # Written before the dequeuer starts: it must find them by replaying.
    await publish(
        js, subjects.job(Zone("a"), "nowhere", "lost"), observed("nowhere", "lost", 1, zone="a")
    )
    await publish(
        js, subjects.job(Zone("b"), "nowhere", "other"), observed("nowhere", "other", 1, zone="b")
    )
    async with running("dequeuer", main, _settings(infra, subjects, "a"), subjects):

        async def announced() -> list[object]:
            return [e for e in await log_events(js, subjects) if isinstance(e, Unmapped)]

        found = await eventually(announced)
        assert [e.workload for e in found] == ["nowhere/lost"]
        # Live: an inadmissible workload of its zone arriving now.
        await publish(
            js, subjects.job(Zone("a"), "a1", "huge"), observed("a1", "huge", 500, zone="a")
        )

        async def inadmissible() -> list[object]:
            return [e for e in await log_events(js, subjects) if isinstance(e, Inadmissible)]

        found = await eventually(inadmissible)
        assert [e.workload for e in found] == ["a1/huge"]
        assert found[0].reason.code == "ExceedsMax"


async def test_poison_entry_is_parked_and_the_loop_goes_on(
    infra: Infra, subjects: Subjects, js: JetStreamContext
) -> None:
    dlq = await js.subscribe(subjects.dlq("dequeuer"), stream=subjects.dlq_stream_name)
    await publish(js, subjects.quota, QuotaTreeApplied(root=two_leaf_tree()))
    await js.publish(subjects.job(Zone("a"), "x", "garbage"), b"\x00 not an envelope")
    async with running("dequeuer", main, _settings(infra, subjects, "a"), subjects):
        letter = decode((await dlq.next_msg(timeout=5)).data, DeadLetter)
        assert letter.service == "dequeuer" and letter.stream_seq == 2
        assert letter.data == b"\x00 not an envelope"
        await publish(
            js, subjects.job(Zone("a"), "nowhere", "next"), observed("nowhere", "next", 1, zone="a")
        )

        async def announced() -> list[object]:
            return [e for e in await log_events(js, subjects) if isinstance(e, Unmapped)]

        assert await eventually(announced)
    await dlq.unsubscribe()


def test_plan_pass_groups_victims_with_their_preemptor() -> None:
    engine = Engine()
    engine.apply(QuotaTreeApplied(root=two_leaf_tree()), Millis(0))
    engine.apply(observed("a1", "base", 60), Millis(0))
    engine.apply(observed("a1", "borrow", 40, created=1), Millis(0))
    first = plan_pass(engine.decide(Millis(1)))
    assert [a.workload for a in first.admissions] == ["a1/base", "a1/borrow"]
    assert first.reclaims == [] and first.announcements == []
    engine.apply(observed("b1", "claim", 30, created=2), Millis(2))
    second = plan_pass(engine.decide(Millis(2)))
    assert second.admissions == []
    [(preemptor, victims)] = second.reclaims
    assert preemptor.workload == "b1/claim"
    assert [v.workload for v in victims] == ["a1/borrow"]
    assert isinstance(victims[0], Preempted) and isinstance(preemptor, Admitted)
    assert PassPlan().admissions == []
    assert QueueName and QuotaPath and WorkloadKey


def test_plan_pass_sends_a_drains_preemptions_to_the_ledger_alone() -> None:
    """R15: a drain's Preempted (its own preemptor) goes with the requeues, never into a
    reclaim (no admission follows it)."""
    engine = Engine()
    engine.apply(QuotaTreeApplied(root=two_leaf_tree()), Millis(0))
    engine.apply(observed("a1", "base", 60), Millis(0))
    [admitted] = engine.decide(Millis(0))
    engine.apply(admitted, Millis(0))
    engine.apply(
        NodeHeld(node=QuotaPath("root/A"), mode="Drain", by="alice", at_ms=Millis(1)), Millis(1)
    )
    plan = plan_pass(engine.decide(Millis(1)))
    assert [d.workload for d in plan.drains] == ["a1/base"]
    assert plan.reclaims == [] and plan.admissions == [] and plan.requeues == []


async def test_a_gang_not_ready_in_time_is_requeued_through_the_ledger(
    infra: Infra, subjects: Subjects, js: JetStreamContext, migrated_url: str
) -> None:
    """R10 on the decision side: the dequeuer's deadline, the ledger's Requeued, the release
    once seen stopped, and the admission again after the backoff (1 s each)."""
    readiness = {"usher.io/ready-timeout-seconds": "1", "usher.io/requeue-backoff-seconds": "1"}
    await publish(js, subjects.quota, QuotaTreeApplied(root=two_leaf_tree(a_attributes=readiness)))
    ledger_settings = ServiceSettings(
        nats_url=infra.nats_url, database_url=migrated_url, prefix=subjects.prefix
    )
    async with (
        running("ledger", ledger_main, ledger_settings, subjects),
        running("dequeuer", main, _settings(infra, subjects, "default"), subjects),
    ):
        gang = observed("a1", "gang", 8, count=4)
        await publish(js, subjects.job(Zone("default"), "a1", "gang"), gang)

        async def decided() -> list[tuple[str, str]]:
            return [
                (type(e).__name__, getattr(e, "cause", ""))
                for e in await log_events(js, subjects)
                if isinstance(e, Admitted | Requeued | Released)
            ]

        assert await eventually(lambda: _has(decided, ("Requeued", "")), timeout_s=10)
        [requeue] = [e for e in await log_events(js, subjects) if isinstance(e, Requeued)]
        assert re.fullmatch(
            r"0/4 pods ready after 1(\.\d+)? s, attempt 1 of 5, next try after 1 s",
            requeue.reason.message,
        ), requeue.reason.message
        # The watcher suspended it and saw it stopped: the ledger releases it (R7).
        await publish(js, subjects.job(Zone("default"), "a1", "gang"), gang)
        assert await eventually(lambda: _has(decided, ("Released", "Requeued")), timeout_s=10)
        # Offered again once its backoff ended.
        assert await eventually(lambda: _count(decided, ("Admitted", ""), 2), timeout_s=10)
        assert (await decided())[:3] == [
            ("Admitted", ""),
            ("Requeued", ""),
            ("Released", "Requeued"),
        ]


Found = Callable[[], Awaitable[list[tuple[str, str]]]]
"""Reads the ledger decisions on the log as (type, cause)."""


async def _has(found: Found, item: tuple[str, str]) -> bool:
    return item in await found()


async def _count(found: Found, item: tuple[str, str], count: int) -> bool:
    return (await found()).count(item) >= count


def test_only_a_batch_of_pod_progress_skips_the_pass() -> None:
    from datetime import UTC, datetime

    from schemas import Envelope, EventId, WorkloadFinished, WorkloadKey, WorkloadProgress
    from services.dequeuer.service import may_change_decisions
    from usher.core.protocol.log import LogEntry

    def entry(event: object, seq: int) -> LogEntry:
        envelope = Envelope(
            id=EventId(f"e{seq}"), time=datetime.now(UTC), source="test", event=event
        )  # type: ignore[arg-type]
        return LogEntry(seq=seq, subject="s", envelope=envelope, time_ms=Millis(seq))

    progress = WorkloadProgress(workload=WorkloadKey("ns/a"), ready=1, total=1)
    finished = WorkloadFinished(workload=WorkloadKey("ns/a"))
    assert not may_change_decisions([entry(progress, 1), entry(progress, 2)])
    assert may_change_decisions([entry(progress, 1), entry(finished, 2)])
    assert may_change_decisions([])  # a wakeup: a ready deadline may have run out


async def test_a_failed_job_with_retries_is_retried_once_across_a_restart(
    infra: Infra, subjects: Subjects, js: JetStreamContext
) -> None:
    """R12 on the decision side: the dequeuer of the zone publishes one Retried, from itself on
    its zone's subject; the log keeps one however often it is decided: a restarted dequeuer
    replays it (and its id would drop a copy), and the same decision published again under
    its id is dropped by the server."""
    retries = {"usher.io/retry-limit": "1"}
    await publish(js, subjects.quota, QuotaTreeApplied(root=two_leaf_tree(a_attributes=retries)))
    train = observed("a1", "train", 8)
    await publish(js, subjects.job(Zone("default"), "a1", "train"), train)
    admitted = Admitted(
        workload=train.workload,
        queue=QueueName("root-a-a1"),
        quota=QuotaPath("root/A"),
        zone=Zone("default"),
        requests={"cpu": 8000},
    )
    await publish(js, subjects.decision_for(admitted, Zone("default")), admitted)
    failed = WorkloadFinished(workload=train.workload, succeeded=False)
    await publish(js, subjects.job(Zone("default"), "a1", "train"), failed)
    settings = _settings(infra, subjects, "default")

    async def retried() -> list[tuple[int, Retried, str, str]]:
        out = []
        for seq, subject, envelope in await read_log(js, subjects):
            if isinstance(envelope.event, Retried):
                out.append((seq, envelope.event, subject, envelope.source))
        return out

    async with running("dequeuer", main, settings, subjects):
        assert await eventually(retried)
    [(_, decision, subject, source)] = await retried()
    assert (decision.job, decision.attempt, decision.cause) == ("a1/train-retry-1", 1, "Failed")
    assert subject == subjects.decision(Zone("default"), "retried", "a1", "train")
    assert source == "usher/dequeuer/default"
    async with running("dequeuer", main, settings, subjects):
        await asyncio.sleep(1.0)  # replayed and passed: nothing new to decide
    envelope = Envelope(
        id=EventId("dequeuer:default:retried:a1/train"),
        time=datetime.now(UTC),
        source=source,
        event=decision,
    )
    await publish_envelope(js, subject, envelope)
    assert len(await retried()) == 1


async def test_each_pass_that_proposes_is_recorded_before_its_decisions_and_re_runs(
    infra: Infra, subjects: Subjects, js: JetStreamContext, migrated_url: str
) -> None:
    """D4: a ``PassRan`` of its zone, from its dequeuer, precedes the ledger's ``Admitted`` of
    the pass; the audit re-runs it and finds exactly those; an idle pass is not recorded."""
    await publish(js, subjects.quota, QuotaTreeApplied(root=two_leaf_tree()))
    ledger_settings = ServiceSettings(
        nats_url=infra.nats_url, database_url=migrated_url, prefix=subjects.prefix
    )
    async with (
        running("ledger", ledger_main, ledger_settings, subjects),
        running("dequeuer", main, _settings(infra, subjects, "default"), subjects),
    ):
        for name in ("one", "two"):
            await publish(js, subjects.job(Zone("default"), "a1", name), observed("a1", name, 30))

        async def admitted() -> list[LogEvent]:
            return [e for e in await log_events(js, subjects) if isinstance(e, Admitted)]

        assert await eventually(lambda: _enough(admitted, 2), timeout_s=10)
        # Too big for what is left: a pass runs and proposes nothing, so nothing is recorded.
        await publish(js, subjects.job(Zone("default"), "a1", "big"), observed("a1", "big", 60))
        await asyncio.sleep(0.5)
    entries = await read_log(js, subjects)
    records = [(seq, s, env) for seq, s, env in entries if isinstance(env.event, PassRan)]
    assert records
    for seq, subject, envelope in records:
        assert subject == subjects.pass_ran(Zone("default"))
        assert envelope.source == "usher/dequeuer/default"
        assert envelope.event.seq < seq
    first_admitted = min(seq for seq, _, env in entries if isinstance(env.event, Admitted))
    assert records[0][0] < first_admitted
    last_observed = max(seq for seq, _, e in entries if isinstance(e.event, WorkloadObserved))
    assert all(seq < last_observed for seq, _, _ in records)  # the idle pass: no record
    items = [log_entry(seq, subject, envelope) for seq, subject, envelope in entries]
    found, stats = audit_passes(items, EngineConfig())
    assert found == []
    assert stats.passes == len(records) and stats.matched == 2


async def _enough(found: Callable[[], Awaitable[list[LogEvent]]], count: int) -> bool:
    return len(await found()) >= count
