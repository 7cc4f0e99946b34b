"""Window budgets (docs/admission-rules.md B1): the attribute's syntax and T1's refusals,
windows and their resets, what is spent as work runs and stops, the hold at the instant the
running work uses a budget up and the release at the reset (both wakeups), min-only, a
snapshot carrying the book, and a property over generated histories: nothing is admitted below
a node whose budget with action hold is spent, at any decision."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import (
    Admitted,
    Decision,
    Millis,
    QuotaNode,
    QuotaPath,
    QuotaTreeApplied,
    Reason,
    Released,
    WorkloadFinished,
    WorkloadKey,
)
from tests.builders.events import observed
from tests.builders.generated import Op, ops, trees
from tests.builders.log import Log
from tests.builders.trees import departments_tree, two_leaf_tree
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import restore, snapshot
from usher.core.history import invariants
from usher.core.model.config import EngineConfig
from usher.core.rules import budgets
from usher.core.rules.budgets import BudgetBook, window_of
from usher.core.state.indexed import JobState
from usher.core.tree import budget_spec
from usher.core.tree.budget_spec import MONTH, BudgetAction, parse_budgets
from usher.core.tree.quota_tree import path_nodes, validate_tree

HOUR = 3_600_000
DAY = 86_400_000
CPU_HOUR = 1000 * HOUR  # one core for one hour, in canonical units x ms
A = QuotaPath("root/A")


# ---------------------------------------------------------------- the attribute (T1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cpu=500h per month", [("cpu", 500 * CPU_HOUR, MONTH)]),
        ("nvidia.com/gpu=0.5h per 7d", [("nvidia.com/gpu", HOUR // 2, 7)]),
        ("memory=2h per 1d", [("memory", 2 * (1 << 30) * HOUR, 1)]),
        (
            " cpu=1h per month ; cpu=10h per 30d;",
            [("cpu", CPU_HOUR, MONTH), ("cpu", 10 * CPU_HOUR, 30)],
        ),
    ],
)
def test_a_budget_attribute_is_read_exactly(
    text: str, expected: list[tuple[str, int, int]]
) -> None:
    found, errors = parse_budgets({"usher.io/budgets": text}, A, "f")
    assert errors == []
    assert [(b.resource, b.limit, b.days) for b in found] == expected
    assert all(b.action == BudgetAction.HOLD and b.node == A for b in found)


@pytest.mark.parametrize(
    ("attributes", "field", "says"),
    [
        ({"usher.io/budgets": "cpu=10 per month"}, "usher.io/budgets", "is not"),
        ({"usher.io/budgets": "cpu=10h per week"}, "usher.io/budgets", "is not"),
        ({"usher.io/budgets": "cpu=10h per 0d"}, "usher.io/budgets", "1 to 366 days"),
        ({"usher.io/budgets": "cpu=10h per 400d"}, "usher.io/budgets", "1 to 366 days"),
        ({"usher.io/budgets": "nvidia.com/gpu=0.0000001h per 1d"}, "usher.io/budgets", "finer"),
        ({"usher.io/budgets": "cpu=1h per 1d; cpu=2h per 1d"}, "usher.io/budgets", "second"),
        ({"usher.io/budgets": " ; "}, "usher.io/budgets", "no budget given"),
        ({"usher.io/budgets": f"memory={'9' * 30}h per 1d"}, "usher.io/budgets", "too large"),
        (
            {"usher.io/budgets": "cpu=1h per 1d", "usher.io/budget-action": "evict"},
            "usher.io/budget-action",
            "must be one of hold, min-only, lower-priority",
        ),
    ],
)
def test_the_tree_refuses_a_bad_budget_naming_the_attribute(
    attributes: dict[str, str], field: str, says: str
) -> None:
    [error] = validate_tree(two_leaf_tree(a_attributes=attributes))
    assert error.path == f"spec.root.children[0](A).attributes.{field}"
    assert error.code == "invalid-attribute" and says in error.message


# ---------------------------------------------------------------- windows


@pytest.mark.parametrize(
    ("days", "now", "start", "end", "label"),
    [
        (MONTH, 0, 0, 31 * DAY, "1970-01"),
        (MONTH, 31 * DAY, 31 * DAY, 59 * DAY, "1970-02"),
        # 2026-12-31T23:59:59.999Z: December, resetting on the first of the next year.
        (MONTH, 1_798_761_599_999, 1_796_083_200_000, 1_798_761_600_000, "2026-12"),
        (1, DAY + 5, DAY, 2 * DAY, "the 1 day from 1970-01-02"),
        (7, 10 * DAY, 7 * DAY, 14 * DAY, "the 7 days from 1970-01-08"),
    ],
)
def test_the_window_of_an_instant(days: int, now: int, start: int, end: int, label: str) -> None:
    assert window_of(days, now) == (start, end, label)


@pytest.mark.parametrize(
    ("resource", "amount", "said"),
    [("cpu", 503_200 * HOUR, "503.2"), ("cpu", 500 * CPU_HOUR, "500"), ("cpu", 1, "0")],
)
def test_hours_for_people(resource: str, amount: int, said: str) -> None:
    assert budgets.people_hours(resource, amount) == said


def test_the_book_counts_a_closed_interval_in_the_window_it_closes_in() -> None:
    [budget] = parse_budgets({"usher.io/budgets": "cpu=10h per 1d"}, A, "f")[0]
    book = BudgetBook()
    # Admitted an hour before the reset, stopped an hour after: the new day books one hour.
    book.close([budget], {"cpu": 2000}, DAY - HOUR, DAY + HOUR)
    assert book.booked(budget, window_of(1, DAY + HOUR)) == 2 * CPU_HOUR
    assert book.booked(budget, window_of(1, 2 * DAY)) == 0


# ---------------------------------------------------------------- the engine


def engine_with(attributes: dict[str, str], running: int = 90, at: int = 0) -> Engine:
    """A (min 60, max 100 cpu) under ``attributes``; ``a1/running`` admitted at ``at``."""
    engine = Engine(EngineConfig(instant_release=True))
    engine.apply(QuotaTreeApplied(root=two_leaf_tree(a_attributes=attributes)), Millis(0))
    engine.apply(observed("a1", "running", running, created=at), Millis(at))
    [admitted] = engine.decide(Millis(at))
    assert isinstance(admitted, Admitted)
    return engine


def reason_of(engine: Engine, key: str) -> str:
    view = engine.job_state(WorkloadKey(key))
    assert view is not None and view.reason is not None
    return f"{view.reason.code}: {view.reason.message}"


def test_the_hold_takes_effect_when_the_running_work_spends_the_budget() -> None:
    engine = engine_with({"usher.io/budgets": "cpu=1h per 1d"})
    # Over A's max: waits on quota, and the budget's wakeup is due when 90 cpu spent 3600 s.
    engine.apply(observed("a1", "big", 20, created=1000), Millis(1000))
    assert engine.decide(Millis(1000)) == []
    assert reason_of(engine, "a1/big").startswith("QuotaExceeded")
    assert engine.next_wakeup() == Millis(40_000)
    assert engine.decide(Millis(40_000)) == []
    assert reason_of(engine, "a1/big") == (
        "BudgetExhausted: 1 of 1 CPU-hours in the 1 day from 1970-01-01, resets 1970-01-02 "
        "(budget of root/A)"
    )
    assert engine.next_wakeup() == Millis(DAY)  # the reset
    still = engine.job_state(WorkloadKey("a1/running"))
    assert still is not None and still.state == JobState.ADMITTED
    assert engine.stale_offer_keys() == []


def test_the_reset_releases_held_work_and_counts_running_work_from_it() -> None:
    engine = engine_with({"usher.io/budgets": "cpu=1h per 1d"}, running=10)
    engine.apply(observed("a1", "held", 10, created=HOUR), Millis(HOUR))
    assert engine.decide(Millis(HOUR)) == []  # 10 cpu for an hour: 10 CPU-hours spent
    assert reason_of(engine, "a1/held").startswith("BudgetExhausted: 10 of 1 CPU-hours")
    [admitted] = engine.decide(Millis(DAY))
    assert isinstance(admitted, Admitted) and admitted.workload == "a1/held"
    engine.apply(WorkloadFinished(workload=WorkloadKey("a1/running")), Millis(DAY + 60_000))
    [status] = engine.budget_statuses(Millis(DAY + 120_000)).values()
    # running: 60 s of the new day (its first day is not counted again); held: 120 s.
    assert status.spent == 10 * 1000 * (60_000 + 120_000)
    assert status.rate == 10 * 1000


def test_min_only_admits_within_min_and_refuses_borrowing() -> None:
    attributes = {"usher.io/budgets": "cpu=1h per 1d", "usher.io/budget-action": "min-only"}
    engine = engine_with(attributes, running=50)
    engine.apply(observed("a1", "borrower", 20, created=HOUR), Millis(HOUR))
    engine.apply(observed("a1", "within", 10, created=HOUR + 1), Millis(HOUR))
    [admitted] = engine.decide(Millis(HOUR))  # 50 + 10 <= min 60; 50 + 20 is not
    assert isinstance(admitted, Admitted) and admitted.workload == "a1/within"
    assert reason_of(engine, "a1/borrower").endswith(
        "(budget of root/A; min-only: root/A admits within min only)"
    )
    assert engine.stale_offer_keys() == []


@pytest.mark.parametrize(
    ("limit", "first"), [("1000h", "a1/first"), ("1h", "b1/second")], ids=["unspent", "spent"]
)
def test_lower_priority_offers_after_everything_else(limit: str, first: str) -> None:
    """Both leaves borrow (min 0) with an infinite share and equal priority: R3 offers the
    earlier job first, unless its leaf's lower-priority budget is spent (B1)."""
    attributes = {
        "usher.io/budgets": f"cpu={limit} per 1d",
        "usher.io/budget-action": "lower-priority",
    }
    tree = two_leaf_tree(a_min=0, b_min=0, a_attributes=attributes)
    engine = Engine(EngineConfig(instant_release=True))
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    engine.apply(observed("a1", "running", 10), Millis(0))
    engine.apply(observed("b1", "running", 10), Millis(0))
    engine.decide(Millis(0))
    engine.apply(observed("a1", "first", 60, created=HOUR), Millis(HOUR))
    engine.apply(observed("b1", "second", 60, created=HOUR + 1), Millis(HOUR))
    [admitted] = engine.decide(Millis(HOUR))  # 80 cpu left: one of them
    assert isinstance(admitted, Admitted) and admitted.workload == first
    assert engine.stale_offer_keys() == []


