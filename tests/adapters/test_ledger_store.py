"""Contract tests of the ledger's PostgreSQL store against a real server."""

from __future__ import annotations

import asyncio
import random
from datetime import datetime
from fractions import Fraction

import msgspec
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from schemas import Admitted, Millis, Preempted, QuotaNode, QuotaPath, Reason, Released, Requeued
from schemas.ids import QueueName, WorkloadKey, Zone
from tests.builders.events import CORE
from tests.builders.events import reservation as res
from tests.builders.trees import users_tree as tree
from usher.adapters.pg.ledger_store import (
    Change,
    LedgerDecision,
    LedgerPermanentError,
    LedgerRequestError,
    LedgerStore,
    LedgerTransientError,
    LiveAllocation,
    Observation,
    OutboxMessage,
    TreeUpdate,
)

LEAVES = ("root/Department-a/user-a", "root/Department-a/user-b", "root/Department-b/user-c")


def builder(
    decision: LedgerDecision, zone: Zone, alloc_id: int, at: datetime | None = None
) -> OutboxMessage:
    """A deterministic outbox row: ``<kind>:<workload>:<allocation id>``."""
    kind = type(decision).__name__.lower()
    return OutboxMessage(
        event_id=f"{kind}:{decision.workload}:{alloc_id}",
        subject=f"s.{zone}.{kind}",
        payload=msgspec.json.encode(decision),
    )


@pytest.fixture
def ledger_tree() -> QuotaNode:
    return tree()


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
        ("root/Department-a", 50 * CORE, 60 * CORE),
        ("root/Department-a/user-a", 0, 100 * CORE),
        ("root/Department-a/user-b", 50 * CORE, 100 * CORE),
        ("root/Department-b", 50 * CORE, 100 * CORE),
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
    batch = [res("a", LEAVES[0], 50), res("b", LEAVES[0], 50)]
    first = await store.reserve(batch, consumer="ledger", stream_seq=7, outbox=builder)
    assert [r.granted for r in first] == [True, False]
    assert await store.offset("ledger") == 7
    # Free room, then redeliver seq 7 and an older seq: nothing is applied again.
    assert await store.release(WorkloadKey("ns/a"), "Finished") is not None
    for seq in (7, 5):
        again = await store.reserve(batch, consumer="ledger", stream_seq=seq, outbox=builder)
        assert [r.granted for r in again] == [False, False]
    assert cpu(await store.usage())["root"] == 0
    assert await store.offset("ledger") == 7
    [(event_id, payload)] = [(m.event_id, m.payload) for m in await store.pending_outbox(10)]
    assert event_id.startswith("admitted:ns/a:")
    assert msgspec.json.decode(payload, type=Admitted).workload == "ns/a"
    # The next sequence is applied.
    later = await store.reserve(batch, consumer="ledger", stream_seq=8)
    assert [r.granted for r in later] == [True, False]
    assert await store.offset("ledger") == 8


async def test_a_repeated_request_is_answered_not_granted_again(store: LedgerStore) -> None:
    """The ledger died after committing; the job ran and finished; then the retry arrives."""
    [first] = await store.reserve([res("a", LEAVES[0], 30)], outbox=builder, request_ids=["r1"])
    assert first.granted
    released = await store.release(WorkloadKey("ns/a"), "Finished", outbox=builder)
    assert released == {"cpu": 30 * CORE}
    [again] = await store.reserve([res("a", LEAVES[0], 30)], outbox=builder, request_ids=["r1"])
    assert again.granted
    assert await store.live_allocations() == []
    assert cpu(await store.usage())["root"] == 0
    assert await outbox_kinds(store) == ["admitted:ns/a", "released:ns/a"]
    # A new request (a new pass) is a new admission.
    [fresh] = await store.reserve([res("a", LEAVES[0], 30)], outbox=builder, request_ids=["r2"])
    assert fresh.granted and len(await store.live_allocations()) == 1


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
    def bad(
        decision: LedgerDecision, zone: Zone, alloc_id: int, at: datetime | None = None
    ) -> OutboxMessage:
        return OutboxMessage(event_id="e1", subject=None, payload=b"x")  # type: ignore[arg-type]

    with pytest.raises(LedgerPermanentError) as caught:
        await store.reserve([res("a", LEAVES[0], 10)], consumer="ledger", stream_seq=1, outbox=bad)
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


# ---------------------------------------------------------------------- preemption


def victim(name: str, leaf: str, preemptor: str = "p") -> Preempted:
    return Preempted(
        workload=WorkloadKey(f"ns/{name}"),
        queue=QueueName("q"),
        quota=QuotaPath(leaf),
        preemptor=WorkloadKey(f"ns/{preemptor}"),
        reason=Reason(code="Reclaim", message="the owner reclaims its guarantee"),
    )


def states(live: list[LiveAllocation]) -> dict[str, str]:
    return {a.workload: a.state for a in live}


def suspended(seq: int, name: str) -> Observation:
    return Observation(seq=seq, workload=WorkloadKey(f"ns/{name}"), change="Suspended")


def finished(seq: int, name: str) -> Observation:
    return Observation(seq=seq, workload=WorkloadKey(f"ns/{name}"), change="Finished")


def deleted(seq: int, name: str) -> Observation:
    return Observation(seq=seq, workload=WorkloadKey(f"ns/{name}"), change="Deleted")


