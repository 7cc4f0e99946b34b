"""Contract tests of the ledger's PostgreSQL store against a real server."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from fractions import Fraction

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from schemas import QuotaNode, QuotaPath, Reservation
from schemas.ids import QueueName, WorkloadKey, Zone
from usher.adapters.pg.ledger_store import (
    LedgerPermanentError,
    LedgerStore,
    LedgerTransientError,
    OutboxMessage,
)

CORE = 1000  # millicores

LEAVES = ("root/Department-a/user-a", "root/Department-a/user-b", "root/Department-b/user-c")


def tree(dept_a_max: int = 60) -> QuotaNode:
    return QuotaNode(
        name="root",
        min={"cpu": 100 * CORE},
        max={"cpu": 100 * CORE},
        children=[
            QuotaNode(
                name="Department-a",
                min={"cpu": 40 * CORE},
                max={"cpu": dept_a_max * CORE},
                children=[
                    QuotaNode(name="user-a", max={"cpu": 100 * CORE}),
                    QuotaNode(name="user-b", max={"cpu": 100 * CORE}),
                ],
            ),
            QuotaNode(
                name="Department-b",
                min={"cpu": 60 * CORE},
                max={"cpu": 100 * CORE},
                children=[QuotaNode(name="user-c", max={"cpu": 100 * CORE})],
            ),
        ],
    )


def res(name: str, leaf: str, cpu: int, **extra: int) -> Reservation:
    return Reservation(
        workload=WorkloadKey(f"ns/{name}"),
        queue=QueueName("q"),
        quota=QuotaPath(leaf),
        zone=Zone("default"),
        requests={"cpu": cpu * CORE, **extra},
    )


@pytest.fixture
async def engine(migrated_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(migrated_url, pool_size=10, max_overflow=0)
    try:
        yield eng
    finally:
        await eng.dispose()


@pytest.fixture
async def store(engine: AsyncEngine) -> LedgerStore:
    s = LedgerStore(engine)
    await s.apply_tree(tree(), version=1)
    return s


def cpu(usage: dict[QuotaPath, dict[str, int]]) -> dict[str, int]:
    return {path: row["cpu"] // CORE for path, row in usage.items() if "cpu" in row}


ZERO = {
    "root": 0,
    "root/Department-a": 0,
    "root/Department-b": 0,
    "root/Department-a/user-a": 0,
    "root/Department-a/user-b": 0,
    "root/Department-b/user-c": 0,
}


async def test_apply_tree_then_usage_is_zero(store: LedgerStore, engine: AsyncEngine) -> None:
    assert await store.usage() == {p: {"cpu": 0} for p in ZERO}
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text("SELECT path, min, max FROM quota_usage WHERE resource = 'cpu' ORDER BY path")
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        ("root", 100 * CORE, 100 * CORE),
        ("root/Department-a", 40 * CORE, 60 * CORE),
        ("root/Department-a/user-a", 0, 100 * CORE),
        ("root/Department-a/user-b", 0, 100 * CORE),
        ("root/Department-b", 60 * CORE, 100 * CORE),
        ("root/Department-b/user-c", 0, 100 * CORE),
    ]
    await store.apply_tree(tree(), version=1)  # idempotent
    assert await store.usage() == {p: {"cpu": 0} for p in ZERO}


async def test_grant_increments_every_node_on_the_path(store: LedgerStore) -> None:
    [result] = await store.reserve([res("w1", LEAVES[0], 10, memory=1 << 30)])
    assert result.granted and result.reason is None
    usage = await store.usage()
    assert cpu(usage) == ZERO | {"root": 10, "root/Department-a": 10, LEAVES[0]: 10}
    # memory is limited nowhere, yet tracked on every node of the path
    assert {p: r["memory"] for p, r in usage.items() if "memory" in r} == {
        "root": 1 << 30,
        "root/Department-a": 1 << 30,
        LEAVES[0]: 1 << 30,
    }
    [live] = await store.live_allocations()
    assert (live.workload, live.quota, live.state) == ("ns/w1", LEAVES[0], "admitted")
    assert live.requests == {"cpu": 10 * CORE, "memory": 1 << 30}
    assert live.admitted_at is not None


async def test_refusal_names_node_and_numbers_and_changes_nothing(store: LedgerStore) -> None:
    assert (await store.reserve([res("w1", LEAVES[0], 50)]))[0].granted
    before = await store.usage()
    [result] = await store.reserve([res("w2", LEAVES[1], 20)])
    assert not result.granted
    reason = result.reason
    assert reason is not None
    assert (reason.code, reason.node, reason.resource) == (
        "QuotaExceeded",
        "root/Department-a",
        "cpu",
    )
    assert (reason.used, reason.requested, reason.limit) == (50 * CORE, 20 * CORE, 60 * CORE)
    assert reason.message == "root/Department-a cpu 50 used + 20 requested > max 60 x 1.0"
    assert await store.usage() == before
    assert [a.workload for a in await store.live_allocations()] == ["ns/w1"]


async def test_unknown_leaf_is_refused(store: LedgerStore) -> None:
    results = await store.reserve([res("w1", "root/nope", 1), res("w2", "root/Department-a", 1)])
    assert [(r.granted, r.reason and r.reason.code) for r in results] == [
        (False, "UnknownQuota"),
        (False, "UnknownQuota"),  # an inner node is not a leaf
    ]
    assert cpu(await store.usage()) == ZERO


async def test_oversell_two_allows_up_to_twice_max(engine: AsyncEngine) -> None:
    store = LedgerStore(engine, oversell_rate=Fraction(2))
    await store.apply_tree(tree(), version=1)
    results = await store.reserve(
        [res("a", LEAVES[0], 100), res("b", LEAVES[1], 20), res("c", LEAVES[1], 1)]
    )
    assert [r.granted for r in results] == [True, True, False]
    reason = results[2].reason
    assert reason is not None
    assert (reason.node, reason.used, reason.limit) == ("root/Department-a", 120 * CORE, 120 * CORE)
    assert reason.message == "root/Department-a cpu 120 used + 1 requested > max 60 x 2.0"
    assert cpu(await store.usage())["root"] == 120


async def test_batch_order_matters(store: LedgerStore) -> None:
    first = await store.reserve([res("x", LEAVES[2], 70), res("y", LEAVES[2], 40)])
    assert [r.granted for r in first] == [True, False]
    released = await store.release(WorkloadKey("ns/x"), "Finished")
    assert released == {"cpu": 70 * CORE}
    second = await store.reserve([res("y", LEAVES[2], 40), res("x", LEAVES[2], 70)])
    assert [r.granted for r in second] == [True, False]
    assert cpu(await store.usage())["root/Department-b"] == 40


async def test_redelivery_by_workload(store: LedgerStore) -> None:
    assert (await store.reserve([res("w", LEAVES[0], 10)]))[0].granted
    again = await store.reserve([res("w", LEAVES[0], 10)])
    assert again[0].granted
    elsewhere = await store.reserve([res("w", LEAVES[2], 10)])
    assert not elsewhere[0].granted
    assert elsewhere[0].reason is not None and elsewhere[0].reason.node == LEAVES[0]
    assert cpu(await store.usage())["root"] == 10
    assert len(await store.live_allocations()) == 1


async def test_redelivery_by_consumer_offset(store: LedgerStore) -> None:
    msg = OutboxMessage(event_id="e1", subject="usher.decision.x", payload=b"{}")
    batch = [res("a", LEAVES[0], 50), res("b", LEAVES[0], 50)]
    first = await store.reserve(batch, consumer="ledger", stream_seq=7, outbox=[msg])
    assert [r.granted for r in first] == [True, False]
    assert await store.offset("ledger") == 7
    # Free room, then redeliver seq 7 and an older seq: nothing is applied again.
    assert await store.release(WorkloadKey("ns/a"), "Finished") is not None
    msg2 = OutboxMessage(event_id="e2", subject="s", payload=b"x")
    for seq in (7, 5):
        again = await store.reserve(batch, consumer="ledger", stream_seq=seq, outbox=[msg2])
        assert [r.granted for r in again] == [False, False]
    assert cpu(await store.usage())["root"] == 0
    assert await store.offset("ledger") == 7
    assert [(m.event_id, m.payload) for m in await store.pending_outbox(10)] == [("e1", b"{}")]
    # The next sequence is applied.
    later = await store.reserve(batch, consumer="ledger", stream_seq=8)
    assert [r.granted for r in later] == [True, False]
    assert await store.offset("ledger") == 8


async def test_release_decrements_and_is_idempotent(store: LedgerStore) -> None:
    await store.reserve([res("a", LEAVES[0], 30), res("b", LEAVES[1], 20)])
    released = await store.release(WorkloadKey("ns/a"), "Preempted")
    assert released == {"cpu": 30 * CORE}
    assert cpu(await store.usage()) == ZERO | {
        "root": 20,
        "root/Department-a": 20,
        LEAVES[1]: 20,
    }
    assert await store.release(WorkloadKey("ns/a"), "Preempted") is None
    assert await store.release(WorkloadKey("ns/zzz"), "Deleted") is None
    assert cpu(await store.usage())["root"] == 20
    assert [a.workload for a in await store.live_allocations()] == ["ns/b"]
    # by consumer offset: the second delivery of seq 3 does not release the re-admitted workload
    await store.reserve([res("a", LEAVES[0], 30)])
    assert await store.release(WorkloadKey("ns/a"), "Finished", consumer="c", stream_seq=3)
    await store.reserve([res("a", LEAVES[0], 30)])
    assert await store.release(WorkloadKey("ns/a"), "Finished", consumer="c", stream_seq=3) is None
    assert cpu(await store.usage())["root"] == 50


async def test_tree_change_keeps_usage_and_marks_dropped_nodes(
    store: LedgerStore, engine: AsyncEngine
) -> None:
    await store.reserve([res("a", LEAVES[0], 30), res("c", LEAVES[2], 10)])
    smaller = QuotaNode(
        name="root",
        max={"cpu": 100 * CORE},
        children=[QuotaNode(name="Department-b", max={"cpu": 50 * CORE})],
    )
    await store.apply_tree(smaller, version=2)
    await store.apply_tree(tree(), version=1)  # stale: ignored
    usage = cpu(await store.usage())
    assert usage == ZERO | {"root": 40, "root/Department-a": 30, LEAVES[0]: 30, LEAVES[2]: 10} | {
        "root/Department-b": 10
    }
    async with engine.connect() as conn:
        nodes: dict[str, bool] = dict(
            (await conn.execute(text("SELECT path, present FROM quota_nodes"))).all()
        )
    assert nodes == {
        "root": True,
        "root/Department-b": True,
        "root/Department-a": False,
        LEAVES[0]: False,
        LEAVES[1]: False,
        LEAVES[2]: False,
    }
    assert {a.workload for a in await store.live_allocations()} == {"ns/a", "ns/c"}
    # Department-b is now a leaf; the dropped leaf is unknown; release still works.
    results = await store.reserve([res("n", "root/Department-b", 40), res("m", LEAVES[0], 1)])
    assert [(r.granted, r.reason and r.reason.code) for r in results] == [
        (True, None),
        (False, "UnknownQuota"),
    ]
    assert await store.release(WorkloadKey("ns/a"), "Finished") == {"cpu": 30 * CORE}
    assert cpu(await store.usage())["root/Department-a"] == 0


async def test_failed_transaction_leaves_no_outbox_no_offset(store: LedgerStore) -> None:
    bad = OutboxMessage(event_id="e1", subject=None, payload=b"x")  # type: ignore[arg-type]
    with pytest.raises(LedgerPermanentError) as caught:
        await store.reserve(
            [res("a", LEAVES[0], 10)], consumer="ledger", stream_seq=1, outbox=[bad]
        )
    assert caught.value.operation == "reserve"
    assert caught.value.sqlstate == "23502"  # not_null_violation
    assert await store.offset("ledger") is None
    assert await store.pending_outbox(10) == []
    assert await store.live_allocations() == []
    assert cpu(await store.usage())["root"] == 0


async def test_retry_then_typed_transient_error(engine: AsyncEngine) -> None:
    store = LedgerStore(engine, max_attempts=3, backoff_seconds=0.001)

    class Orig(Exception):
        sqlstate = "40P01"

    calls = 0

    async def failing(conn: AsyncConnection) -> int:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise DBAPIError("SELECT", None, Orig())
        return 42

    assert await store.run("probe", failing) == 42
    assert calls == 3
    calls = -10
    with pytest.raises(LedgerTransientError) as caught:
        await store.run("probe", failing)
    assert (caught.value.operation, caught.value.attempts, caught.value.sqlstate) == (
        "probe",
        3,
        "40P01",
    )
    assert calls == -7


async def test_racing_writers_never_over_commit(store: LedgerStore) -> None:
    """8 tasks on separate connections reserve and release a shared pool of workloads."""
    rng = random.Random(1234)
    names = [f"w{i}" for i in range(120)]
    granted_total = 0
    refused_total = 0

    async def writer(seed: int) -> None:
        nonlocal granted_total, refused_total
        local = random.Random(seed)
        picks = [
            res(local.choice(names), local.choice(LEAVES), local.randint(1, 25)) for _ in range(50)
        ]
        for start in range(0, 50, 5):
            results = await store.reserve(picks[start : start + 5])
            granted_total += sum(r.granted for r in results)
            refused_total += sum(not r.granted for r in results)
            if local.random() < 0.5:
                await store.release(WorkloadKey(f"ns/{local.choice(names)}"), "Finished")

    await asyncio.gather(*(writer(rng.randrange(1 << 30)) for _ in range(8)))

    assert granted_total + refused_total == 400
    assert granted_total > 0 and refused_total > 0
    live = await store.live_allocations()
    assert len({a.workload for a in live}) == len(live)
    expected = dict.fromkeys(ZERO, 0)
    for alloc in live:
        for node in expected:
            if alloc.quota == node or alloc.quota.startswith(node + "/"):
                expected[node] += alloc.requests["cpu"]
    usage = await store.usage()
    assert {p: r["cpu"] for p, r in usage.items()} == expected
    limits = {"root": 100, "root/Department-a": 60, "root/Department-b": 100} | {
        leaf: 100 for leaf in LEAVES
    }
    for node, used in expected.items():
        assert used <= limits[node] * CORE, node
    # Something is still held, so the equality above compared non-trivial numbers.
    assert expected["root"] > 0
