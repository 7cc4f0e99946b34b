"""The ledger's per-zone checks against a real PostgreSQL: caps (Z1) refuse while the total has
room, within a batch, after a release, and under racing writers; a reclaim of a guarantee per
zone (Z4) is judged per zone on the ledger's own rows."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from schemas import Preempted, QuotaNode, Reason, Reservation
from schemas.ids import QueueName, QuotaPath, WorkloadKey, Zone
from tests.builders.events import CORE
from tests.builders.events import reservation as res
from tests.builders.trees import users_tree
from usher.adapters.pg.ledger_store import LedgerStore

USER_A, USER_B = "root/Department-a/user-a", "root/Department-a/user-b"
USER_C = "root/Department-b/user-c"


def capped_tree() -> QuotaNode:
    """Department-a may use 60 cpu in all but only 20 in zone a100."""
    root = users_tree()
    dept_a = msgspec.structs.replace(
        root.children[0], attributes={"usher.io/zone-max": "a100: cpu=20"}
    )
    return msgspec.structs.replace(root, children=[dept_a, *root.children[1:]])


def in_zone(name: str, leaf: str, cores: int, zone: str) -> Reservation:
    return msgspec.structs.replace(res(name, leaf, cores), zone=Zone(zone))


@pytest.fixture
def ledger_tree() -> QuotaNode:
    return capped_tree()


async def test_a_zone_cap_refuses_while_the_total_has_room(store: LedgerStore) -> None:
    assert (await store.reserve([in_zone("w1", USER_A, 15, "a100")]))[0].granted
    before = await store.usage()
    [refused] = await store.reserve([in_zone("w2", USER_B, 10, "a100")])
    assert not refused.granted and refused.reason is not None
    reason = refused.reason
    assert (reason.code, reason.node, reason.used, reason.requested, reason.limit) == (
        "ZoneQuotaExceeded",
        "root/Department-a",
        15 * CORE,
        10 * CORE,
        20 * CORE,
    )
    assert reason.message == "root/Department-a cpu in zone a100: 15 used + 10 requested > max 20"
    assert await store.usage() == before
    # Another zone, and a department without a cap, still have room.
    assert (await store.reserve([in_zone("w3", USER_B, 10, "h100")]))[0].granted
    assert (await store.reserve([in_zone("w4", USER_C, 30, "a100")]))[0].granted


async def test_a_batch_counts_its_own_grants_in_the_zone(store: LedgerStore) -> None:
    results = await store.reserve(
        [in_zone("w1", USER_A, 12, "a100"), in_zone("w2", USER_B, 12, "a100")]
    )
    assert [r.granted for r in results] == [True, False]
    assert results[1].reason is not None and results[1].reason.code == "ZoneQuotaExceeded"


async def test_a_release_frees_the_zone(store: LedgerStore) -> None:
    assert (await store.reserve([in_zone("w1", USER_A, 15, "a100")]))[0].granted
    assert not (await store.reserve([in_zone("w2", USER_B, 10, "a100")]))[0].granted
    assert await store.release(WorkloadKey("ns/w1"), "Finished")
    assert (await store.reserve([in_zone("w2", USER_B, 10, "a100")]))[0].granted


async def test_racing_writers_never_overfill_a_zone(store: LedgerStore) -> None:
    """Two writers per zone (as two dequeuers racing for jobs accepting both zones would be)
    reserve 3 cpu at a time on both leaves: a100 never holds more than its cap."""

    async def writer(index: int, zone: str) -> None:
        for n in range(6):
            leaf = (USER_A, USER_B)[n % 2]
            await store.reserve([in_zone(f"{zone}-{index}-{n}", leaf, 3, zone)])

    await asyncio.gather(*(writer(i, zone) for i in range(2) for zone in ("a100", "h100")))
    live = await store.live_allocations()
    in_a100 = sum(a.requests["cpu"] for a in live if a.zone == "a100")
    assert in_a100 == 18 * CORE  # six grants of 3 fit under 20, a seventh would not
    assert len({a.workload for a in live}) == len(live)


def guaranteed_tree(owner_zone_min: str | None) -> QuotaNode:
    """A and B are each guaranteed 50 cpu, B 20 of them in zone a100 (Z4); A the same when
    ``owner_zone_min`` is given."""
    cores = {"cpu": 100 * CORE}
    half = {"cpu": 50 * CORE}
    owner = {"usher.io/zone-min": owner_zone_min} if owner_zone_min else {}
    return QuotaNode(
        name="root",
        min=cores,
        max=cores,
        children=[
            QuotaNode(name="A", min=half, max=cores, namespaces=["a"], attributes=owner),
            QuotaNode(
                name="B",
                min=half,
                max=cores,
                namespaces=["b"],
                attributes={"usher.io/zone-min": "a100: cpu=20"},
            ),
        ],
    )


def zone_victim(name: str) -> Preempted:
    return Preempted(
        workload=WorkloadKey(f"ns/{name}"),
        queue=QueueName("q"),
        quota=QuotaPath("root/B"),
        preemptor=WorkloadKey("ns/p"),
        reason=Reason(code="Reclaim", message="the owner reclaims its guarantee in a100"),
    )


@pytest.mark.parametrize(
    ("case", "owner_zone_min", "owner_holds", "victim", "granted"),
    [
        ("a borrower in the zone, within its total min", "a100: cpu=20", 0, "b2", True),
        ("a victim in another zone never helps", "a100: cpu=20", 0, "b3", False),
        ("an owner with no guarantee in the zone", None, 0, "b2", False),
        ("an owner beyond its guarantee in the zone", "a100: cpu=20", 10, "b2", False),
    ],
)
async def test_a_zone_guarantee_is_reclaimed_in_its_zone(
    engine: AsyncEngine,
    case: str,
    owner_zone_min: str | None,
    owner_holds: int,
    victim: str,
    granted: bool,
) -> None:
    """Z4 on the ledger: B holds 40 cpu in a100 (above its 20 there) and 10 in h100, 50 in
    all (within its min); A's owner asks 20 in a100."""
    store = LedgerStore(engine)
    await store.apply_tree(guaranteed_tree(owner_zone_min), version=1)
    held = [
        in_zone("b1", "root/B", 20, "a100"),
        in_zone("b2", "root/B", 20, "a100"),
        in_zone("b3", "root/B", 10, "h100"),
    ]
    if owner_holds:
        held.append(in_zone("a1", "root/A", owner_holds, "a100"))
    assert all(r.granted for r in await store.reserve(held))
    result = await store.preempt(in_zone("p", "root/A", 20, "a100"), [zone_victim(victim)])
    assert result.granted is granted, (case, result.reason)
    if not granted:
        assert result.reason is not None and result.reason.code == "StaleView", case
