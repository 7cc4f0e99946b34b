"""Whether one victim may be preempted for a preemptor (docs/admission-rules.md R5, R6):
``usher.core.rules.reclaim.victim_refusal``, the one check the engine (``check_preemption``) and
the ledger (its re-check against its own rows) both call.

Table-driven cases pin each refusal, its order and its exact reason; a property over generated
values says it refuses exactly when the rules say so, always naming the victim.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import QuotaPath, Reason, WorkloadKey
from usher.core.model import reasons
from usher.core.rules.reclaim import victim_refusal

P, V = WorkloadKey("b/claim"), WorkloadKey("a/borrow")
MINE, OTHER = QuotaPath("root/b"), QuotaPath("root/a")

# Every value passed, the defaults a permitted cross-leaf reclaim: past its runtime, the
# preemptor within its guarantee, the victim's leaf borrowing.
BASE: dict[str, object] = {
    "victim_leaf": OTHER,
    "victim_priority": 0,
    "preemptor_priority": 5,
    "ran_ms": 10_000,
    "min_runtime_ms": 5_000,
    "lower_priority": False,
    "within": True,
    "borrowing": True,
}


def refusal(**changes: object) -> Reason | None:
    values = BASE | changes
    return victim_refusal(
        P,
        MINE,
        values["preemptor_priority"],  # type: ignore[arg-type]
        V,
        values["victim_leaf"],  # type: ignore[arg-type]
        values["victim_priority"],  # type: ignore[arg-type]
        ran_ms=values["ran_ms"],  # type: ignore[arg-type]
        min_runtime_ms=values["min_runtime_ms"],  # type: ignore[arg-type]
        lower_priority=values["lower_priority"],  # type: ignore[arg-type]
        within=values["within"],  # type: ignore[arg-type]
        borrowing=values["borrowing"],  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("case", "changes", "expected"),
    [
        ("cross-leaf reclaim", {}, None),
        ("runtime exactly over", {"ran_ms": 5_000}, None),
        (
            "within its minimum runtime",
            {"ran_ms": 4_999},
            reasons.victim_within_min_runtime(P, V, 4_999, 5_000),
        ),
        # Runtime is checked first: it protects whatever else holds.
        (
            "runtime before the rest",
            {"ran_ms": 0, "within": False, "borrowing": False},
            reasons.victim_within_min_runtime(P, V, 0, 5_000),
        ),
        ("an ended victim has no runtime", {"ran_ms": None, "min_runtime_ms": 10**9}, None),
        (
            "asks beyond its guarantee",
            {"within": False},
            reasons.beyond_guarantee(P, MINE, V),
        ),
        (
            "beyond the guarantee before borrowing",
            {"within": False, "borrowing": False},
            reasons.beyond_guarantee(P, MINE, V),
        ),
        ("victim not borrowing", {"borrowing": False}, reasons.victim_not_borrowing(P, V, OTHER)),
        (
            "same leaf, LowerPriority off",
            {"victim_leaf": MINE},
            reasons.victim_not_lower_priority(P, V, MINE),
        ),
        ("same leaf, lower priority", {"victim_leaf": MINE, "lower_priority": True}, None),
        (
            "same leaf, equal priority",
            {"victim_leaf": MINE, "lower_priority": True, "victim_priority": 5},
            reasons.victim_not_lower_priority(P, V, MINE),
        ),
        (
            "same leaf, an ended victim has no priority",
            {"victim_leaf": MINE, "lower_priority": True, "victim_priority": None},
            reasons.victim_not_lower_priority(P, V, MINE),
        ),
        # On its own leaf neither the guarantee nor borrowing matters (R5's second case).
        (
            "same leaf ignores the guarantee",
            {"victim_leaf": MINE, "lower_priority": True, "within": False, "borrowing": False},
            None,
        ),
    ],
)
def test_victim_refusal_table(
    case: str, changes: dict[str, object], expected: Reason | None
) -> None:
    assert refusal(**changes) == expected, case


def test_refusals_read_with_their_numbers() -> None:
    reason = refusal(ran_ms=1_200)
    assert reason is not None and reason.code == "StaleView" and reason.blocker == V
    assert reason.message == (
        "reclaim for b/claim refused: a/borrow is within its minimum runtime (1200 of 5000 ms)"
    )


@given(
    same_leaf=st.booleans(),
    victim_priority=st.none() | st.integers(-3, 3),
    preemptor_priority=st.integers(-3, 3),
    ran_ms=st.none() | st.integers(0, 20),
    min_runtime_ms=st.integers(0, 20),
    lower_priority=st.booleans(),
    within=st.booleans(),
    borrowing=st.booleans(),
)
def test_refused_exactly_when_r5_r6_say_so(
    same_leaf: bool,
    victim_priority: int | None,
    preemptor_priority: int,
    ran_ms: int | None,
    min_runtime_ms: int,
    lower_priority: bool,
    within: bool,
    borrowing: bool,
) -> None:
    reason = refusal(
        victim_leaf=MINE if same_leaf else OTHER,
        victim_priority=victim_priority,
        preemptor_priority=preemptor_priority,
        ran_ms=ran_ms,
        min_runtime_ms=min_runtime_ms,
        lower_priority=lower_priority,
        within=within,
        borrowing=borrowing,
    )
    protected = ran_ms is not None and ran_ms < min_runtime_ms
    if same_leaf:
        lower = victim_priority is not None and victim_priority < preemptor_priority
        allowed = not protected and lower_priority and lower
    else:
        allowed = not protected and within and borrowing
    assert (reason is None) == allowed
    if reason is not None:
        assert (reason.code, reason.blocker) == ("StaleView", V)
