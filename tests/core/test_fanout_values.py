"""``usher.core.values.fanout``, table by table and under hostile generated input: days and
ranges are read strictly and bounded before anything is enumerated, weekdays and calendars
select the right days, every value of ``VAR=v1,v2`` gets a distinct name-safe tag, and a job
name never passes Kubernetes' 63 characters."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders.hostile import Hostile, bad_values, hostile_values
from usher.core.model.errors import ValueRefused
from usher.core.values import fanout
from usher.core.values.names import is_dns_label

P = "--opt"


def _refused(parse: Any, *args: Any, **kwargs: Any) -> ValueRefused:
    with pytest.raises(ValueRefused) as refused:
        parse(*args, **kwargs)
    return refused.value


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2026-01-01", date(2026, 1, 1)),
        ("2024-02-29", date(2024, 2, 29)),
        ("0001-01-01", date(1, 1, 1)),
    ],
)
def test_a_day_is_read_as_written(raw: str, expected: date) -> None:
    assert fanout.day(raw, P) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "2026-1-1",
        "2026/01/01",
        " 2026-01-01",
        "2026-01-01 ",
        "2025-02-29",
        "2026-13-01",
        "0000-01-01",
        "\uff12026-01-01",
        "20260101",
        "",
        20260101,
        None,
    ],
)
def test_anything_but_yyyy_mm_dd_of_a_real_day_is_refused(raw: object) -> None:
    refused = _refused(fanout.day, raw, P)
    assert refused.path == P and P in refused.message


def test_a_range_includes_both_ends() -> None:
    first, last = fanout.day_range("2026-01-01..2026-03-31", P)
    assert (first, last) == (date(2026, 1, 1), date(2026, 3, 31))
    assert len(fanout.days(first, last, P).values) == 90


@pytest.mark.parametrize(
    ("raw", "code", "says"),
    [
        ("2026-03-31..2026-01-01", "invalid-value", "ends before it starts"),
        ("2026-01-01", "invalid-value", "FIRST..LAST"),
        ("2026-01-01..2026-01-02..2026-01-03", "invalid-value", "FIRST..LAST"),
        ("2000-01-01..2030-01-01", "out-of-range", "more than 10000 jobs"),
        ("0001-01-01..9999-12-31", "out-of-range", "more than 10000 jobs"),
        ("2026-01-01..2026-02-30", "invalid-value", "last day"),
    ],
)
def test_bad_or_unbounded_ranges_are_refused(raw: str, code: str, says: str) -> None:
    refused = _refused(fanout.day_range, raw, P)
    assert refused.code == code and says in refused.message


def test_the_widest_range_is_exactly_the_bound() -> None:
    first = date(2000, 1, 1)
    last = first + timedelta(days=fanout.MAX_FAN_OUT - 1)
    assert fanout.day_range(f"{first}..{last}", P) == (first, last)
    over = last + timedelta(days=1)
    assert _refused(fanout.day_range, f"{first}..{over}", P).code == "out-of-range"


def test_weekdays_skip_saturdays_and_sundays() -> None:
    # 2026-01-01 is a Thursday: Thu, Fri, (Sat, Sun), Mon ... Fri 9th
    chosen = fanout.days(date(2026, 1, 1), date(2026, 1, 11), P, weekdays=True)
    assert chosen.values == tuple(f"2026-01-{d:02d}" for d in (1, 2, 5, 6, 7, 8, 9))
    assert chosen.tags == chosen.values and chosen.variable == "DAY"


def test_a_calendar_keeps_only_its_days_and_says_which_line_is_wrong() -> None:
    text = "# trading days\n2026-01-02\n\n2026-01-05  # Monday\n2027-01-01\n"
    only = fanout.calendar(text, "cal.txt")
    chosen = fanout.days(date(2026, 1, 1), date(2026, 1, 31), P, only=only, weekdays=True)
    assert chosen.values == ("2026-01-02", "2026-01-05")
    refused = _refused(fanout.calendar, "2026-01-02\nJan 5\n", "cal.txt")
    assert refused.path == "cal.txt:2"


def test_no_day_left_is_refused() -> None:
    saturday, sunday = date(2026, 1, 3), date(2026, 1, 4)
    refused = _refused(fanout.days, saturday, sunday, P, weekdays=True)
    assert "no day" in refused.message


def test_for_each_reads_the_variable_and_every_value_in_order() -> None:
    each = fanout.for_each("LR=0.1,0.01,1e-3", P)
    assert each.variable == "LR"
    assert each.values == ("0.1", "0.01", "1e-3")
    assert each.tags == ("0-1", "0-01", "1e-3")


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("0.1,0.2", "VAR=v1,v2"),
        ("1LR=1,2", "environment variable name"),
        ("L R=1,2", "environment variable name"),
        ("LR=1,,2", "printable"),
        ("LR=a,a", "given twice"),
        ("LR=A,a", "same job"),
        ("LR=0.1,0-1", "same job"),
        ("LR=--", "no letter or digit"),
        ("LR=a\nb", "printable"),
        ("LR=" + ",".join(str(i) for i in range(fanout.MAX_FAN_OUT + 1)), "more than 10000"),
    ],
)
def test_bad_value_lists_are_refused(raw: str, says: str) -> None:
    assert says in _refused(fanout.for_each, raw, P).message


def test_a_member_name_fits_63_characters_or_says_how_short_the_base_must_be() -> None:
    assert fanout.member_name("backtest", "2026-01-05", P) == "backtest-2026-01-05"
    refused = _refused(fanout.member_name, "b" * 53, "2026-01-05", P)
    assert "at most 52" in refused.message


@given(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=20))
def test_every_accepted_value_list_has_distinct_dns_safe_tags(values: list[str]) -> None:
    """Hostile values (any Unicode, commas, controls): either refused with a ``ValueRefused``,
    or each value kept exactly, with distinct tags that make valid job names."""
    raw = "V=" + ",".join(values)
    try:
        each = fanout.for_each(raw, P)
    except ValueRefused:
        return
    assert ",".join(each.values) == raw[2:]
    assert len(set(each.tags)) == len(each.tags) == len(each.values)
    for tag in each.tags:
        assert is_dns_label(fanout.member_name("job", tag, P))


@given(st.dates(), st.integers(min_value=0, max_value=3 * fanout.MAX_FAN_OUT))
def test_every_range_is_bounded_and_listed_in_order(first: date, span: int) -> None:
    try:
        last = first + timedelta(days=span)
    except OverflowError:
        return
    try:
        start, end = fanout.day_range(f"{first.isoformat()}..{last.isoformat()}", P)
    except ValueRefused as refused:
        assert span >= fanout.MAX_FAN_OUT or first.year < 1000 or last.year < 1000
        assert refused.path == P
        return
    listed = fanout.days(start, end, P).values
    assert len(listed) == span + 1 <= fanout.MAX_FAN_OUT
    assert list(listed) == sorted(listed) and listed[0] == first.isoformat()


@pytest.mark.parametrize("hostile", bad_values("group-name"), ids=lambda hostile: hostile.label)
def test_a_group_name_refuses_every_hostile_value_naming_the_option(hostile: Hostile) -> None:
    with pytest.raises(ValueRefused) as refused:
        fanout.group(hostile.value, "--group")
    assert refused.value.errors[0].path == "--group"


@given(hostile_values("group-name"))
def test_a_group_name_refuses_generated_hostile_values(raw: object) -> None:
    with pytest.raises(ValueRefused):
        fanout.group(raw, "--group")


@pytest.mark.parametrize("raw", ["a,b", "a!=b", "a b", "a=b", "usher.io/x", "A", "-a"])
def test_a_group_name_is_one_label_value_that_selects_nothing_else(raw: str) -> None:
    """It is put into a label selector (``usher.io/group=<name>``): no separator, operator or
    space may pass, or a selector could reach other jobs."""
    with pytest.raises(ValueRefused):
        fanout.group(raw, "--group")
    assert fanout.group("day-2026", "--group") == "day-2026"