async def outbox_kinds(store: LedgerStore) -> list[str]:
    return [m.event_id.rsplit(":", 1)[0] for m in await store.pending_outbox(100)]


async def borrowed(store: LedgerStore) -> None:
    """Department-b borrows 60 of Department-a's room: a1 (40) and b1 (20) fill the root."""
    results = await store.reserve(
        [res("c1", LEAVES[2], 30), res("c2", LEAVES[2], 30), res("a1", LEAVES[0], 40)]
    )
    assert all(r.granted for r in results)


async def test_preempt_moves_usage_to_a_hold(store: LedgerStore) -> None:
    await borrowed(store)
    assert cpu(await store.usage())["root"] == 100
    preemptor = res("p", LEAVES[1], 20)
    result = await store.preempt(preemptor, [victim("c1", LEAVES[2])], outbox=builder)
    assert result.granted and result.reason is None
    # c1 runs until seen stopped: its 30 still counts, p's hold of 20 carved out of it where
    # their paths meet (root: max(30, 20)), added where they do not (Department-a).
    assert cpu(await store.usage()) == ZERO | {
        "root": 100,
        "root/Department-a": 60,
        "root/Department-b": 60,
        LEAVES[0]: 40,
        LEAVES[1]: 20,
        LEAVES[2]: 60,
    }
    live: dict[str, LiveAllocation] = {a.workload: a for a in await store.live_allocations()}
    assert states(list(live.values())) == {
        "ns/c1": "preempting",
        "ns/c2": "admitted",
        "ns/a1": "admitted",
        "ns/p": "held",
    }
    assert live["ns/c1"].preemptor == "ns/p"
    assert live["ns/c1"].preempted_at == live["ns/p"].reserved_at
    assert live["ns/p"].admitted_at is None
    [message] = await store.pending_outbox(10)
    assert message.event_id == f"preempted:ns/c1:{live['ns/c1'].id}"
    decision = msgspec.json.decode(message.payload, type=Preempted)
    assert (decision.preemptor, decision.quota, decision.reason.code) == (
        "ns/p",
        LEAVES[2],
        "Reclaim",
    )
    # A retry changes nothing and reports the hold as granted.
    again = await store.preempt(preemptor, [victim("c1", LEAVES[2])], outbox=builder)
    assert again.granted
    assert cpu(await store.usage())["root"] == 100
    # Nothing else fits while c1 stops: the root is full until then (Department-b is not).
    [late] = await store.reserve([res("late", LEAVES[2], 5)])
    assert not late.granted and late.reason is not None and late.reason.node == "root"
    # Department-a is full as well (a1 and the hold): the nearest full node is named.
    [near] = await store.reserve([res("near", LEAVES[0], 5)])
    assert not near.granted and near.reason is not None
    assert near.reason.node == "root/Department-a"
    assert len(await store.pending_outbox(10)) == 1


async def test_preempt_refused_when_the_preemptor_would_not_fit(store: LedgerStore) -> None:
    await borrowed(store)
    await store.apply_tree(tree(dept_a_max=55), version=2)
    before = (await store.usage(), await store.live_allocations())
    # Without c1 (30) the root has 30 free, but Department-a would reach 40 + 20 > 55.
    result = await store.preempt(res("p", LEAVES[1], 20), [victim("c1", LEAVES[2])])
    assert not result.granted
    assert result.reason is not None
    assert (result.reason.code, result.reason.node, result.reason.used) == (
        "QuotaExceeded",
        "root/Department-a",
        40 * CORE,
    )
    assert (await store.usage(), await store.live_allocations()) == before
    assert await store.pending_outbox(10) == []


async def test_preempt_with_a_stale_victim_is_refused(store: LedgerStore) -> None:
    await borrowed(store)
    assert await store.preempt(res("p", LEAVES[1], 20), [victim("c1", LEAVES[2])])
    before = (await store.usage(), await store.live_allocations())
    cases = {
        "ns/gone": [victim("c2", LEAVES[2], "q"), victim("gone", LEAVES[2], "q")],
        "ns/c1": [victim("c1", LEAVES[2], "q")],  # already preempting
        "ns/p": [victim("p", LEAVES[1], "q")],  # held, not admitted
    }
    for named, victims in cases.items():
        result = await store.preempt(res("q", LEAVES[1], 1), victims)
        assert not result.granted
        assert result.reason is not None
        assert (result.reason.code, result.reason.blocker) == ("StaleView", named)
        assert named in result.reason.message
    assert (await store.usage(), await store.live_allocations()) == before


def _with_attributes(root: QuotaNode, leaf: str, attributes: dict[str, str]) -> QuotaNode:
    """``root`` with ``attributes`` set on the node named ``leaf`` (last path part)."""
    name = leaf.rsplit("/", 1)[-1]
    children = [_with_attributes(c, leaf, attributes) for c in root.children]
    own = attributes if root.name == name else dict(root.attributes)
    return msgspec.structs.replace(root, children=children, attributes=own)