def test_a_budget_of_a_parent_holds_its_children() -> None:
    tree = two_leaf_tree()
    tree = msgspec.structs.replace(tree, attributes={"usher.io/budgets": "cpu=1h per month"})
    engine = Engine(EngineConfig(instant_release=True))
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    engine.apply(observed("a1", "spender", 10), Millis(0))
    engine.decide(Millis(0))
    engine.apply(observed("b1", "child", 1, created=HOUR), Millis(HOUR))
    assert engine.decide(Millis(HOUR)) == []
    assert reason_of(engine, "b1/child").endswith("(budget of root)")


def test_a_refused_proposal_books_nothing_a_stop_books_what_it_held() -> None:
    engine = Engine(EngineConfig())
    tree = two_leaf_tree(a_attributes={"usher.io/budgets": "cpu=1h per 1d"})
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    engine.apply(observed("a1", "proposed", 10), Millis(0))
    [proposal] = engine.decide(Millis(0))
    assert isinstance(proposal, Admitted)
    engine.state.now = Millis(5000)  # the ledger's refusal is read 5 s later
    engine.revert_admission(proposal.workload, Reason(code="StaleView", message="refused"))
    assert engine.state.budget_book.closed == {}
    [again] = engine.decide(Millis(6000))
    engine.apply(again, Millis(6000))
    engine.apply(WorkloadFinished(workload=again.workload), Millis(9000))
    # Finished, not yet released by the ledger: its interval is open still (U1) and counts
    # as running work, as usage counts it.
    assert engine.state.budget_book.closed == {}
    [status] = engine.budget_statuses(Millis(10_000)).values()
    assert (status.spent, status.rate) == (10 * 1000 * 4000, 10 * 1000)
    engine.apply(
        Released(
            workload=again.workload, quota=again.quota, requests=again.requests, cause="Finished"
        ),
        Millis(12_000),
    )
    assert engine.state.budget_book.closed == {"root/A cpu 1": (0, 10 * 1000 * 6000)}


