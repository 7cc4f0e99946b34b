"""The quota arbitration rules of the core, without PostgreSQL (docs/admission-rules.md R2, R7).

Property tests: the cap is ``floor(max x rate)``; the shortfall named is on the path, really
short, and the nearest failing node; a request that passes never takes a node above its cap;
the allocation state table is closed and agrees with the release rules. Table-driven cases pin
the exact answers.
"""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import QuotaPath
from usher.core.rules.arbitration import (
    CLAIMING,
    COUNTED,
    CREATED,
    TRANSITIONS,
    AllocationState,
    Change,
    IllegalTransition,
    Load,
    Shortfall,
    UsageKey,
    advance,
    effective_cap,
    first_shortfall,
    group_usage,
    quota_exceeded,
    release_cause,
    transition_refusal,
)

RESOURCES = ("cpu", "gpu", "memory")
CHANGES: tuple[Change, ...] = ("Finished", "Failed", "Deleted", "Preempted", "Suspended")

rates = st.fractions(min_value=Fraction(1, 4), max_value=Fraction(4), max_denominator=20)


@st.composite
def paths(draw: st.DrawFn) -> tuple[list[Load], Fraction]:
    """A path root..leaf of 1-4 nodes, each limiting some resources, with usage in its caps."""
    rate = draw(rates)
    loads = []
    for depth in range(draw(st.integers(1, 4))):
        limits = draw(st.dictionaries(st.sampled_from(RESOURCES), st.integers(0, 100)))
        used = {r: draw(st.integers(0, effective_cap(m, rate))) for r, m in limits.items()}
        for resource in RESOURCES:
            if resource not in limits and draw(st.booleans()):
                used[resource] = draw(st.integers(0, 500))
        name = "/".join(f"n{i}" for i in range(depth + 1))
        loads.append(Load.of_limits(QuotaPath(name), used, limits, rate))
    return loads, rate


requests = st.lists(
    st.tuples(st.sampled_from(RESOURCES), st.integers(0, 120)), unique_by=lambda p: p[0]
).map(sorted)


def short_on(load: Load, resource: str, amount: int) -> bool:
    cap = load.cap.get(resource)
    return amount > 0 and cap is not None and load.used.get(resource, 0) + amount > cap


# ---------------------------------------------------------------------- caps


@given(st.integers(0, 10**12), rates)
def test_cap_is_floor_of_max_times_rate(maximum: int, rate: Fraction) -> None:
    cap = effective_cap(maximum, rate)
    assert cap == math.floor(maximum * rate)
    # With integer usage, fitting under the cap is fitting under max x rate.
    assert cap <= maximum * rate < cap + 1


@pytest.mark.parametrize(
    ("maximum", "rate", "cap"),
    [(60, Fraction(1), 60), (60, Fraction(3, 2), 90), (7, Fraction(1, 2), 3), (0, Fraction(2), 0)],
)
def test_cap_table(maximum: int, rate: Fraction, cap: int) -> None:
    assert effective_cap(maximum, rate) == cap


# ---------------------------------------------------------------------- first shortfall


@given(paths(), requests)
def test_shortfall_is_the_nearest_failing_node(
    path_rate: tuple[list[Load], Fraction], request: list[tuple[str, int]]
) -> None:
    path, _ = path_rate
    short = first_shortfall(path, request)
    failing = [
        (depth, resource)
        for depth, load in enumerate(path)
        for resource, amount in request
        if short_on(load, resource, amount)
    ]
    if short is None:
        assert failing == []
        return
    depths = [load.path for load in path]
    assert short.node in depths
    depth = depths.index(short.node)
    load = path[depth]
    # Really short there, with the node's own numbers...
    assert short.used + short.requested > short.cap
    assert short.cap == load.cap[short.resource]
    assert short.maximum == load.max[short.resource]
    assert short.used == load.used.get(short.resource, 0)
    assert (short.resource, short.requested) in request
    # ...on the deepest failing node, and the first of its resources in request order.
    deepest = max(d for d, _ in failing)
    assert depth == deepest
    assert short.resource == next(r for d, r in failing if d == deepest)


@given(paths(), requests)
def test_a_request_that_passes_never_exceeds_a_cap(
    path_rate: tuple[list[Load], Fraction], request: list[tuple[str, int]]
) -> None:
    path, _ = path_rate
    if first_shortfall(path, request) is not None:
        return
    for load in path:
        for resource, amount in request:
            after = load.used.get(resource, 0) + amount
            cap = load.cap.get(resource)
            assert cap is None or after <= cap


@given(paths(), st.lists(requests, max_size=12))
def test_granting_only_what_passes_keeps_every_node_within_its_cap(
    path_rate: tuple[list[Load], Fraction], batch: list[list[tuple[str, int]]]
) -> None:
    path, rate = path_rate
    for request in batch:
        if first_shortfall(path, request) is None:
            path = [
                Load.of_limits(
                    load.path,
                    {r: load.used.get(r, 0) + dict(request).get(r, 0) for r in RESOURCES},
                    load.max,
                    rate,
                )
                for load in path
            ]
        for load in path:
            for resource, cap in load.cap.items():
                assert load.used.get(resource, 0) <= cap