@pytest.mark.parametrize(
    ("case", "setup", "preemptor", "victims", "why"),
    [
        # user-b's guarantee is 50: 55 asks beyond it, so no other leaf may pay for it.
        ("beyond-guarantee", {}, ("p", 1, 55), [("c1", 2)], "asks beyond the guarantee"),
        # The victim's leaf is within its own guarantee: nothing it holds is borrowed.
        ("not-borrowing", {"c-min": 60}, ("p", 1, 20), [("c1", 2)], "not borrowing"),
        # Same leaf needs LowerPriority there and a strictly lower priority.
        ("same-leaf-never", {}, ("p", 0, 10), [("a1", 0)], "not of lower priority"),
        ("same-leaf-equal", {"lower": True}, ("p", 0, 10), [("a1", 0)], "not of lower priority"),
        # Minimum runtime of the victim's leaf (inherited from Department-b).
        ("min-runtime", {"runtime": True}, ("p", 1, 20), [("c1", 2)], "minimum runtime"),
    ],
)
async def test_the_ledger_refuses_a_reclaim_its_own_rows_do_not_justify(
    store: LedgerStore,
    case: str,
    setup: dict[str, object],
    preemptor: tuple[str, int, int],
    victims: list[tuple[str, int]],
    why: str,
) -> None:
    """R5-R7 are checked against the ledger's rows whatever the proposer saw (issue 12)."""
    root = tree(dept_a_max=100)
    if setup.get("c-min"):
        root = msgspec.structs.replace(
            root,
            children=[
                root.children[0],
                msgspec.structs.replace(
                    root.children[1],
                    children=[
                        msgspec.structs.replace(
                            root.children[1].children[0], min={"cpu": 60 * CORE}
                        )
                    ],
                ),
            ],
        )
    if setup.get("lower"):
        root = _with_attributes(root, LEAVES[0], {"usher.io/within-quota": "LowerPriority"})
    if setup.get("runtime"):
        root = _with_attributes(root, "Department-b", {"usher.io/min-runtime-seconds": "3600"})
    await store.apply_tree(root, version=2)
    await borrowed(store)
    before = (await store.usage(), await store.live_allocations())
    name, leaf, cores = preemptor
    result = await store.preempt(
        res(name, LEAVES[leaf], cores), [victim(v, LEAVES[i]) for v, i in victims]
    )
    assert not result.granted, case
    assert result.reason is not None and result.reason.code == "StaleView", case
    assert why in result.reason.message, (case, result.reason.message)
    assert result.reason.blocker == f"ns/{victims[0][0]}"
    assert (await store.usage(), await store.live_allocations()) == before
    assert await store.pending_outbox(10) == []


async def test_the_ledger_grants_a_lower_priority_victim_of_the_same_leaf(
    store: LedgerStore,
) -> None:
    root = _with_attributes(
        tree(dept_a_max=100), LEAVES[0], {"usher.io/within-quota": "LowerPriority"}
    )
    await store.apply_tree(root, version=2)
    await borrowed(store)
    urgent = msgspec.structs.replace(res("p", LEAVES[0], 10), priority=100)
    result = await store.preempt(urgent, [victim("a1", LEAVES[0])], outbox=builder)
    assert result.granted, result.reason
    # a1 (40) still runs; p's 10 is carved out of it on the same path: usage unchanged.
    assert cpu(await store.usage())["root"] == 100
    assert cpu(await store.usage())[LEAVES[0]] == 40


async def test_preempt_bad_input_is_a_request_error(store: LedgerStore) -> None:
    with pytest.raises(LedgerRequestError):
        await store.preempt(res("p", LEAVES[1], 1), [])
    with pytest.raises(LedgerRequestError):
        await store.preempt(res("p", LEAVES[1], 1), [victim("x", LEAVES[0])] * 2)
    with pytest.raises(LedgerRequestError):
        await store.preempt(res("p", LEAVES[1], 1), [victim("p", LEAVES[1])])
    with pytest.raises(LedgerRequestError) as caught:
        await store.reserve([res("n", LEAVES[1], -1)])
    assert caught.value.workload == "ns/n"


async def test_hold_is_admitted_when_the_last_victim_stops(store: LedgerStore) -> None:
    await borrowed(store)
    # Root full: p needs 50 of Department-a (40 used): both c1 and c2 must go.
    await store.apply_tree(tree(dept_a_max=100), version=2)
    preemptor = res("p", LEAVES[1], 50)
    victims = [victim("c1", LEAVES[2]), victim("c2", LEAVES[2])]
    assert (await store.preempt(preemptor, victims, outbox=builder)).granted
    # a1 40 + max(c1 + c2 = 60, p 50): the victims count whole while they stop.
    assert cpu(await store.usage())["root"] == 100

    first = await store.apply_log("ledger", 10, [suspended(10, "c1")], outbox=builder)
    # c1 stopped: c2 (30) still runs, p's 50 is held: 40 + max(30, 50).
    assert cpu(await store.usage())["root"] == 90
    assert cpu(await store.usage())["root/Department-b"] == 30
    assert [r.workload for r in first.released] == ["ns/c1"]
    assert first.released[0].cause == "Preempted"
    assert first.admitted == []
    assert states(await store.live_allocations())["ns/p"] == "held"

    second = await store.apply_log("ledger", 11, [suspended(11, "c2")], outbox=builder)
    assert [(r.workload, r.cause) for r in second.released] == [("ns/c2", "Preempted")]
    assert [a.workload for a in second.admitted] == ["ns/p"]
    assert second.admitted[0].requests == {"cpu": 50 * CORE}
    assert states(await store.live_allocations()) == {"ns/a1": "admitted", "ns/p": "admitted"}
    # The last victim stopped: only the preemptor's 50 counts where they were.
    assert cpu(await store.usage())["root"] == 90
    assert cpu(await store.usage())["root/Department-b"] == 0
    assert await outbox_kinds(store) == [
        "preempted:ns/c1",
        "preempted:ns/c2",
        "released:ns/c1",
        "released:ns/c2",
        "admitted:ns/p",
    ]
    [admitted_at] = [a.admitted_at for a in await store.live_allocations() if a.workload == "ns/p"]
    assert admitted_at is not None