def test_no_budget_no_wakeup_and_no_book() -> None:
    engine = engine_with({})
    engine.apply(observed("a1", "big", 20, created=1000), Millis(1000))
    engine.decide(Millis(1000))
    assert engine.next_wakeup() is None
    assert engine.budget_statuses() == {}
    assert engine.state.budget_book.closed == {}


def test_a_snapshot_carries_the_book() -> None:
    engine = engine_with({"usher.io/budgets": "cpu=2h per 1d"}, running=10)
    engine.apply(WorkloadFinished(workload=WorkloadKey("a1/running")), Millis(HOUR // 2))
    engine.apply(observed("a1", "next", 10, created=HOUR), Millis(HOUR))
    engine.decide(Millis(HOUR))
    engine.apply(observed("a1", "waiting", 10, created=2 * HOUR), Millis(2 * HOUR))
    twin = restore(snapshot(engine), EngineConfig(instant_release=True))
    assert twin.state.budget_book.closed == engine.state.budget_book.closed != {}
    assert twin.state.version == engine.state.version  # restoring decides nothing
    assert twin.budget_statuses() == engine.budget_statuses()
    assert twin.next_wakeup() == engine.next_wakeup()
    assert twin.decide(Millis(2 * HOUR)) == engine.decide(Millis(2 * HOUR)) == []
    assert reason_of(twin, "a1/waiting") == reason_of(engine, "a1/waiting")


# ---------------------------------------------------------------- the property


def with_budgets(tree: QuotaNode, chosen: list[tuple[int, int, str]]) -> QuotaNode:
    """``tree`` with a cpu budget on some nodes: (node index, tenths of an hour, action)."""
    by_index: dict[int, tuple[int, str]] = {i % 16: (t, a) for i, t, a in chosen}
    counter = iter(range(1000))

    def walk(node: QuotaNode) -> QuotaNode:
        number = next(counter)
        children = [walk(child) for child in node.children]
        attributes = dict(node.attributes)
        if number in by_index:
            tenths, action = by_index[number]
            attributes["usher.io/budgets"] = f"cpu={tenths / 10}h per 1d"
            attributes["usher.io/budget-action"] = action
        return msgspec.structs.replace(node, children=children, attributes=attributes)

    return walk(tree)


budget_choices = st.lists(
    st.tuples(st.integers(0, 15), st.integers(1, 30), st.sampled_from(budget_spec.BUDGET_ACTIONS)),
    min_size=1,
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(trees(), ops, budget_choices, st.integers(60_000, 3 * HOUR))
def test_nothing_is_admitted_below_a_spent_hold_budget(
    tree: QuotaNode, stream: list[Op], chosen: list[tuple[int, int, str]], step_ms: int
) -> None:
    tree = with_budgets(tree, chosen)
    assert validate_tree(tree) == []
    engine = Engine(EngineConfig(instant_release=True))
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    namespaces = [leaf.namespaces[0] for leaf in _leaves(tree)]
    created: list[str] = []

    def decide(now: int) -> None:
        before = engine.budget_statuses(Millis(now))
        made: list[Decision] = engine.decide(Millis(now))
        for decision in made:
            if not isinstance(decision, Admitted):
                continue
            on_path = set(path_nodes(decision.quota))
            spent = [
                s
                for s in before.values()
                if s.budget.node in on_path and s.budget.action == BudgetAction.HOLD and s.exhausted
            ]
            assert spent == [], (now, decision.workload, spent)
        assert engine.stale_offer_keys() == []

    for step, op in enumerate([*stream, Op("pass", 0)]):
        now = step * step_ms
        wakeup = engine.next_wakeup()
        while wakeup is not None and wakeup < now:
            decide(wakeup)
            wakeup = engine.next_wakeup()
        if op.kind == "create":
            event = observed(
                namespaces[op.index % len(namespaces)], f"j{step}", op.cores, created=now
            )
            created.append(event.workload)
            engine.apply(event, Millis(now))
        elif op.kind in ("finish", "delete") and created:
            target = WorkloadKey(created[op.index % len(created)])
            engine.apply(WorkloadFinished(workload=target), Millis(now))
        decide(now)


def _leaves(node: QuotaNode) -> list[QuotaNode]:
    if not node.children:
        return [node]
    return [leaf for child in node.children for leaf in _leaves(child)]


# ---------------------------------------------------------------- the audit


def test_the_audit_finds_an_admission_below_a_spent_hold_budget() -> None:
    tree = departments_tree()
    dept_a = msgspec.structs.replace(
        tree.children[0], attributes={"usher.io/budgets": "cpu=1h per 1d"}
    )
    tree = msgspec.structs.replace(tree, children=[dept_a, *tree.children[1:]])
    # 60 cpu from 1 s spend the hour by 61 s: an admission at 30 s is fine, at 100 s is not
    # (60 x 99 + 1 x 70 CPU-seconds spent by then).
    log = Log().tree(0, tree).job(1, "user-a/big", 60).admitted(1, "user-a/big", 60)
    log.job(2, "user-a/early", 1).admitted(30, "user-a/early", 1)
    log.job(3, "user-a/late", 1).admitted(100, "user-a/late", 1)
    [found] = invariants.check_log(log.history().items, EngineConfig(), at_end=False)
    assert (found.check, found.node, found.workload) == (
        invariants.ADMITTED_OVER_BUDGET,
        "root/Department-a",
        "user-a/late",
    )
    assert found.message.startswith("1.669 of 1 CPU-hours in the 1 day from 2024-05-01")
