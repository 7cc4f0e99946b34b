"""Contract tests of a reservation batch's cost and safety against a real PostgreSQL.

A batch of reservations is three statements between BEGIN and COMMIT whatever its size (lock,
read, write: ``ledger_store._LOCK_BATCH``), counted by SQLAlchemy's own cursor events on the
real connection; batches racing on separate connections never over-commit a node at any
committed instant (the intervals sweep); a reservation proposed on a view older than an end
being recorded waits for the end and is refused (R8), however its statements are split.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.zones import Counted, count_on
from schemas import QuotaNode, Reservation
from schemas.ids import WorkloadKey
from tests.adapters.test_ledger_store import LEAVES, LIMITS, builder, sweep_peaks
from tests.builders.events import CORE
from tests.builders.events import reservation as res
from tests.builders.trees import users_tree
from usher.adapters.pg.ledger_store import LedgerStore, Observation


@pytest.fixture
def ledger_tree() -> QuotaNode:
    return users_tree()


BATCH_STATEMENTS = 3
"""What ``LedgerStore.reserve`` documents: lock, read, write (plus BEGIN and COMMIT)."""


@pytest.fixture
def counter(engine: AsyncEngine) -> Iterator[Counted]:
    seen = count_on(engine)
    try:
        yield seen
    finally:
        seen.stop()


def batch(prefix: str, size: int, cores: int) -> list[Reservation]:
    return [res(f"{prefix}{i}", LEAVES[i % len(LEAVES)], cores) for i in range(size)]


@pytest.mark.parametrize("size", [1, 40])
async def test_a_batch_is_three_statements_whatever_its_size(
    store: LedgerStore, engine: AsyncEngine, counter: Counted, size: int
) -> None:
    """Grants, refusals, a retried workload, outbox rows, request ids and views: one batch,
    three statements (it was fourteen: a read per table, a write per table, a stamp)."""
    [first] = await store.reserve([res("held", LEAVES[0], 1)])
    assert first.granted
    items = [res("held", LEAVES[0], 1), *batch("w", size, 3)]
    counter.reset()
    results = await store.reserve(
        items,
        outbox=builder,
        request_ids=[f"r{i}" for i in range(len(items))],
        views=[5] * len(items),
    )
    assert (counter.begins, counter.commits) == (1, 1)
    assert counter.statements == BATCH_STATEMENTS, counter.sent
    assert results[0].granted  # the retried workload: its grant stands
    granted = sum(r.granted for r in results[1:])
    assert granted >= 1
    if size == 40:  # the tree holds 33 of them: the rest are refused in the same statements
        assert granted < size
    live = await store.live_allocations()
    assert len(live) == 1 + granted
    async with engine.connect() as conn:
        written = await conn.scalar(text("SELECT count(*) FROM outbox"))
    assert written == granted


async def test_racing_batches_never_over_commit(store: LedgerStore, engine: AsyncEngine) -> None:
    """Ten writers reserve batches of 20 on separate connections while a log consumer
    releases: no node runs above its max at any committed instant, and usage is the sum of
    the live allocations at the end."""
    rng = random.Random(35)
    granted: list[WorkloadKey] = []
    refused = 0

    async def writer(index: int) -> None:
        nonlocal refused
        local = random.Random(rng.randrange(1 << 30))
        for round_ in range(8):
            items = [
                res(f"z{index}-{round_}-{i}", local.choice(LEAVES), local.randint(1, 9))
                for i in range(20)
            ]
            results = await store.reserve(items, views=[None] * len(items))
            granted.extend(r.workload for r in results if r.granted)
            refused += sum(not r.granted for r in results)

    async def releaser(stop: asyncio.Event) -> None:
        seq = 0
        while not stop.is_set() or granted:
            done = [granted.pop(rng.randrange(len(granted))) for _ in range(min(5, len(granted)))]
            seq += 1
            changes = [Observation(seq=seq, workload=w, change="Finished") for w in done]
            await store.apply_log("ledger", seq, changes)
            await asyncio.sleep(0)

    stop = asyncio.Event()
    release = asyncio.create_task(releaser(stop))
    await asyncio.gather(*(writer(i) for i in range(10)))
    stop.set()
    await release

    assert refused > 0
    peaks = await sweep_peaks(engine)
    assert all(peaks[node] <= LIMITS[node] * CORE for node in LIMITS), peaks
    assert peaks["root"] > 50 * CORE  # the race filled the tree, the check compared something
    assert await store.live_allocations() == []
    assert all(row.get("cpu", 0) == 0 for row in (await store.usage()).values())


async def test_a_reservation_waits_for_an_end_being_recorded(
    store: LedgerStore, engine: AsyncEngine
) -> None:
    """R8: while the log consumer records that a workload ended (the end lock held
    exclusively), a reservation of it on an older view waits, then sees the end: refused."""
    async with engine.connect() as recorder:
        await recorder.execute(
            text("SELECT pg_advisory_xact_lock(hashtext('usher.ended_workloads'))")
        )
        await recorder.execute(
            text(
                "INSERT INTO ended_workloads (workload, seq, cause)"
                " VALUES ('ns/gone', 10, 'Deleted')"
            )
        )
        waiting = asyncio.create_task(store.reserve([res("gone", LEAVES[0], 1)], views=[9]))
        for _ in range(300):
            async with engine.connect() as probe:
                blocked = await probe.scalar(
                    text(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    )
                )
            if blocked:
                break
            await asyncio.sleep(0.01)
        assert blocked, "the reservation never waited for the end lock"
        await recorder.commit()
    [result] = await waiting
    assert not result.granted and result.reason is not None
    assert result.reason.code == "StaleView"
    assert await store.live_allocations() == []


async def test_the_relay_reads_and_stamps_in_one_statement_each(
    store: LedgerStore, counter: Counted
) -> None:
    """The relay's read and its stamp-and-read-next are single statements with no
    transaction around them; the stamp's read skips the rows it stamps, in id order."""
    await store.reserve(batch("o", 6, 1), outbox=builder)
    counter.reset()
    first = await store.pending_outbox(4)
    rest = await store.mark_published([m.id for m in first if m.id is not None], then=10)
    assert (counter.statements, counter.begins, counter.commits) == (2, 0, 0), counter.sent
    assert [m.event_id.rsplit(":", 1)[0] for m in first + rest] == [
        f"admitted:ns/o{i}" for i in range(6)
    ]
    assert await store.mark_published([m.id for m in rest if m.id is not None], then=10) == []
    assert await store.pending_outbox(10) == []
