"""Fair share with memory (F1): the decay arithmetic by table, its properties (never negative,
monotone between events, the same log gives the same decisions, a snapshot carries it), the
fair-weight attribute, and ``what-if`` comparing half-lives on a recorded history."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import Millis, QuotaNode, QuotaPath, QuotaTreeApplied
from tests.builders.events import CORE, observed
from tests.builders.generated import Op, configs, ops, trees
from tests.builders.log import B, Log
from tests.builders.trees import two_leaf_tree
from tests.core.test_properties import play
from tests.core.test_snapshot import Step, _check_split, histories, snapshot_configs
from usher.core.engine.facade import Engine
from usher.core.history import whatif
from usher.core.model.config import EngineConfig
from usher.core.rules import fairshare
from usher.core.rules.fairshare import FairBook, Running, accrued, decayed_usage
from usher.core.tree.quota_tree import validate_tree

H = 3_600_000  # one hour, in ms
LEAF = QuotaPath("root/A")
LN2 = 0.6931471805599453  # the table's expectations, written by hand


def close_to(value: Decimal, expected: float | Decimal, digits: int = 12) -> bool:
    """Equal to ``digits`` significant digits (the table's numbers are written rounded)."""
    return abs(value - Decimal(expected)) <= abs(Decimal(expected)) * Decimal(10) ** -digits


@pytest.mark.parametrize(
    ("elapsed", "expected"),
    [
        (0, Decimal(1)),
        (-5, Decimal(1)),  # no time: no decay
        (H, Decimal("0.5")),  # whole half-lives are exact powers of two
        (2 * H, Decimal("0.25")),
        (10 * H, Decimal(1) / Decimal(1024)),
        (H // 2, Decimal("0.7071067811865475244008443621048490")),  # 2 ** -0.5
        (3 * H // 2, Decimal("0.3535533905932737622004221810524245")),
        (H // 4, Decimal("0.8408964152537145430311254762332149")),  # 2 ** -0.25
    ],
)
def test_decay_halves_every_half_life(elapsed: int, expected: Decimal) -> None:
    assert fairshare.decay(elapsed, H) == expected


@pytest.mark.parametrize(
    ("amount", "start", "end", "expected"),
    [
        (1, 0, H, 0.5 * H / LN2),  # 1 x H / ln 2 x (1 - 1/2)
        (1, 0, 2 * H, 0.75 * H / LN2),
        (10, 0, H, 5 * H / LN2),
        (10, 5 * H, 6 * H, 5 * H / LN2),  # only the length counts, as seen at its end
        (10, H, H, 0),  # an empty interval accrues nothing
        (0, 0, H, 0),
    ],
)
def test_accrued_is_the_decayed_integral_seen_at_the_end(
    amount: int, start: int, end: int, expected: float
) -> None:
    value = accrued(amount, start, end, H)
    assert value == 0 if expected == 0 else close_to(value, expected)


@pytest.mark.parametrize(
    ("now", "factor"),
    [
        (H, Decimal(1)),
        (2 * H, Decimal("0.5")),  # half one half-life on
        (3 * H, Decimal("0.25")),  # a quarter two half-lives on
        (3 * H // 2, Decimal("0.7071067811865475244008443621048490")),
    ],
)
def test_closed_usage_halves_every_half_life(now: int, factor: Decimal) -> None:
    book = FairBook()
    book.close(LEAF, {"cpu": 10}, 0, H, H)
    at_close = accrued(10, 0, H, H)
    assert close_to(decayed_usage(book, LEAF, [], Millis(now), H)["cpu"], at_close * factor, 25)


def test_running_work_counts_as_if_it_closed_now() -> None:
    closed = FairBook()
    closed.close(LEAF, {"cpu": 10}, 0, 3 * H // 2, H)
    running = [Running(LEAF, {"cpu": 10}, 0)]
    assert decayed_usage(FairBook(), LEAF, running, Millis(3 * H // 2), H) == decayed_usage(
        closed, LEAF, [], Millis(3 * H // 2), H
    )


def test_a_close_decays_the_book_to_its_instant_and_adds_the_interval() -> None:
    book = FairBook()
    book.close(LEAF, {"cpu": 4}, 0, H, H)
    first = book.closed[LEAF][1]["cpu"]
    book.close(LEAF, {"cpu": 6}, H, 3 * H, H)
    at, values = book.closed[LEAF]
    assert at == 3 * H
    c = fairshare.ARITHMETIC  # the test's own arithmetic in F1's context, not the thread's
    assert values["cpu"] == c.add(c.divide(first, 4), accrued(6, H, 3 * H, H))


@pytest.mark.parametrize(
    ("usage", "weight", "expected"),
    [
        ({"cpu": Decimal(50)}, 1, Decimal("0.5")),
        ({"cpu": Decimal(50)}, 2, Decimal("0.25")),
        ({"cpu": Decimal(10), "memory": Decimal(60)}, 1, Decimal("0.6")),  # dominant: memory
        ({"nvidia.com/gpu": Decimal(9)}, 1, Decimal(0)),  # the root names no gpu
        ({}, 1, Decimal(0)),
    ],
)
def test_fair_key_is_the_dominant_decayed_share_per_weight(
    usage: dict[str, Decimal], weight: int, expected: Decimal
) -> None:
    assert fairshare.fair_key(usage, {"cpu": 100, "memory": 100}, weight) == expected


@pytest.mark.parametrize(
    ("value", "weight", "refused"),
    [("2", 2, False), ("1000000", 1_000_000, False), ("0", 5, True), ("1.5", 5, True)],
)
def test_fair_weight_is_a_whole_number_inherited_down_the_tree(
    value: str, weight: int, refused: bool
) -> None:
    attributes = {fairshare.FAIR_WEIGHT_ATTRIBUTE: value}
    assert fairshare.fair_weight(attributes, 5) == weight
    tree = QuotaNode(
        name="root",
        min={"cpu": 10 * CORE},
        max={"cpu": 10 * CORE},
        attributes=attributes,
        children=[QuotaNode(name="A", max={"cpu": 10 * CORE}, namespaces=["a"])],
    )
    errors = validate_tree(tree)
    assert bool(errors) == refused
    assert all(fairshare.FAIR_WEIGHT_ATTRIBUTE in error.path for error in errors)
    if not refused:
        engine = Engine(EngineConfig(half_life_ms=H))
        engine.apply(QuotaTreeApplied(root=tree), Millis(0))
        assert engine.state.tree.fair_weights[QuotaPath("root/A")] == weight  # inherited


intervals = st.lists(
    st.tuples(st.integers(0, 50), st.integers(0, 10 * H), st.integers(0, 10 * H)),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(intervals, intervals, st.integers(1, 5 * H), st.integers(0, 10 * H), st.integers(0, H))
def test_decayed_usage_is_never_negative_and_monotone_between_events(
    closed: list[tuple[int, int, int]],
    opened: list[tuple[int, int, int]],
    half_life: int,
    now: int,
    later: int,
) -> None:
    book = FairBook()
    end_of_book = 0
    for amount, start, length in sorted(closed, key=lambda c: c[1] + c[2]):
        book.close(LEAF, {"cpu": amount}, start, start + length, half_life)
        end_of_book = max(end_of_book, start + length)
    at = Millis(max(now, end_of_book))
    running = [Running(LEAF, {"cpu": amount}, min(start, at)) for amount, start, _ in opened]

    def usage(when: int, work: list[Running], kept: FairBook = book) -> Decimal:
        return decayed_usage(kept, LEAF, work, Millis(when), half_life).get("cpu", Decimal(0))

    now_, then = usage(at, running), usage(at + later, running)
    assert now_ >= 0 and then >= 0
    # Between events the same work runs: usage moves one way, toward the work's steady state
    # (amount x H / ln 2), never past it.
    total = sum((amount for amount, _, _ in opened), 0)
    steady = fairshare.ARITHMETIC.multiply(Decimal(total), fairshare.time_constant(half_life))
    if now_ <= steady:
        assert now_ <= then <= steady
    else:
        assert now_ >= then >= steady
    # Nothing running: what was used only fades. Only running (an empty book): only grows.
    assert usage(at + later, []) <= usage(at, [])
    assert usage(at + later, running, FairBook()) >= usage(at, running, FairBook()) >= 0


fair_configs = st.builds(
    dataclasses.replace, configs, half_life_ms=st.sampled_from([1000, 2500, 7000])
)


@settings(max_examples=100, deadline=None)
@given(fair_configs, trees(), ops)
def test_the_same_log_gives_the_same_decisions(
    config: EngineConfig, tree: QuotaNode, stream: list[Op]
) -> None:

    def fresh_offers(engine: Engine, _made: object) -> None:
        assert engine.stale_offer_keys() == []  # kept keys agree with the clock (F1)

    first = play(config, tree, [*stream, Op("pass", 0)], fresh_offers)
    second = play(config, tree, [*stream, Op("pass", 0)])
    assert msgspec.msgpack.encode(first) == msgspec.msgpack.encode(second)


@settings(max_examples=60, deadline=None)
@given(snapshot_configs, trees(), trees(), histories, st.data())
def test_a_snapshot_carries_the_fair_book(
    config: EngineConfig,
    tree: QuotaNode,
    alternative: QuotaNode,
    history: list[Op | Step],
    data: st.DataObject,
) -> None:
    config = dataclasses.replace(config, half_life_ms=data.draw(st.sampled_from([1000, 4000])))
    history = [*history, Step("pass")]
    split = data.draw(st.integers(len(history) // 2, len(history)), label="split")
    _check_split(config, tree, alternative, history, split)


def _heavy_then_tie() -> Log:
    """As the services record it: Department-a ran 70 cpu for a day beside its 10,
    Department-b ran 10; both borrow (min 0) and their shares tie, so R3 alone offers
    user-a/tie first (by name); Department-a's memory hands the tie to user-c/tie."""
    tree = two_leaf_tree(
        ("user-a",), ("user-c",), names=("Department-a", "Department-b"), a_min=0, b_min=0
    )
    day = 86_400
    return (
        Log()
        .tree(0, tree)
        .job(1, "user-a/base", 10)
        .job(1, "user-c/base", 10)
        .job(1, "user-a/heavy", 70)
        .admitted(1.1, "user-a/base", 10)
        .admitted(1.1, "user-c/base", 10, B)
        .admitted(1.1, "user-a/heavy", 70)
        .finished(day, "user-a/heavy")
        .released(day + 0.1, "user-a/heavy", 70, "Finished")
        .job(day + 1, "user-a/tie", 80)
        .job(day + 1, "user-c/tie", 80)
    )


def test_what_if_compares_half_lives_on_recorded_history() -> None:
    spec = whatif.WhatIfSpec(
        baseline=whatif.Variant(config=EngineConfig()),
        changed=whatif.Variant(config=EngineConfig(half_life_ms=H)),
    )
    report = whatif.what_if(_heavy_then_tie().history(), spec)
    admitted = {
        (diff.workload, diff.baseline_at is not None, diff.whatif_at is not None)
        for diff in report.differences
        if diff.action == "admit"
    }
    assert admitted == {("user-a/tie", True, False), ("user-c/tie", False, True)}
    assert report.whatif.half_life_s == 3600 and report.baseline.half_life_s is None
    assert "fair-share half-life 3600s" in whatif.render_whatif_table(report)


def test_what_if_with_fair_share_off_on_both_sides_changes_nothing() -> None:
    spec = whatif.WhatIfSpec(
        baseline=whatif.Variant(config=EngineConfig()),
        changed=whatif.Variant(config=EngineConfig()),
    )
    assert whatif.what_if(_heavy_then_tie().history(), spec).differences == []


def test_a_borrowing_leaf_offer_follows_the_clock_even_from_zero_usage() -> None:
    """Work admitted now has accrued nothing yet (key 0), but will: the leaf's kept offer must
    be refreshed as time passes, or it would keep the key of the instant it was admitted."""
    tree = two_leaf_tree(("a1",), ("b1",), a_min=0, b_min=0, total=10, a_max=10, b_max=10)
    engine = Engine(EngineConfig(half_life_ms=H))
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    engine.apply(observed("a1", "one", 5), Millis(0))
    engine.apply(observed("a1", "two", 10), Millis(0))
    assert [d.workload for d in engine.decide(Millis(0))] == ["a1/one"]
    assert engine.decide(Millis(0)) == []  # A's offer is kept as of 0: nothing accrued yet
    assert engine.decide(Millis(H)) == []
    assert engine.stale_offer_keys() == []
    assert engine.fair_key(engine.state.tree.nodes[QuotaPath("root/A")], 1) > 0


@pytest.mark.parametrize(
    ("key", "text"),
    [
        (0, "0.000 root-hours"),
        (4_154_256, "1.154 root-hours"),  # 3 decimals from a root-hour up, as before
        (1_800_000, "0.500 root-hours"),
        (44_444, "0.0123 root-hours"),  # 3 significant digits below a tenth
        (21_600, "0.00600 root-hours"),
        (1, "2.78e-7 root-hours"),  # scientific below a thousandth
    ],
)
def test_a_key_prints_in_root_hours_to_three_significant_digits(key: int, text: str) -> None:
    assert fairshare.format_key(key) == text


def test_two_small_keys_never_print_the_same() -> None:
    """The demo's two teams at a small scale: the third decimal alone showed 0.000 for both."""
    small = [fairshare.format_key(key) for key in (24_000, 8_000, 7_000, 500, 400)]
    assert len(set(small)) == len(small)
