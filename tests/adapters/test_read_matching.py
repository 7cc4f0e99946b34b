"""``read_matching`` (the server-filtered read behind ``usher explain``) against a real NATS:
every entry on the asked subjects up to the log's end, however the client's tasks interleave
with the server's replies. A check that "nothing matches" which ran before the subscription's
callback had seen what the server had already sent answered "no entries" for a job with
several (CI, 2026-11-28: ``UnknownWorkload`` for a job on the log)."""

from __future__ import annotations

import asyncio

from nats.js import JetStreamContext

from tests.builders.events import observed
from tests.services.helpers import publish
from usher.adapters.nats.export import read_matching
from usher.adapters.nats.subjects import Subjects

ZONE = "default"


async def _noise_and_jobs(js: JetStreamContext, subjects: Subjects, jobs: int) -> None:
    """``jobs`` jobs, each observed three times, among as many entries of other jobs."""
    for n in range(jobs):
        for name in (f"j{n}", f"other{n}"):
            for created in range(3):
                job = observed("a1", name, 1, created=created)
                await publish(js, subjects.job(ZONE, "a1", name), job)


async def test_every_entry_about_a_job_is_read_however_the_reads_interleave(
    js: JetStreamContext, subjects: Subjects
) -> None:
    await _noise_and_jobs(js, subjects, 20)
    # Forty reads at once on one connection: the server's deliveries and its consumer-info
    # replies arrive in one socket read, so the reader resumes before any callback has run.
    for _round in range(5):
        reads = [
            read_matching(js, subjects, subjects.about_workload("a1", f"j{n}"))
            for n in range(20)
            for _twice in range(2)
        ]
        results = await asyncio.gather(*reads)
        for index, entries in enumerate(results):
            name = f"j{index // 2}"
            mine = [e for e in entries if e.subject == subjects.job(ZONE, "a1", name)]
            assert len(mine) == 3, (name, [e.subject for e in entries])


async def test_a_job_nobody_wrote_about_reads_nothing_and_returns(
    js: JetStreamContext, subjects: Subjects
) -> None:
    await _noise_and_jobs(js, subjects, 2)
    none = await asyncio.wait_for(
        read_matching(js, subjects, subjects.about_workload("a1", "nobody")), 10
    )
    assert none == []
    single = await asyncio.wait_for(
        read_matching(js, subjects, [subjects.job(ZONE, "a1", "nobody")]), 10
    )
    assert single == []
