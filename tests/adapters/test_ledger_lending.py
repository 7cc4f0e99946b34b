"""The ledger's lending checks against a real PostgreSQL (L1 reclaim within the cohort, L2
lending limit): a reservation that would take idle guarantee another node keeps is refused with
the engine's very reason (scenarios 181, 184, 185 decide the same numbers), a batch counts its
own grants, a release gives the kept guarantee back, racing borrowers never take it, and a
reclaim from a borrower that ``usher.io/reclaim-within`` spares is refused."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from schemas import Preempted, QuotaNode, Reason, Reservation
from schemas.ids import QueueName, QuotaPath, WorkloadKey
from tests.builders.events import CORE
from tests.builders.events import reservation as res
from usher.adapters.pg.ledger_store import LedgerStore


def two_leaves(a: dict[str, str], root: dict[str, str] | None = None) -> QuotaNode:
    """Scenario 181's tree: the root's 8 cpu, A guaranteed 6 (with ``a``), B 2."""
    eight = {"cpu": 8 * CORE}
    return QuotaNode(
        name="root",
        min=eight,
        max=eight,
        attributes=root or {},
        children=[
            QuotaNode(name="A", min={"cpu": 6 * CORE}, max=eight, namespaces=["a"], attributes=a),
            QuotaNode(name="B", min={"cpu": 2 * CORE}, max=eight, namespaces=["b"]),
        ],
    )


def nested() -> QuotaNode:
    """Scenario 185's tree: A1 (under D, max 6) lends nothing of its 4."""
    eight, six = {"cpu": 8 * CORE}, {"cpu": 6 * CORE}
    a1 = QuotaNode(
        name="A1",
        min={"cpu": 4 * CORE},
        max=eight,
        namespaces=["a1"],
        attributes={"usher.io/lending-limit": "cpu=0"},
    )
    a2 = QuotaNode(name="A2", min={"cpu": 2 * CORE}, max=eight, namespaces=["a2"])
    d = QuotaNode(name="D", min=six, max=six, children=[a1, a2])
    b = QuotaNode(name="B", min={"cpu": 2 * CORE}, max=eight, namespaces=["b"])
    return QuotaNode(name="root", min=eight, max=eight, children=[d, b])


@pytest.fixture
def ledger_tree() -> QuotaNode:
    return two_leaves({"usher.io/reclaim-within": "Never"})


@pytest.mark.parametrize(
    ("case", "tree", "asks", "granted", "message"),
    [
        ("no attribute: A's idle 6 is lent", two_leaves({}), 6, True, None),
        ("Any written: the same", two_leaves({"usher.io/reclaim-within": "Any"}), 6, True, None),
        (
            "LowerPriority still lends",
            two_leaves({"usher.io/reclaim-within": "LowerPriority"}),
            6,
            True,
            None,
        ),
        (
            "Never lends nothing",
            two_leaves({"usher.io/reclaim-within": "Never"}),
            3,
            False,
            "root cpu: 0 used + 3 requested + 6 idle guarantee not lent > 8",
        ),
        (
            "Never inherited from the root",
            two_leaves({}, {"usher.io/reclaim-within": "Never"}),
            3,
            False,
            "root cpu: 0 used + 3 requested + 6 idle guarantee not lent > 8",
        ),
        ("a limit of 2 lends 2", two_leaves({"usher.io/lending-limit": "cpu=2"}), 4, True, None),
        (
            "a limit of 2 lends no more",
            two_leaves({"usher.io/lending-limit": "cpu=2"}),
            5,
            False,
            "root cpu: 0 used + 5 requested + 4 idle guarantee not lent > 8",
        ),
        (
            "a limit on another resource lends all cpu",
            two_leaves({"usher.io/lending-limit": "memory=0"}),
            6,
            True,
            None,
        ),
    ],
)
async def test_a_reservation_takes_only_what_is_lent(
    engine: AsyncEngine,
    case: str,
    tree: QuotaNode,
    asks: int,
    granted: bool,
    message: str | None,
) -> None:
    store = LedgerStore(engine)
    await store.apply_tree(tree, version=1)
    [result] = await store.reserve([res("w", "root/B", asks)])
    assert result.granted is granted, (case, result.reason)
    if message is not None:
        assert result.reason is not None and result.reason.code == "GuaranteeNotLent", case
        assert result.reason.message.startswith(message), (case, result.reason.message)
        assert (result.reason.node, result.reason.requested) == ("root", asks * CORE)