async def test_a_preemptor_created_again_waits_for_its_earlier_victims(store: LedgerStore) -> None:
    """R7: one group per preemptor. p's hold ends while its victim a1 still stops; p, created
    again, may not preempt before a1 is seen stopped (counted as one group, a1's usage and the
    new hold used to leave 10 behind on Department-a for good)."""
    await borrowed(store)
    assert (await store.preempt(res("p", LEAVES[1], 20), [victim("a1", LEAVES[0])])).granted
    gone = await store.apply_log("ledger", 1, [deleted(1, "p")], outbox=builder)
    assert [r.workload for r in gone.released] == ["ns/p"]
    assert states(await store.live_allocations())["ns/a1"] == "preempting"
    before = (await store.usage(), await store.live_allocations())

    again = await store.preempt(res("p", LEAVES[1], 10), [victim("c1", LEAVES[2])])
    assert not again.granted and again.reason is not None
    assert (again.reason.code, again.reason.blocker) == ("PreemptionInProgress", "ns/a1")
    assert "ns/p preempted ns/a1 earlier" in again.reason.message
    assert (await store.usage(), await store.live_allocations()) == before

    await store.apply_log("ledger", 2, [suspended(2, "a1")], outbox=builder)
    assert (await store.preempt(res("p", LEAVES[1], 10), [victim("c1", LEAVES[2])])).granted
    await store.apply_log("ledger", 3, [suspended(3, "c1")], outbox=builder)
    live = await store.live_allocations()
    assert states(live) == {"ns/c2": "admitted", "ns/p": "admitted"}
    assert cpu(await store.usage()) == ZERO | {
        "root": 40,
        "root/Department-a": 10,
        "root/Department-b": 30,
        LEAVES[1]: 10,
        LEAVES[2]: 30,
    }


async def test_a_preemptor_created_again_and_admitted_is_released_whole(store: LedgerStore) -> None:
    """p, deleted while held, is created again and granted free room while its earlier victim
    a1 still stops. One batch sees a1 stop and p finish: p's own grant leaves the tree too
    (it is no member of a1's group, which has no hold any more)."""
    await borrowed(store)
    assert (await store.preempt(res("p", LEAVES[1], 20), [victim("a1", LEAVES[0])])).granted
    await store.apply_log("ledger", 1, [deleted(1, "p"), finished(1, "c2")], outbox=builder)
    assert (await store.reserve([res("p", LEAVES[1], 10)]))[0].granted
    assert states(await store.live_allocations())["ns/a1"] == "preempting"
    outcome = await store.apply_log(
        "ledger", 2, [suspended(2, "a1"), finished(2, "p")], outbox=builder
    )
    assert sorted(r.workload for r in outcome.released) == ["ns/a1", "ns/p"]
    assert states(await store.live_allocations()) == {"ns/c1": "admitted"}
    assert cpu(await store.usage()) == ZERO | {
        "root": 30,
        "root/Department-b": 30,
        LEAVES[2]: 30,
    }


async def test_suspension_seen_before_the_preemption_releases_nothing(
    store: LedgerStore,
) -> None:
    """An observation at or below the preemption's log position predates it."""
    await borrowed(store)
    preemptor = res("p", LEAVES[1], 20)
    victims = [victim("c2", LEAVES[2])]
    assert (await store.preempt(preemptor, victims, outbox=builder, log_seq=40)).granted
    stale = await store.apply_log("ledger", 40, [suspended(40, "c2")], outbox=builder)
    assert stale.released == [] and stale.admitted == []
    assert states(await store.live_allocations())["ns/c2"] == "preempting"
    fresh = await store.apply_log("ledger", 41, [suspended(41, "c2")], outbox=builder)
    assert [r.workload for r in fresh.released] == ["ns/c2"]
    assert [a.workload for a in fresh.admitted] == ["ns/p"]


async def test_suspended_admitted_or_held_is_not_released(store: LedgerStore) -> None:
    await borrowed(store)
    assert (await store.preempt(res("p", LEAVES[1], 20), [victim("c1", LEAVES[2])])).granted
    outcome = await store.apply_log(
        "ledger", 3, [suspended(1, "a1"), suspended(2, "p"), suspended(3, "nobody")]
    )
    assert outcome.applied and outcome.released == [] and outcome.admitted == []
    assert states(await store.live_allocations())["ns/a1"] == "admitted"
    assert states(await store.live_allocations())["ns/p"] == "held"
    assert await store.offset("ledger") == 3


