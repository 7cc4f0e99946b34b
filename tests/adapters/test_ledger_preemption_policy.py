"""The ledger re-checks the preemption policies P1-P3 in its transaction (R8), against a real
PostgreSQL: each proposal below is granted with the policy on user-b's node and refused, with
the policy's own reason and nothing changed, without it (or the other way round)."""

from __future__ import annotations

import msgspec
import pytest

from schemas import Preempted, QuotaNode, QuotaPath, Reason, Reservation
from schemas.ids import QueueName, WorkloadKey
from tests.builders.events import reservation as res
from tests.builders.trees import users_tree
from usher.adapters.pg.ledger_store import LedgerStore

USER_A, USER_B, USER_C = (
    "root/Department-a/user-a",
    "root/Department-a/user-b",
    "root/Department-b/user-c",
)
LOWER = {"usher.io/within-quota": "LowerPriority"}


@pytest.fixture
def ledger_tree() -> QuotaNode:
    return users_tree(dept_a_max=100)


def _tree(attributes: dict[str, str]) -> QuotaNode:
    """user-b (min 50 of Department-a) with ``attributes``; user-c guarantees nothing, or the
    50 cpu that ``usher.io/test-c-min`` (a key of this test only, not set on the tree) asks."""
    c_min = attributes.pop("usher.io/test-c-min", None)
    root = users_tree(dept_a_max=100)
    dept = root.children[0]
    user_b = msgspec.structs.replace(dept.children[1], attributes=attributes)
    dept = msgspec.structs.replace(dept, children=[dept.children[0], user_b])
    other = root.children[1]
    if c_min is not None:
        user_c = msgspec.structs.replace(other.children[0], min={"cpu": int(c_min) * 1000})
        other = msgspec.structs.replace(other, children=[user_c])
    return msgspec.structs.replace(root, children=[dept, other])


def _at(name: str, leaf: str, cores: int, priority: int = 0) -> Reservation:
    return msgspec.structs.replace(res(name, leaf, cores), priority=priority)


def _victim(name: str, leaf: str) -> Preempted:
    return Preempted(
        workload=WorkloadKey(f"ns/{name}"),
        queue=QueueName("q"),
        quota=QuotaPath(leaf),
        preemptor=WorkloadKey("ns/p"),
        reason=Reason(code="Reclaim", message="proposed"),
    )


async def _proposal(
    store: LedgerStore,
    attributes: dict[str, str],
    running: list[Reservation],
    preemptor: Reservation,
    victims: list[tuple[str, str]],
) -> Reason | None:
    """Apply the tree, reserve ``running``, propose the preemption: None when granted, else
    the refusal (after checking that nothing changed)."""
    await store.apply_tree(_tree(attributes), version=2)
    assert all(r.granted for r in await store.reserve(running))
    before = (await store.usage(), await store.live_allocations())
    result = await store.preempt(preemptor, [_victim(n, leaf) for n, leaf in victims])
    if result.granted:
        return None
    assert (await store.usage(), await store.live_allocations()) == before
    assert result.reason is not None
    return result.reason


# P1: user-b runs b-low (priority -1, 30) and b-keep (10, 20); user-c borrows 50. p (5, 30)
# asks 50 + 30 > 50; with b-low set aside, 20 + 30 <= 50.
JOINT = [
    _at("b-low", USER_B, 30, -1),
    _at("b-keep", USER_B, 20, 10),
    _at("c1", USER_C, 50),
]
# P2: user-c borrows with c-low (0, 40) and c-mid (3, 40); user-b runs b1 (20). p (5, 40) asks
# 20 + 40 > 50.
BORROWED = [_at("c-low", USER_C, 40), _at("c-mid", USER_C, 40, 3), _at("b1", USER_B, 20)]
# P3: user-b runs b-lo (0, 60) beyond its min 50; user-c runs c1 (40).
OWN_LEAF = [_at("b-lo", USER_B, 60), _at("c1", USER_C, 40)]


@pytest.mark.parametrize(
    ("case", "attributes", "running", "preemptor", "victims", "refused"),
    [
        (
            "p1-off",
            LOWER,
            JOINT,
            _at("p", USER_B, 30, 5),
            [("c1", USER_C), ("b-low", USER_B)],
            "asks beyond the guarantee",
        ),
        (
            "p1-on",
            LOWER | {"usher.io/reclaim-with-own-victims": "true"},
            JOINT,
            _at("p", USER_B, 30, 5),
            [("c1", USER_C), ("b-low", USER_B)],
            None,
        ),
        (
            "p1-on-without-own-victim",
            LOWER | {"usher.io/reclaim-with-own-victims": "true"},
            JOINT,
            _at("p", USER_B, 30, 5),
            [("c1", USER_C)],
            "asks beyond the guarantee",
        ),
        (
            "p2-off",
            {},
            BORROWED,
            _at("p", USER_B, 40, 5),
            [("c-low", USER_C)],
            "asks beyond the guarantee",
        ),
        (
            "p2-on",
            {"usher.io/preempt-while-borrowing": "LowerPriority:1"},
            BORROWED,
            _at("p", USER_B, 40, 5),
            [("c-low", USER_C)],
            None,
        ),
        (
            "p2-above-threshold",
            {"usher.io/preempt-while-borrowing": "LowerPriority:1"},
            BORROWED,
            _at("p", USER_B, 60, 5),
            [("c-low", USER_C), ("c-mid", USER_C)],
            "only priorities below 5 and at most 1",
        ),
        # BorrowersOnly: c-low leaves user-c at 40 of its min 0 (kept); a min of 50 would not.
        (
            "p2-borrowers-only",
            {"usher.io/preempt-while-borrowing": "LowerPriorityBorrowersOnly"},
            BORROWED,
            _at("p", USER_B, 40, 5),
            [("c-low", USER_C)],
            None,
        ),
        (
            "p2-borrowers-only-refused",
            {
                "usher.io/preempt-while-borrowing": "LowerPriorityBorrowersOnly",
                "usher.io/test-c-min": "50",
            },
            BORROWED,
            _at("p", USER_B, 40, 5),
            [("c-low", USER_C)],
            "would hold less than its min",
        ),
        ("p3-off", LOWER, OWN_LEAF, _at("p", USER_B, 60, 5), [("b-lo", USER_B)], None),
        (
            "p3-on",
            LOWER | {"usher.io/within-quota-request": "WithinMin"},
            OWN_LEAF,
            _at("p", USER_B, 60, 5),
            [("b-lo", USER_B)],
            "asks more than the min of",
        ),
        (
            "p3-on-within-min",
            LOWER | {"usher.io/within-quota-request": "WithinMin"},
            OWN_LEAF,
            _at("p", USER_B, 50, 5),
            [("b-lo", USER_B)],
            None,
        ),
    ],
)
async def test_the_ledger_rechecks_the_leafs_preemption_policy(
    store: LedgerStore,
    case: str,
    attributes: dict[str, str],
    running: list[Reservation],
    preemptor: Reservation,
    victims: list[tuple[str, str]],
    refused: str | None,
) -> None:
    reason = await _proposal(store, dict(attributes), running, preemptor, victims)
    if refused is None:
        assert reason is None, (case, reason)
    else:
        assert reason is not None and reason.code == "StaleView", case
        assert refused in reason.message, (case, reason.message)