async def test_the_whole_path_is_checked(engine: AsyncEngine) -> None:
    """A1's kept 4 is kept from its sibling A2 on root/D and from B on the root."""
    store = LedgerStore(engine)
    await store.apply_tree(nested(), version=1)
    batch = [("b5", "root/B", 5), ("a24", "root/D/A2", 4), ("b4", "root/B", 4)]
    batch.append(("a22", "root/D/A2", 2))
    [b5, a24, b4, a22] = await store.reserve([res(*item) for item in batch])
    assert (b5.granted, a24.granted, b4.granted, a22.granted) == (False, False, True, False)
    assert b5.reason is not None and b5.reason.node == "root"
    assert a24.reason is not None and a24.reason.node == "root/D"
    assert a24.reason.message.startswith(
        "root/D cpu: 0 used + 4 requested + 4 idle guarantee not lent > 6"
    )
    # The owner takes its kept guarantee whatever B borrowed.
    assert (await store.reserve([res("owner", "root/D/A1", 4)]))[0].granted


async def test_a_batch_counts_its_own_grants_and_a_release_gives_back(
    store: LedgerStore,
) -> None:
    """Under Never, A's own work shrinks what A keeps idle (above its min it keeps nothing);
    once A's work is released, A keeps its whole guarantee again."""
    results = await store.reserve([res("a7", "root/A", 7), res("b1", "root/B", 1)])
    assert [r.granted for r in results] == [True, True]  # root: 7 + 1 + 0 kept
    assert await store.release(WorkloadKey("ns/a7"), "Finished")
    [again] = await store.reserve([res("b2", "root/B", 2)])
    assert not again.granted and again.reason is not None
    assert again.reason.message.startswith(
        "root cpu: 1 used + 2 requested + 6 idle guarantee not lent > 8"
    )


async def test_racing_borrowers_never_take_a_kept_guarantee(store: LedgerStore) -> None:
    async def borrower(index: int) -> None:
        for n in range(4):
            await store.reserve([res(f"b-{index}-{n}", "root/B", 1)])

    await asyncio.gather(*(borrower(i) for i in range(3)))
    live = await store.live_allocations()
    assert sum(a.requests["cpu"] for a in live) == 2 * CORE  # B's own 2: A's 6 stay idle


def victim(name: str) -> Preempted:
    return Preempted(
        workload=WorkloadKey(f"ns/{name}"),
        queue=QueueName("q"),
        quota=QuotaPath("root/B"),
        preemptor=WorkloadKey("ns/owner"),
        reason=Reason(code="Reclaim", message="A reclaims its guarantee"),
    )


def at_priority(item: Reservation, priority: int) -> Reservation:
    return Reservation(
        workload=item.workload,
        queue=item.queue,
        quota=item.quota,
        zone=item.zone,
        requests=item.requests,
        priority=priority,
    )


@pytest.mark.parametrize(
    ("policy", "owner_priority", "granted", "detail"),
    [
        ("Any", 0, True, None),
        ("LowerPriority", 0, False, "is not of lower priority than ns/owner"),
        ("LowerPriority", 10, True, None),
        ("Never", 10, False, "may not reclaim from other leaves"),
    ],
)
async def test_a_reclaim_spares_whom_the_policy_spares(
    engine: AsyncEngine, policy: str, owner_priority: int, granted: bool, detail: str | None
) -> None:
    """B borrows 6 (priority 0) while A lends (any policy but Never lends: the tree that says
    Never is applied after the borrower was admitted); A's owner asks 6 within its min."""
    store = LedgerStore(engine)
    await store.apply_tree(two_leaves({}), version=1)
    assert (await store.reserve([res("borrower", "root/B", 6)]))[0].granted
    await store.apply_tree(two_leaves({"usher.io/reclaim-within": policy}), version=2)
    owner = at_priority(res("owner", "root/A", 6), owner_priority)
    result = await store.preempt(owner, [victim("borrower")])
    assert result.granted is granted, (policy, result.reason)
    if detail is not None:
        assert result.reason is not None and result.reason.code == "StaleView"
        assert detail in result.reason.message, result.reason.message
