"""Nothing on the log stops the services: hostile entries put straight on the log.

Against a real NATS and PostgreSQL, with the real ledger, dequeuer and preemptor running:
entries no watcher would write (trees whose attributes are 100,000-digit numbers, 100 KB or
not numbers at all; jobs with 100 KB names or zones, control characters, absurd and negative
quantities and counts) and a forged admission are put on the log directly. Every service
stays up, parks what it cannot fold (``UnfoldableEntry``) or must not believe
(``ForgedDecision``) on the DLQ, and a plain job is admitted right after them. The hostile
values are a local list (tests/core/test_fold.py) until the shared corpus replaces it.
"""

from __future__ import annotations

from dataclasses import replace

from nats.js import JetStreamContext

from schemas import (
    Admitted,
    DeadLetter,
    QueueName,
    QuotaPath,
    QuotaTreeApplied,
    WorkloadKey,
    Zone,
    decode,
)
from services.common.settings import ServiceSettings
from services.dequeuer.service import main as dequeuer_main
from services.ledger.service import main as ledger_main
from services.preemptor.service import main as preemptor_main
from tests.builders.events import CORE, observed
from tests.builders.hostile import hostile_jobs, hostile_trees
from tests.builders.trees import two_leaf_tree
from tests.conftest import Infra
from tests.services.helpers import eventually, log_events, publish, running
from usher.adapters.nats.subjects import Subjects
from usher.core.model.config import EngineConfig

ZONE = Zone("default")


async def dead_letters(js: JetStreamContext, subjects: Subjects) -> list[DeadLetter]:
    info = await js.stream_info(subjects.dlq_stream_name)
    out = []
    for seq in range(max(1, int(info.state.first_seq)), int(info.state.last_seq) + 1):
        msg = await js.get_msg(subjects.dlq_stream_name, seq)
        out.append(decode(msg.data or b"", DeadLetter))
    return out


async def test_hostile_entries_on_the_log_stop_no_service_and_a_plain_job_is_admitted(
    infra: Infra, subjects: Subjects, js: JetStreamContext, migrated_url: str
) -> None:
    await publish(js, subjects.quota, QuotaTreeApplied(root=two_leaf_tree()))
    for tree in hostile_trees(values_per_setting=2):
        await publish(js, subjects.quota, QuotaTreeApplied(root=tree))
    for job in hostile_jobs():
        await publish(js, subjects.job(job.zone, job.namespace, job.name), job)
    # A forged admission of a job that would fill the tree (on a cluster subject): believed,
    # nothing else would fit. The job itself waits behind the plain one (created later).
    await publish(js, subjects.job(ZONE, "a1", "hog"), observed("a1", "hog", 100, created=10**9))
    hog = Admitted(
        workload=WorkloadKey("a1/hog"), queue=QueueName("q"), quota=QuotaPath("root/A"),
        zone=ZONE, requests={"cpu": 100 * CORE},
    )  # fmt: skip
    await publish(js, subjects.job(ZONE, "a1", "hog"), hog)
    await publish(js, subjects.quota, QuotaTreeApplied(root=two_leaf_tree()))

    base = ServiceSettings(nats_url=infra.nats_url, prefix=subjects.prefix, request_timeout_s=1.0)
    dequeuer = replace(base, zone=ZONE, engine=EngineConfig(zones=frozenset({ZONE})))
    ledger = replace(base, database_url=migrated_url)
    async with (
        running("ledger", ledger_main, ledger, subjects),
        running("preemptor", preemptor_main, base, subjects),
        running("dequeuer", dequeuer_main, dequeuer, subjects),
    ):
        await publish(js, subjects.job(ZONE, "a1", "plain"), observed("a1", "plain", 10))

        async def admitted() -> list[WorkloadKey]:
            events = await log_events(js, subjects)
            return [e.workload for e in events if isinstance(e, Admitted)]

        found = await eventually(lambda: _with(admitted, WorkloadKey("a1/plain")), timeout_s=20)
        assert WorkloadKey("a1/plain") in found
        letters = await dead_letters(js, subjects)
    parked = {(letter.service, letter.error) for letter in letters}
    assert ("dequeuer", "ForgedDecision") in parked and ("preemptor", "ForgedDecision") in parked
    assert ("dequeuer", "UnfoldableEntry") in parked


async def _with(read: object, item: WorkloadKey) -> list[WorkloadKey]:
    found: list[WorkloadKey] = await read()  # type: ignore[operator]
    return found if item in found else []