def node(path: str, used: dict[str, int], maximum: dict[str, int]) -> Load:
    return Load.of_limits(QuotaPath(path), used, maximum, Fraction(1))


TREE = [
    node("root", {"cpu": 90}, {"cpu": 100}),
    node("root/a", {"cpu": 55, "gpu": 1}, {"cpu": 60, "gpu": 2}),
    node("root/a/u", {"cpu": 55, "gpu": 1}, {}),
]


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ([("cpu", 5)], None),
        ([("cpu", 6)], Shortfall(QuotaPath("root/a"), "cpu", 55, 6, 60, 60)),  # nearest, not root
        ([("cpu", 11)], Shortfall(QuotaPath("root/a"), "cpu", 55, 11, 60, 60)),
        ([("cpu", 0), ("gpu", 2)], Shortfall(QuotaPath("root/a"), "gpu", 1, 2, 2, 2)),
        ([("cpu", 6), ("gpu", 2)], Shortfall(QuotaPath("root/a"), "cpu", 55, 6, 60, 60)),
        ([("memory", 10**9)], None),  # limited nowhere
        ([], None),
    ],
)
def test_shortfall_table(request_: list[tuple[str, int]], expected: Shortfall | None) -> None:
    assert first_shortfall(TREE, request_) == expected


def test_only_the_root_short_is_named() -> None:
    path = [node("root", {"cpu": 98}, {"cpu": 100}), node("root/b", {"cpu": 1}, {"cpu": 50})]
    assert first_shortfall(path, [("cpu", 3)]) == Shortfall(
        QuotaPath("root"), "cpu", 98, 3, 100, 100
    )


def test_a_zero_amount_constrains_nothing_even_above_a_shrunk_cap() -> None:
    shrunk = [node("root", {"cpu": 80, "gpu": 0}, {"cpu": 50, "gpu": 4})]
    assert first_shortfall(shrunk, [("cpu", 0), ("gpu", 1)]) is None


def test_quota_exceeded_names_the_shortfall() -> None:
    short = Shortfall(QuotaPath("root/a"), "cpu", 55_000, 6_000, 60_000, 90_000)
    reason = quota_exceeded(short, Fraction(3, 2))
    assert (reason.code, reason.node, reason.resource) == ("QuotaExceeded", "root/a", "cpu")
    assert (reason.used, reason.requested, reason.limit) == (55_000, 6_000, 90_000)
    assert reason.message == "root/a cpu 55 used + 6 requested > max 60 x 1.5"


# ---------------------------------------------------------------------- allocation states

S = AllocationState


def test_transition_table_is_closed_and_ends_released() -> None:
    assert set(TRANSITIONS) == set(S)
    assert all(targets <= set(S) for targets in TRANSITIONS.values())
    assert TRANSITIONS[S.RELEASED] == frozenset()
    assert S.RELEASED not in CREATED
    # Every state reaches released: nothing stays live forever by the table's fault.
    for state in S:
        seen, frontier = {state}, [state]
        while frontier:
            for target in TRANSITIONS[frontier.pop()]:
                if target not in seen:
                    seen.add(target)
                    frontier.append(target)
        assert S.RELEASED in seen
    # No state returns to itself or to where it came from (the life cycle only moves on).
    for source, targets in TRANSITIONS.items():
        assert source not in targets
        assert all(source not in TRANSITIONS[t] for t in targets)


def test_counted_and_claiming_are_live_states() -> None:
    assert set(CLAIMING) <= COUNTED
    assert S.RELEASED not in COUNTED and S.PREEMPTING not in COUNTED
    assert CREATED <= COUNTED


@given(st.sampled_from([None, *S]), st.sampled_from(list(S)))
def test_transition_refusal_agrees_with_the_table(
    source: AllocationState | None, target: AllocationState
) -> None:
    allowed = target in CREATED if source is None else target in TRANSITIONS[source]
    why = transition_refusal(source, target)
    assert (why is None) == allowed
    if allowed:
        assert advance(source, target) is target
    else:
        with pytest.raises(IllegalTransition) as raised:
            advance(source, target)
        assert str(raised.value) == why
        assert (raised.value.source, raised.value.target) == (source, target)


# Every move of the life cycle, written out: a row of this table that the code disagrees with
# is a change of R7-R8 (and of the ledger's writes), never an accident.
LEGAL: frozenset[tuple[AllocationState | None, AllocationState]] = frozenset(
    {
        (None, S.ADMITTED),  # a grant (R2, R8)
        (None, S.HELD),  # a preemptor's hold (R7)
        (S.ADMITTED, S.PREEMPTING),  # a victim, or a requeue / drain stop (R10, R15)
        (S.ADMITTED, S.RELEASED),  # finished, failed or deleted
        (S.HELD, S.ADMITTED),  # its last victim seen stopped
        (S.HELD, S.RELEASED),  # ended while held
        (S.PREEMPTING, S.RELEASED),  # seen stopped
        (S.RESERVED, S.RELEASED),  # a row from before holds existed
    }
)