async def test_finish_delete_rules(store: LedgerStore) -> None:
    await borrowed(store)
    assert (await store.preempt(res("p", LEAVES[1], 20), [victim("c1", LEAVES[2])])).granted
    changes = [
        Observation(seq=5, workload=WorkloadKey("ns/a1"), change="Failed"),
        Observation(seq=6, workload=WorkloadKey("ns/p"), change="Deleted"),
        Observation(seq=7, workload=WorkloadKey("ns/c2"), change="Finished"),
    ]
    outcome = await store.apply_log("ledger", 9, changes, outbox=builder)
    assert [(r.workload, r.cause) for r in outcome.released] == [
        ("ns/a1", "Failed"),
        ("ns/p", "Deleted"),
        ("ns/c2", "Finished"),
    ]
    # The held preemptor's victim stays preempting: it counts whole until seen stopped.
    assert states(await store.live_allocations()) == {"ns/c1": "preempting"}
    assert cpu(await store.usage()) == ZERO | {
        "root": 30,
        "root/Department-b": 30,
        LEAVES[2]: 30,
    }
    # The victim stops: released (cause Deleted when deleted), nobody is admitted.
    later = await store.apply_log(
        "ledger", 10, [Observation(seq=10, workload=WorkloadKey("ns/c1"), change="Deleted")]
    )
    assert [(r.workload, r.cause) for r in later.released] == [("ns/c1", "Deleted")]
    assert later.admitted == []
    assert await store.live_allocations() == []
    assert cpu(await store.usage()) == ZERO


async def test_reserve_of_a_preempting_or_held_workload(store: LedgerStore) -> None:
    await borrowed(store)
    assert (await store.preempt(res("p", LEAVES[1], 20), [victim("c1", LEAVES[2])])).granted
    results = await store.reserve(
        [res("c1", LEAVES[2], 30), res("p", LEAVES[1], 20), res("p", LEAVES[0], 20)],
        outbox=builder,
    )
    assert [(r.granted, r.reason and r.reason.code) for r in results] == [
        (False, "PreemptionInProgress"),
        (True, None),
        (False, "AlreadyAdmitted"),
    ]
    assert results[0].reason is not None and results[0].reason.blocker == "ns/p"
    assert await outbox_kinds(store) == []


async def test_redelivered_log_batch_is_applied_once(store: LedgerStore) -> None:
    await store.reserve([res("a", LEAVES[0], 10), res("b", LEAVES[0], 10)])
    finish_a = Observation(seq=4, workload=WorkloadKey("ns/a"), change="Finished")
    finish_b = Observation(seq=6, workload=WorkloadKey("ns/b"), change="Finished")
    first = await store.apply_log("ledger", 4, [finish_a], outbox=builder)
    assert first.applied and len(first.released) == 1
    # ns/a is admitted again; the redelivered seq 4 must not release it.
    await store.reserve([res("a", LEAVES[0], 10)])
    again = await store.apply_log("ledger", 4, [finish_a], outbox=builder)
    assert not again.applied and again.last_seq == 4
    # A batch overlapping the offset applies only its new part.
    overlap = await store.apply_log("ledger", 6, [finish_a, finish_b], outbox=builder)
    assert [r.workload for r in overlap.released] == ["ns/b"]
    assert states(await store.live_allocations()) == {"ns/a": "admitted"}
    assert cpu(await store.usage())["root"] == 10
    assert await store.offset("ledger") == 6
    assert await outbox_kinds(store) == ["released:ns/a", "released:ns/b"]
    with pytest.raises(LedgerRequestError):
        await store.apply_log("ledger", 5, [finish_b])


async def test_tree_update_in_a_log_batch(store: LedgerStore) -> None:
    smaller = QuotaNode(name="root", max={"cpu": 10 * CORE}, children=[QuotaNode(name="x")])
    outcome = await store.apply_log("ledger", 12, [TreeUpdate(seq=11, root=smaller)])
    assert outcome.applied
    results = await store.reserve([res("a", "root/x", 10), res("b", "root/x", 1)])
    assert [r.granted for r in results] == [True, False]
    # Redelivered with an older tree: ignored (version = sequence).
    await store.apply_log("ledger", 13, [TreeUpdate(seq=13, root=tree())])
    await store.apply_log("ledger", 14, [TreeUpdate(seq=2, root=smaller)])
    assert (await store.reserve([res("c", LEAVES[0], 1)]))[0].granted


async def test_outbox_ids_are_per_allocation(store: LedgerStore) -> None:
    await store.reserve([res("a", LEAVES[0], 10)], outbox=builder)
    await store.release(WorkloadKey("ns/a"), "Finished", outbox=builder)
    await store.reserve([res("a", LEAVES[0], 10)], outbox=builder)
    ids = [m.event_id for m in await store.pending_outbox(10)]
    assert len(set(ids)) == 3
    first, second = (int(i.rsplit(":", 1)[1]) for i in (ids[0], ids[2]))
    assert ids == [f"admitted:ns/a:{first}", f"released:ns/a:{first}", f"admitted:ns/a:{second}"]
    released = msgspec.json.decode((await store.pending_outbox(10))[1].payload, type=Released)
    assert (released.cause, released.requests) == ("Finished", {"cpu": 10 * CORE})


# ---------------------------------------------------------------------- concurrency


LIMITS = {"root": 100, "root/Department-a": 60, "root/Department-b": 100} | {
    leaf: 100 for leaf in LEAVES
}


