"""The parsers of ``usher.core.values`` and the registry, table by table: good values, bad
values and the edges of every bound; and the reference page is the registry rendered."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from usher.core.model.errors import ValueRefused
from usher.core.tree.budget_spec import BUDGET_ACTIONS
from usher.core.values import names, numbers, quantities, text
from usher.core.values.registry import SETTINGS, Setting, setting
from usher.core.values.render import PAGE_PATH, render_reference
from usher.core.values.shown import shown

REPO = Path(__file__).resolve().parents[2]
P = "f"


def _refused(parse: Any, raw: object, *args: Any, **kwargs: Any) -> ValueRefused:
    with pytest.raises(ValueRefused) as refused:
        parse(raw, P, *args, **kwargs)
    assert refused.value.path == P
    assert refused.value.errors[0].path == P
    return refused.value


@pytest.mark.parametrize(
    ("raw", "low", "high", "expected"),
    [
        ("0", 0, 100, 0),
        ("100", 0, 100, 100),
        ("007", 0, 100, 7),
        ("1", 1, 1, 1),
        ("2592000", 0, numbers.MAX_SECONDS, 2_592_000),
    ],
)
def test_whole_numbers_within_bounds_are_read(raw: str, low: int, high: int, expected: int) -> None:
    assert numbers.whole(raw, P, low=low, high=high) == expected


@pytest.mark.parametrize(
    ("raw", "low", "high", "code"),
    [
        ("101", 0, 100, "out-of-range"),
        ("0", 1, 100, "out-of-range"),
        ("2592001", 0, numbers.MAX_SECONDS, "out-of-range"),
        ("9" * 21, 0, 100, "too-long"),
        ("9" * 100_000, 0, 100, "too-long"),
        ("0" * 21, 0, 100, "too-long"),
        ("-1", 0, 100, "invalid-value"),
        ("+1", 0, 100, "invalid-value"),
        (" 5 ", 0, 100, "invalid-value"),
        ("5 ", 0, 100, "invalid-value"),
        ("\uff11\uff12", 0, 100, "invalid-value"),
        ("\u0661", 0, 100, "invalid-value"),
        ("\u00b2", 0, 100, "invalid-value"),
        ("1.5", 0, 100, "invalid-value"),
        ("1e3", 0, 10_000, "invalid-value"),
        ("nan", 0, 100, "invalid-value"),
        ("inf", 0, 100, "invalid-value"),
        ("", 0, 100, "invalid-value"),
        ("1_0", 0, 100, "invalid-value"),
        (5, 0, 100, "invalid-type"),
        (True, 0, 100, "invalid-type"),
        (None, 0, 100, "invalid-type"),
    ],
)
def test_bad_whole_numbers_are_refused_naming_the_field(
    raw: object, low: int, high: int, code: str
) -> None:
    refused = _refused(numbers.whole, raw, low=low, high=high)
    assert refused.code == code
    assert f"from {low} to {high}" in refused.message


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", Fraction(1)),
        ("1.5", Fraction(3, 2)),
        ("1.125", Fraction(9, 8)),
        ("100", Fraction(100)),
    ],
)
def test_factors_are_exact_decimals(raw: str, expected: Fraction) -> None:
    assert numbers.factor(raw, P) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "0.999",
        "100.001",
        "1.1234",
        "nan",
        "inf",
        "1e300",
        "1.",
        ".5",
        "1,5",
        " 1.5",
        "\u0661.\u0665",
    ],
)
def test_bad_factors_are_refused(raw: str) -> None:
    _refused(numbers.factor, raw)


@pytest.mark.parametrize(
    ("raw", "good"),
    [("0", True), ("1.5", True), ("2592000", True), ("2592000.001", False), ("inf", False)],
)
def test_durations_are_bounded_seconds(raw: str, good: bool) -> None:
    if good:
        assert numbers.duration(raw, P) == Fraction(raw)
    else:
        _refused(numbers.duration, raw)


@pytest.mark.parametrize(
    ("raw", "resource", "expected"),
    [("500m", "cpu", 500), ("4Gi", "memory", 4 * 2**30), ("4Ei", "memory", 2**62)],
)
def test_quantities_are_read_by_the_one_quantity_parser(
    raw: str, resource: str, expected: int
) -> None:
    assert quantities.quantity(raw, P, resource) == expected


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("4Ei1", "invalid-quantity"),
        ("5Ei", "out-of-range"),
        (" 4Gi", "invalid-value"),
        ("\uff11\uff12", "invalid-quantity"),
        ("nan", "invalid-quantity"),
        ("inf", "invalid-quantity"),
        ("1e300", "invalid-quantity"),
        ("-1", "invalid-quantity"),
        (4, "invalid-type"),
    ],
)
def test_bad_quantities_are_refused(raw: object, code: str) -> None:
    assert _refused(quantities.quantity, raw, "memory").code == code


def test_a_zero_quantity_is_refused_where_zero_is_not_allowed() -> None:
    assert quantities.quantity("0", P, "memory") == 0
    assert _refused(quantities.quantity, "0", "memory", allow_zero=False).code == "out-of-range"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("a100", ["a100"]), ("a100,h100", ["a100", "h100"]), ("h100, a100", ["h100", "a100"])],
)
def test_zone_lists_are_read_in_order(raw: str, expected: list[str]) -> None:
    assert names.zone_names(raw, P) == expected


@pytest.mark.parametrize(
    "raw",
    ["", "a,,b", "a,a", "A100", "<script>", "NaN", "a_b", "-a", "a-", "z" * 64, "z" * 100_000,
     ",".join(f"z{i}" for i in range(33)), "a\tb", 5],
)  # fmt: skip
def test_bad_zone_lists_are_refused(raw: object) -> None:
    refused = _refused(names.zone_names, raw)
    assert len(refused.message) < 400  # a 100 KB value is quoted cut short


@pytest.mark.parametrize(
    ("parse", "raw", "good"),
    [
        (names.dns_label, "z" * 63, True),
        (names.dns_label, "z" * 64, False),
        (names.dns_label, "a.b", False),
        (names.dns_subdomain, "a.b", True),
        (names.dns_subdomain, "a" * 253, True),
        (names.dns_subdomain, "a" * 254, False),
        (names.dns_subdomain, "a..b", False),
        (names.zone_name, "default", True),
        (names.zone_name, "Default", False),
    ],
)
def test_object_names_follow_dns_1123_with_their_lengths(parse: Any, raw: str, good: bool) -> None:
    if good:
        assert parse(raw, P) == raw
    else:
        _refused(parse, raw)


@pytest.mark.parametrize(
    ("parse", "raw", "args", "good"),
    [
        (text.boolean, "true", (), True),
        (text.boolean, "false", (), True),
        (text.boolean, "True", (), False),
        (text.boolean, " true", (), False),
        (text.boolean, True, (), False),
        (text.choice, "hold", (("hold", "drain"),), True),
        (text.choice, "Hold", (("hold", "drain"),), False),
        (text.free_text, "maintenance until Monday", (), True),
        (text.free_text, "x" * 1025, (), False),
        (text.free_text, "a\nb", (), False),
        (text.free_text, "\x00", (), False),
        (text.bounded_text, "cpu=1h per month", (), True),
        (text.bounded_text, "x" * 4097, (), False),
    ],
)
def test_words_and_text(parse: Any, raw: object, args: tuple[Any, ...], good: bool) -> None:
    if good:
        assert parse(raw, P, *args) in (raw, raw == "true")
    else:
        _refused(parse, raw, *args)


def test_a_refused_value_is_quoted_cut_short() -> None:
    assert shown("a" * 100_000) == f"{'a' * 40!r}... (100000 characters)"
    assert shown(10**5000) == "an integer of 16610 bits"
    assert shown(["x"] * 10) == "list"


# ------------------------------------------------------------------------------- registry


def test_the_registry_has_one_entry_per_key_and_finds_each() -> None:
    keys = [entry.key for entry in SETTINGS]
    assert len(keys) == len(set(keys))
    assert all(key.startswith("usher.io/") for key in keys)
    for entry in SETTINGS:
        assert setting(entry.key) is entry
    with pytest.raises(KeyError):
        setting("usher.io/unknown")


@pytest.mark.parametrize("entry", SETTINGS, ids=lambda s: s.key)
def test_every_example_and_default_is_accepted_by_its_own_parser(entry: Setting[Any]) -> None:
    entry.check(entry.example, "attributes")
    if entry.default is not None:
        entry.check(entry.default, "attributes")
    assert entry.rule and entry.summary and entry.bounds


def test_read_never_raises_and_gives_none_for_a_refused_value() -> None:
    limit = setting("usher.io/retry-limit")
    assert limit.read({"usher.io/retry-limit": "9" * 100_000}) is None
    assert limit.read({"usher.io/retry-limit": "99999999999999999999"}) is None
    assert limit.read({"usher.io/retry-limit": "101"}) is None
    assert limit.read({"usher.io/retry-limit": "100"}) == 100
    assert limit.read({}) is None


def test_the_budget_actions_are_the_budget_module_s() -> None:
    assert setting("usher.io/budget-action").check("min-only", "a") == "min-only"
    for action in BUDGET_ACTIONS:
        setting("usher.io/budget-action").check(action, "a")


def test_the_committed_reference_page_is_the_registry_rendered() -> None:
    on_disk = (REPO / PAGE_PATH).read_text(encoding="utf-8")
    assert on_disk == render_reference(), "run `make reference`"
