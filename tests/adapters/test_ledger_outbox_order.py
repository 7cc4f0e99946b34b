"""The outbox's ids follow commit order, one transaction's rows consecutive, against a real server.

The relay publishes committed outbox rows in id order, and the log reads the ``Preempted`` of one
reclaim as one decision only while they follow each other. Two ledger transactions that share
no row lock (a requeue and a preemption of other workloads, a victim released inside its group
and a preemption) used to draw their ids from the sequence in whatever order they reached it:
one committing later could hold lower ids than one that committed first, and the rows of one
could fall between the rows of the other (the log then showed a reclaim cut in two, its first
part refused by the invariant checker: "it would not fit without these victims").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from schemas import QuotaNode, ReservationResult
from tests.adapters.test_ledger_store import LEAVES, builder, requeue, victim
from tests.builders.events import CORE
from tests.builders.events import reservation as res
from tests.builders.trees import users_tree
from usher.adapters.pg.ledger_store import LedgerStore, OutboxMessage


@pytest.fixture
def ledger_tree() -> QuotaNode:
    return users_tree()


async def _waiters(engine: AsyncEngine, locktype: str) -> int:
    async with engine.connect() as probe:
        found = await probe.scalar(
            text("SELECT count(*) FROM pg_locks WHERE locktype = :t AND NOT granted"),
            {"t": locktype},
        )
    return int(found or 0)


async def _until(check: Callable[[], Awaitable[bool]]) -> bool:
    for _ in range(300):
        if await check():
            return True
        await asyncio.sleep(0.01)
    return False


def _kinds(rows: list[OutboxMessage]) -> list[str]:
    return [m.event_id.split(":")[0] + ":" + m.event_id.split(":")[1] for m in rows]


async def _reclaim(store: LedgerStore) -> list[ReservationResult]:
    """p (30, within user-b's guarantee) needs two of user-c's borrowed 15s (root: 90 used)."""
    victims = [victim("c1", LEAVES[2]), victim("c2", LEAVES[2])]
    return [await store.preempt(res("p", LEAVES[1], 30), victims, outbox=builder)]


async def _grant(store: LedgerStore) -> list[ReservationResult]:
    return await store.reserve([res("n", LEAVES[2], 5)], outbox=builder)


Second = Callable[[LedgerStore], Awaitable[list[ReservationResult]]]
SECOND: list[tuple[str, Second, list[str]]] = [
    ("reclaim", _reclaim, ["preempted:ns/c1", "preempted:ns/c2"]),
    ("grant", _grant, ["admitted:ns/n"]),
]


@pytest.mark.parametrize(("case", "second", "rows"), SECOND, ids=[c[0] for c in SECOND])
async def test_a_transaction_committed_first_is_published_first(
    store: LedgerStore,
    engine: AsyncEngine,
    case: str,
    second: Second,
    rows: list[str],
) -> None:
    """A requeue (R10) of ``a1`` has drawn its outbox id and not committed yet when another
    dequeuer's reclaim of ``c1`` and ``c2``, or grant of ``n`` (no row in common), comes: its
    rows must not commit ahead of the requeue with ids after it (the relay, reading both
    committed, would publish the requeue first). It waits for the requeue's commit instead.

    A test connection holds an uncommitted outbox row under the requeue's event id, so the
    requeue's insert waits right after drawing its id: the time between a transaction's outbox
    insert and its commit, made long."""
    granted = await store.reserve(
        [res("a1", LEAVES[0], 30)] + [res(f"c{i}", LEAVES[2], 15) for i in range(1, 5)]
    )
    assert all(r.granted for r in granted)
    a1 = next(a for a in await store.live_allocations() if a.workload == "ns/a1")
    async with engine.connect() as blocker:
        await blocker.execute(
            text("INSERT INTO outbox (event_id, subject, payload) VALUES (:e, 'x', '')"),
            {"e": f"requeued:ns/a1:{a1.id}"},
        )
        requeued = asyncio.create_task(
            store.requeue([requeue("a1", LEAVES[0], 30)], outbox=builder)
        )
        assert await _until(lambda: _waiters(engine, "transactionid")), "requeue never waited"
        other = asyncio.ensure_future(second(store))

        async def other_done_or_waiting() -> bool:
            return other.done() or await _waiters(engine, "advisory") > 0

        assert await _until(other_done_or_waiting)
        other_first = other.done()
        await blocker.rollback()
    [result] = await requeued
    assert result.granted
    assert all(r.granted for r in await other)
    published = _kinds(await store.pending_outbox(10))
    committed = [*rows, "requeued:ns/a1"] if other_first else ["requeued:ns/a1", *rows]
    assert published == committed


async def test_racing_transactions_keep_their_outbox_rows_together(store: LedgerStore) -> None:
    """Eight requeues of 40 workloads each (one transaction each, no row lock in common) race,
    three times: each transaction's rows take consecutive ids, in the order of its decisions
    (before the outbox lock, about one race in three interleaved some ids)."""
    wide = QuotaNode(name="root", max={"cpu": 1000 * CORE}, children=[QuotaNode(name="x")])
    await store.apply_tree(wide, version=2)
    for round_ in range(3):
        names = [f"r{round_}w{t}x{i}" for t in range(8) for i in range(40)]
        for start in range(0, len(names), 80):
            batch = [res(name, "root/x", 1) for name in names[start : start + 80]]
            assert all(r.granted for r in await store.reserve(batch))
        results = await asyncio.gather(
            *(
                store.requeue(
                    [requeue(f"r{round_}w{t}x{i}", "root/x", 1) for i in range(40)],
                    outbox=builder,
                )
                for t in range(8)
            )
        )
        assert all(r.granted for batch in results for r in batch)
    rows = await store.pending_outbox(2000)
    assert len(rows) == 3 * 8 * 40
    owners = [m.event_id.split(":")[1].split("x")[0] for m in rows]
    runs = [owner for n, owner in enumerate(owners) if n == 0 or owners[n - 1] != owner]
    assert len(runs) == len(set(runs)) == 3 * 8, runs  # one run of ids per transaction
    for owner in runs:
        mine = [
            m.event_id.split(":")[1]
            for m in rows
            if m.event_id.split(":")[1].split("x")[0] == owner
        ]
        assert mine == [f"{owner}x{i}" for i in range(40)]