async def sweep_peaks(engine: AsyncEngine) -> dict[str, int]:
    """The auditor's check: replay running intervals over time, peak cpu per node.

    A row runs from ``admitted_at`` until ``released_at`` -- a preempted victim until it was
    seen stopped, not until it was preempted; a hold that was never admitted never ran.
    Intervals are half-open, so at one instant the ends are applied before the starts.
    """
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT quota_path, requests, admitted_at, released_at FROM allocations"
                    " WHERE admitted_at IS NOT NULL"
                )
            )
        ).all()
    events: list[tuple[object, int, str, int]] = []
    for path, requests, start, end in rows:
        amount = int(requests.get("cpu", 0))
        events.append((start, 1, path, amount))
        if end is not None:
            assert end >= start
            events.append((end, 0, path, -amount))
    events.sort(key=lambda e: (e[0], e[1]))
    current = dict.fromkeys(LIMITS, 0)
    peaks = dict.fromkeys(LIMITS, 0)
    for _, _, leaf, delta in events:
        for node in current:
            if leaf == node or leaf.startswith(node + "/"):
                current[node] += delta
                peaks[node] = max(peaks[node], current[node])
    return peaks


async def test_racing_reserve_preempt_and_release_never_over_commit(
    store: LedgerStore, engine: AsyncEngine
) -> None:
    """8 writers reserve, preempt, finish and observe suspensions on a tight tree at once."""
    rng = random.Random(99)
    names = [f"w{i}" for i in range(60)]
    counts = {"granted": 0, "refused": 0, "preempted": 0}

    async def writer(index: int, seed: int) -> None:
        local = random.Random(seed)
        seq = 0
        for _ in range(25):
            roll = local.random()
            if roll < 0.5:
                picks = [
                    res(local.choice(names), local.choice(LEAVES), local.randint(5, 30))
                    for _ in range(4)
                ]
                results = await store.reserve(picks, outbox=builder)
                counts["granted"] += sum(r.granted for r in results)
                counts["refused"] += sum(not r.granted for r in results)
            elif roll < 0.7:
                # Reclaim as a dequeuer would propose it, on a view that may be stale by the
                # time the ledger re-checks it: user-b (the only guarantee) takes borrowers.
                live = [
                    a
                    for a in await store.live_allocations()
                    if a.state == "admitted" and a.quota != LEAVES[1]
                ]
                if live:
                    chosen = local.sample(live, min(len(live), local.randint(1, 2)))
                    preemptor = res(local.choice(names), LEAVES[1], 10)
                    victims = [
                        victim(a.workload.split("/")[1], a.quota, preemptor.workload[3:])
                        for a in chosen
                        if a.workload != preemptor.workload
                    ]
                    if victims:
                        result = await store.preempt(preemptor, victims, outbox=builder)
                        counts["preempted"] += result.granted
            else:
                seq += 1
                changes: list[Change] = ["Finished", "Suspended", "Deleted", "Suspended"]
                change = local.choice(changes)
                live_names = [a.workload.split("/")[1] for a in await store.live_allocations()]
                # Mostly a workload that holds quota (a release), sometimes one that does not.
                pool = live_names if live_names and local.random() < 0.8 else names
                await store.apply_log(
                    f"writer-{index}",
                    seq,
                    [
                        Observation(
                            seq=seq,
                            workload=WorkloadKey(f"ns/{local.choice(pool)}"),
                            change=change,
                        )
                    ],
                    outbox=builder,
                )

    await asyncio.gather(*(writer(i, rng.randrange(1 << 30)) for i in range(8)))

    assert counts["granted"] > 0 and counts["refused"] > 0 and counts["preempted"] > 0
    live = await store.live_allocations()
    assert len({a.workload for a in live}) == len(live)
    expected = dict.fromkeys(ZERO, 0)
    groups: dict[str, tuple[list[LiveAllocation], list[LiveAllocation]]] = {}
    for alloc in live:
        if alloc.state == "preempting":
            assert alloc.preemptor is not None
            groups.setdefault(alloc.preemptor, ([], []))[1].append(alloc)
        elif alloc.state == "held":
            groups.setdefault(alloc.workload, ([], []))[0].append(alloc)
        else:
            for node in expected:
                if alloc.quota == node or alloc.quota.startswith(node + "/"):
                    expected[node] += alloc.requests["cpu"]
    for holds, stopping in groups.values():
        # A preemption group counts max(victims still stopping, its hold) on each node.
        for node in expected:
            on = [a.requests["cpu"] for a in stopping if a.quota.startswith(node)]
            held = [a.requests["cpu"] for a in holds if a.quota.startswith(node)]
            expected[node] += max(sum(on), sum(held))
    assert {p: r["cpu"] for p, r in (await store.usage()).items()} == expected
    for node, used in expected.items():
        assert used <= LIMITS[node] * CORE, node
    peaks = await sweep_peaks(engine)
    for node, peak in peaks.items():
        assert peak <= LIMITS[node] * CORE, (node, peak)
    assert peaks["root"] > 50 * CORE  # the tree was really under pressure
    # A hold is never left without a victim still stopping (it would wait forever).
    holds = {a.workload for a in live if a.state == "held"}
    waiting = {a.preemptor for a in live if a.state == "preempting"}
    assert holds <= waiting