@pytest.mark.parametrize("source", [None, *S])
@pytest.mark.parametrize("target", list(S))
def test_the_transition_table_is_exactly_the_life_cycle(
    source: AllocationState | None, target: AllocationState
) -> None:
    if (source, target) in LEGAL:
        assert advance(source, target) is target
        return
    with pytest.raises(IllegalTransition) as raised:
        advance(source, target)
    assert (raised.value.source, raised.value.target) == (source, target)
    assert str(target) in str(raised.value) or str(raised.value) == f"{source} is final"


@pytest.mark.parametrize(
    "steps",
    [
        [None, S.ADMITTED, S.RELEASED],  # granted, then finished
        [None, S.ADMITTED, S.PREEMPTING, S.RELEASED],  # a victim, seen stopped
        [None, S.HELD, S.ADMITTED, S.RELEASED],  # a preemptor, its victims stopped
        [None, S.HELD, S.RELEASED],  # a preemptor that finished while held
        [S.RESERVED, S.RELEASED],  # a row written before holds existed
    ],
)
def test_life_cycles_the_ledger_walks(steps: list[AllocationState | None]) -> None:
    for source, target in pairwise(steps):
        assert target is not None
        assert transition_refusal(source, target) is None


@pytest.mark.parametrize(
    ("source", "target", "why"),
    [
        (None, S.PREEMPTING, "an allocation starts admitted or held, not preempting"),
        (S.RELEASED, S.ADMITTED, "released is final"),
        (S.PREEMPTING, S.ADMITTED, "preempting may become released, not admitted"),
        (S.HELD, S.PREEMPTING, "held may become admitted or released, not preempting"),
    ],
)
def test_transition_refusals_say_why(
    source: AllocationState | None, target: AllocationState, why: str
) -> None:
    assert transition_refusal(source, target) == why


# ---------------------------------------------------------------------- release rules


@pytest.mark.parametrize(
    ("state", "change", "before", "cause"),
    [
        (S.ADMITTED, "Finished", False, "Finished"),
        (S.ADMITTED, "Failed", False, "Failed"),
        (S.ADMITTED, "Deleted", False, "Deleted"),
        (S.ADMITTED, "Suspended", False, None),  # maybe not unsuspended yet
        (S.HELD, "Finished", False, "Finished"),
        (S.HELD, "Suspended", False, None),  # suspended until admitted
        (S.RESERVED, "Deleted", False, "Deleted"),
        (S.PREEMPTING, "Suspended", False, "Preempted"),  # its pods stopped
        (S.PREEMPTING, "Suspended", True, None),  # seen suspended before it was preempted
        (S.PREEMPTING, "Finished", False, "Preempted"),
        (S.PREEMPTING, "Failed", True, "Preempted"),
        (S.PREEMPTING, "Deleted", False, "Deleted"),
        (S.RELEASED, "Deleted", False, None),
    ],
)
def test_release_cause_table(
    state: AllocationState, change: Change, before: bool, cause: str | None
) -> None:
    assert release_cause(state, change, before_preemption=before) == cause


@given(st.sampled_from(list(S)), st.sampled_from(CHANGES), st.booleans())
def test_a_release_is_always_an_allowed_transition(
    state: AllocationState, change: Change, before: bool
) -> None:
    cause = release_cause(state, change, before_preemption=before)
    if cause is not None:
        assert transition_refusal(state, S.RELEASED) is None
    if state == S.PREEMPTING and cause is not None:
        # A victim's quota went to its preemptor: never reported as finished by itself.
        assert cause in ("Preempted", "Deleted")


# ---------------------------------------------------------------------- preemption groups

counts = st.dictionaries(
    st.tuples(st.sampled_from(["root", "root/a", "root/b"]), st.sampled_from(RESOURCES)),
    st.integers(1, 50),
)


@given(st.none() | counts, st.lists(counts, max_size=4))
def test_group_counts_the_larger_of_victims_and_hold(
    hold: dict[UsageKey, int] | None, victims: list[dict[UsageKey, int]]
) -> None:
    got = group_usage(hold, victims)
    keys = set(hold or {}) | {k for v in victims for k in v}
    assert list(got) == sorted(keys)
    for key in keys:
        running = sum(v.get(key, 0) for v in victims)
        assert got[key] == max(running, (hold or {}).get(key, 0))


def test_group_usage_table() -> None:
    hold = {("root", "cpu"): 20, ("root/a", "cpu"): 20}
    victims = [{("root", "cpu"): 30, ("root/b", "cpu"): 30}]
    assert group_usage(hold, victims) == {
        ("root", "cpu"): 30,  # carved out of the victim where their paths meet
        ("root/a", "cpu"): 20,
        ("root/b", "cpu"): 30,
    }
