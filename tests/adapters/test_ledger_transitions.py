"""Contract tests against a real PostgreSQL: every allocation state the ledger writes goes
through ``_write_states``, which refuses a move the core's transition table does not allow
(``usher.core.rules.arbitration.TRANSITIONS``) and a row that is no longer in the state its move
was checked from, with ``LedgerTransitionError`` naming the workload, from and to; nothing of
the batch is written. The ledger's reclaim refusals and reasons are the core's own values.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from schemas import Preempted, QuotaNode, QuotaPath, Reason
from schemas.ids import QueueName, WorkloadKey
from tests.builders.events import reservation as res
from tests.builders.trees import users_tree as tree
from usher.adapters.pg.ledger_store import (
    _ALLOC_COLUMNS,
    ALLOCATIONS,
    LedgerStore,
    LedgerTransitionError,
    _Alloc,
    _alloc,
    _created,
    _moved,
    _stamp,
    _write_states,
)
from usher.core.model import reasons
from usher.core.rules.arbitration import AllocationState as S

LEAF_A, LEAF_B, LEAF_C = (
    "root/Department-a/user-a",
    "root/Department-a/user-b",
    "root/Department-b/user-c",
)


@pytest.fixture
def ledger_tree() -> QuotaNode:
    return tree()


def victim(name: str, leaf: str) -> Preempted:
    return Preempted(
        workload=WorkloadKey(f"ns/{name}"),
        queue=QueueName("q"),
        quota=QuotaPath(leaf),
        preemptor=WorkloadKey("ns/p"),
        reason=Reason(code="Reclaim", message="the owner reclaims its guarantee"),
    )


async def every_state(store: LedgerStore) -> None:
    """ns/a1 admitted, ns/done released, ns/c1 preempting for ns/p, which is held."""
    granted = await store.reserve(
        [
            res("c1", LEAF_C, 30),
            res("c2", LEAF_C, 30),
            res("a1", LEAF_A, 30),
            res("done", LEAF_A, 5),
        ]
    )
    assert all(r.granted for r in granted)
    assert await store.release(WorkloadKey("ns/done"), "Finished") is not None
    assert (await store.preempt(res("p", LEAF_B, 20), [victim("c1", LEAF_C)])).granted


async def rows(engine: AsyncEngine) -> list[tuple[object, ...]]:
    """Every allocation column that a state write could change, by row."""
    async with engine.connect() as conn:
        found = await conn.execute(
            text(
                "SELECT workload, state, admitted_at, released_at, release_cause, preemptor, "
                "preempted_at, preempted_seq FROM allocations ORDER BY id"
            )
        )
        return [tuple(r) for r in found]


async def newest(conn: AsyncConnection, workload: str) -> _Alloc:
    """The newest allocation row of ``workload``, as the ledger reads it."""
    found = await conn.execute(
        ALLOCATIONS.select()
        .with_only_columns(*_ALLOC_COLUMNS)
        .where(ALLOCATIONS.c.workload == workload)
        .order_by(ALLOCATIONS.c.id.desc())
        .limit(1)
    )
    return _alloc(found.one())


@pytest.mark.parametrize(
    ("workload", "source", "target"),
    [
        ("ns/done", S.RELEASED, S.ADMITTED),  # released is final
        ("ns/done", S.RELEASED, S.RELEASED),
        ("ns/c1", S.PREEMPTING, S.ADMITTED),  # a victim is never admitted again in place
        ("ns/p", S.HELD, S.PREEMPTING),  # a hold is no victim
        ("ns/a1", S.ADMITTED, S.HELD),
        ("ns/a1", S.ADMITTED, S.ADMITTED),
    ],
)
async def test_an_illegal_transition_is_refused_and_nothing_is_written(
    store: LedgerStore, engine: AsyncEngine, workload: str, source: S, target: S
) -> None:
    await every_state(store)
    before = await rows(engine)
    with pytest.raises(LedgerTransitionError) as raised:
        async with engine.begin() as conn:
            row = await newest(conn, workload)
            assert row.state == source
            # A legal move first in the same batch: the refusal writes nothing of it either.
            legal = await newest(conn, "ns/c2")
            moves = [_moved(legal, S.RELEASED, cause="Finished"), _moved(row, target)]
            await _write_states(conn, moves, await _stamp(conn))
    assert (raised.value.workload, raised.value.source, raised.value.target) == (
        workload,
        source,
        target,
    )
    assert f"{workload}: {source} -> {target} refused" in str(raised.value)
    assert await rows(engine) == before


async def test_a_new_row_starts_admitted_or_held_only(
    store: LedgerStore, engine: AsyncEngine
) -> None:
    before = await rows(engine)
    for target in (S.PREEMPTING, S.RELEASED, S.RESERVED):
        with pytest.raises(LedgerTransitionError) as raised:
            async with engine.begin() as conn:
                await _write_states(
                    conn, [_created(res("new", LEAF_A, 1), target)], await _stamp(conn)
                )
        assert (raised.value.source, raised.value.target) == (None, target)
    assert await rows(engine) == before


async def test_a_row_no_longer_in_its_checked_state_is_refused(
    store: LedgerStore, engine: AsyncEngine
) -> None:
    """The move admitted -> released is legal, but the row in PostgreSQL is released already:
    the write is guarded by the state it was checked from and names the one the ledger holds."""
    await every_state(store)
    before = await rows(engine)
    with pytest.raises(LedgerTransitionError) as raised:
        async with engine.begin() as conn:
            row = await newest(conn, "ns/done")
            row.state = S.ADMITTED  # what a stale read would have said
            await _write_states(
                conn, [_moved(row, S.RELEASED, cause="Finished")], await _stamp(conn)
            )
    assert (raised.value.source, raised.value.target) == (S.RELEASED, S.RELEASED)
    assert "the ledger holds it released, not admitted" in str(raised.value)
    assert await rows(engine) == before


async def test_a_row_moves_twice_in_one_batch(store: LedgerStore, engine: AsyncEngine) -> None:
    """held -> admitted -> released in one batch (its last victim stopped, then it ended)."""
    await every_state(store)
    async with engine.begin() as conn:
        row = await newest(conn, "ns/p")
        stamp: datetime = await _stamp(conn)
        moves = [_moved(row, S.ADMITTED), _moved(row, S.RELEASED, cause="Deleted")]
        await _write_states(conn, moves, stamp)
        written = await newest(conn, "ns/p")
        assert written.state == S.RELEASED and written.admitted_at == stamp
        cause = await conn.scalar(
            text("SELECT release_cause FROM allocations WHERE id = :id"), {"id": row.id}
        )
        assert cause == "Deleted"


async def test_the_ledgers_reclaim_refusal_is_the_cores(store: LedgerStore) -> None:
    """user-b's guarantee is 50: a preemptor asking 55 may not take what another leaf borrows;
    the ledger answers with the core's own reason, word for word."""
    await store.apply_tree(tree(dept_a_max=100), version=2)
    granted = await store.reserve(
        [res("c1", LEAF_C, 30), res("c2", LEAF_C, 30), res("a1", LEAF_A, 40)]
    )
    assert all(r.granted for r in granted)
    result = await store.preempt(res("p", LEAF_B, 55), [victim("c1", LEAF_C)])
    assert not result.granted
    assert result.reason == reasons.beyond_guarantee(
        WorkloadKey("ns/p"), QuotaPath(LEAF_B), WorkloadKey("ns/c1")
    )