async def test_many_concurrent_reservations_on_a_tight_tree(
    store: LedgerStore, engine: AsyncEngine
) -> None:
    """40 single-workload transactions race for Department-a (60): exactly 6 of 10 fit."""
    picks = [res(f"t{i}", LEAVES[i % 2], 10) for i in range(40)]
    results = await asyncio.gather(*(store.reserve([p], outbox=builder) for p in picks))
    assert sum(r[0].granted for r in results) == 6
    assert cpu(await store.usage())["root/Department-a"] == 60
    assert (await sweep_peaks(engine))["root/Department-a"] == 60 * CORE
    assert len(await store.pending_outbox(100)) == 6


async def test_a_grant_is_stamped_after_the_release_it_counted_on(
    store: LedgerStore, engine: AsyncEngine
) -> None:
    """A reservation that began before a release but fits only thanks to it starts after it.

    The reservation reads ``quota_nodes`` before it locks the usage rows; a release never reads
    it. Holding ``quota_nodes`` lets the release begin later and commit first, deterministically.
    """
    assert (await store.reserve([res("h", LEAVES[0], 60)]))[0].granted
    async with engine.connect() as blocker:
        await blocker.execute(text("LOCK TABLE quota_nodes IN ACCESS EXCLUSIVE MODE"))
        waiting = asyncio.create_task(store.reserve([res("n", LEAVES[1], 60)]))
        for _ in range(200):
            async with engine.connect() as probe:
                blocked = await probe.scalar(
                    text(
                        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                        "WHERE c.relname = 'quota_nodes' AND NOT l.granted"
                    )
                )
            if blocked:
                break
            await asyncio.sleep(0.01)
        assert blocked, "the reservation never reached quota_nodes"
        assert await store.release(WorkloadKey("ns/h"), "Finished") is not None
        await blocker.rollback()
    [result] = await waiting
    assert result.granted
    async with engine.connect() as conn:
        released_at, reserved_at = (
            await conn.execute(
                text(
                    "SELECT (SELECT released_at FROM allocations WHERE workload = 'ns/h'), "
                    "(SELECT reserved_at FROM allocations WHERE workload = 'ns/n')"
                )
            )
        ).one()
    assert reserved_at >= released_at
    assert (await sweep_peaks(engine))["root/Department-a"] == 60 * CORE


async def test_downgrade_to_0001_keeps_what_counts(
    store: LedgerStore, engine: AsyncEngine, migrated_url: str
) -> None:
    """Holds become admitted, stopping victims released: usage stays equal to the rows."""
    from usher.adapters.pg.migrate import downgrade_async, upgrade_async

    await borrowed(store)
    assert (await store.preempt(res("p", LEAVES[1], 20), [victim("c1", LEAVES[2])])).granted
    await engine.dispose()  # the migration needs the table without our pooled sessions
    await downgrade_async(migrated_url, "0001")
    async with engine.connect() as conn:
        rows = dict((await conn.execute(text("SELECT workload, state FROM allocations"))).all())
    assert rows == {
        "ns/c1": "released",
        "ns/c2": "admitted",
        "ns/a1": "admitted",
        "ns/p": "admitted",
    }
    await upgrade_async(migrated_url)
    assert states(await store.live_allocations()) == {
        "ns/c2": "admitted",
        "ns/a1": "admitted",
        "ns/p": "admitted",
    }


async def test_upgrade_to_0003_counts_stopping_victims_and_downgrade_undoes_it(
    store: LedgerStore, engine: AsyncEngine, migrated_url: str
) -> None:
    """0003 recomputes ``used`` from the rows: a victim counts until stopped (R7)."""
    from usher.adapters.pg.migrate import downgrade_async, upgrade_async

    await borrowed(store)
    assert (await store.preempt(res("p", LEAVES[1], 20), [victim("c1", LEAVES[2])])).granted
    now = cpu(await store.usage())
    await engine.dispose()
    await downgrade_async(migrated_url, "0002")
    # The old rule: the victim's 30 left at preemption, the hold's 20 counts whole.
    old = cpu(await store.usage())
    assert old["root"] == 90 and old[LEAVES[2]] == 30 and old["root/Department-a"] == 60
    await upgrade_async(migrated_url)
    assert cpu(await store.usage()) == now
    assert now["root"] == 100 and now[LEAVES[2]] == 60


async def test_a_workload_seen_ended_after_the_proposal_is_refused_not_granted_for_ever(
    store: LedgerStore,
) -> None:
    """R8: a dequeuer that had not read a deletion yet proposes the deleted job; nothing
    would ever release that grant. A job created again later under the name is granted."""
    gone = Observation(seq=10, workload=WorkloadKey("ns/gone"), change="Deleted")
    await store.apply_log("ledger", 10, [gone])
    [stale] = await store.reserve([res("gone", LEAVES[0], 5)], views=[9])
    assert not stale.granted and stale.reason is not None
    assert (stale.reason.code, stale.reason.blocker) == ("StaleView", "ns/gone")
    assert "log entry 10" in stale.reason.message and "entry 9" in stale.reason.message
    assert await store.live_allocations() == []
    # The same name again, proposed on a view that saw its new observation (after the end).
    [again] = await store.reserve([res("gone", LEAVES[0], 5)], views=[12])
    assert again.granted
    await store.release(WorkloadKey("ns/gone"), "Finished")
    # A preemptor that ended after the proposer's view gets no hold either.
    await borrowed(store)
    done = Observation(seq=20, workload=WorkloadKey("ns/p"), change="Finished")
    await store.apply_log("ledger", 20, [done])
    refused = await store.preempt(res("p", LEAVES[1], 20), [victim("c1", LEAVES[2])], log_seq=15)
    assert not refused.granted and refused.reason is not None
    assert refused.reason.code == "StaleView"
    assert states(await store.live_allocations())["ns/c1"] == "admitted"


def requeue(name: str, leaf: str, cores: int) -> Requeued:
    """A requeue for readiness of ``ns/name`` (R10), as a dequeuer proposes it."""
    return Requeued(
        workload=WorkloadKey(f"ns/{name}"),
        queue=QueueName("q"),
        quota=QuotaPath(leaf),
        zone=Zone("default"),
        requests={"cpu": cores * CORE},
        ready=1,
        total=4,
        attempt=1,
        max_attempts=5,
        retry_after_ms=Millis(60_000),
        reason=Reason(code="PodsNotReady", message="1/4 pods ready after 300 s"),
    )


async def test_requeue_stops_like_a_victim_and_releases_when_seen_stopped(
    store: LedgerStore,
) -> None:
    """R10: granted only for an admitted allocation; counted until seen suspended (R7)."""
    await borrowed(store)
    results = await store.requeue(
        [requeue("c1", LEAVES[2], 30), requeue("nobody", LEAVES[2], 30)],
        outbox=builder,
        log_seq=20,
    )
    assert [r.granted for r in results] == [True, False]
    assert results[1].reason is not None and results[1].reason.code == "StaleView"
    assert "no live allocation" in results[1].reason.message
    assert states(await store.live_allocations())["ns/c1"] == "preempting"
    # Still counted while its pods may run.
    assert cpu(await store.usage())["root"] == 100
    # A retried request changes nothing and writes no second decision.
    [again] = await store.requeue([requeue("c1", LEAVES[2], 30)], outbox=builder, log_seq=21)
    assert again.granted
    # A reservation for it waits for the stop, like a victim's.
    [early] = await store.reserve([res("c1", LEAVES[2], 30)])
    assert not early.granted
    stale = await store.apply_log("ledger", 20, [suspended(20, "c1")], outbox=builder)
    assert stale.released == []
    seen = await store.apply_log("ledger", 22, [suspended(22, "c1")], outbox=builder)
    # Released as what happened to it: requeued for readiness, not preempted by anyone.
    assert [(r.workload, r.cause) for r in seen.released] == [("ns/c1", "Requeued")]
    assert seen.admitted == []
    assert cpu(await store.usage())["root"] == 70
    assert cpu(await store.usage())[LEAVES[2]] == 30
    assert await outbox_kinds(store) == ["requeued:ns/c1", "released:ns/c1"]
    # Released: it may be admitted again; a requeue of a workload not admitted is refused.
    [late] = await store.reserve([res("c1", LEAVES[2], 30)])
    assert late.granted
    [held] = await store.requeue([requeue("c1", "root/Department-a/user-a", 30)])
    assert not held.granted


@pytest.mark.parametrize("allowed", [False, True])
async def test_a_requeued_workload_reclaims_only_where_its_tree_allows_it(
    store: LedgerStore, allowed: bool
) -> None:
    """R10: ns/g, requeued once for not becoming ready, would reclaim user-b's guarantee from
    user-c (which borrows) on its next attempt: the ledger refuses it unless the tree sets
    usher.io/requeued-may-preempt, whatever the proposer saw."""
    root = tree(dept_a_max=100)
    if allowed:
        root = _with_attributes(root, LEAVES[1], {"usher.io/requeued-may-preempt": "true"})
    await store.apply_tree(root, version=2)
    granted = await store.reserve(
        [res("g", LEAVES[1], 20), res("c1", LEAVES[2], 30), res("a1", LEAVES[0], 40)]
    )
    assert all(r.granted for r in granted)
    [requeued] = await store.requeue([requeue("g", LEAVES[1], 20)], outbox=builder, log_seq=20)
    assert requeued.granted
    seen = await store.apply_log("ledger", 22, [suspended(22, "g")], outbox=builder)
    assert [(r.workload, r.cause) for r in seen.released] == [("ns/g", "Requeued")]
    [borrower] = await store.reserve([res("c2", LEAVES[2], 30)])
    assert borrower.granted
    result = await store.preempt(res("g", LEAVES[1], 20), [victim("c2", LEAVES[2], "g")])
    assert result.granted is allowed
    if not allowed:
        assert result.reason is not None and result.reason.code == "StaleView"
        assert "requeued once for not becoming ready" in result.reason.message
        assert states(await store.live_allocations())["ns/c2"] == "admitted"


async def test_a_partial_admission_is_counted_and_published_as_admitted(
    store: LedgerStore,
) -> None:
    """R11: the ledger counts the admitted pods' requests and says how many in Admitted."""
    reason = Reason(code="PartialAdmission", message="6 of 8 pods admitted (min 4)")
    item = msgspec.structs.replace(res("part", LEAVES[0], 6), pod_counts={"main": 6}, reason=reason)
    [result] = await store.reserve([item], outbox=builder)
    assert result.granted
    assert cpu(await store.usage())["root"] == 6
    [message] = await store.pending_outbox(10)
    admitted = msgspec.json.decode(message.payload, type=Admitted)
    assert (admitted.pod_counts, admitted.reason) == ({"main": 6}, reason)
