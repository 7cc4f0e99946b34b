"""Kubernetes quantities parse exactly into canonical integers and format back."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import FieldError
from usher.core.model.errors import InputError, QuantityError
from usher.core.model.quantity import (
    MAX_CANONICAL,
    collect_resources,
    format_quantity,
    parse_quantity,
    parse_resources,
)

GI = 2**30


@pytest.mark.parametrize(
    ("value", "resource", "expected"),
    [
        pytest.param("1.5", "cpu", 1500, id="cpu-decimal-cores"),
        pytest.param("500m", "cpu", 500, id="cpu-millicores"),
        pytest.param("100", "cpu", 100_000, id="cpu-whole-cores"),
        pytest.param(100, "cpu", 100_000, id="cpu-yaml-int"),
        pytest.param(1.5, "cpu", 1500, id="cpu-yaml-float"),
        pytest.param(0.1, "cpu", 100, id="cpu-yaml-float-not-binary-exact"),
        pytest.param("0", "cpu", 0, id="cpu-zero"),
        pytest.param("-0", "cpu", 0, id="cpu-negative-zero-is-zero"),
        pytest.param("+2", "cpu", 2000, id="cpu-explicit-plus"),
        pytest.param(".5", "cpu", 500, id="cpu-leading-dot"),
        pytest.param("2.", "cpu", 2000, id="cpu-trailing-dot"),
        pytest.param("1.5e-3", "cpu", 2, id="cpu-exponent-rounds-up"),
        pytest.param("0.0001", "cpu", 1, id="cpu-sub-millicore-rounds-up"),
        pytest.param("1001m", "cpu", 1001, id="cpu-odd-millicores"),
        pytest.param("250000u", "cpu", 250, id="cpu-micro"),
        pytest.param("1n", "cpu", 1, id="cpu-nano-rounds-up"),
        pytest.param(" 2 ", "cpu", 2000, id="cpu-surrounding-spaces"),
        pytest.param("10Gi", "memory", 10 * GI, id="memory-gibibytes"),
        pytest.param("1.5Gi", "memory", 1_610_612_736, id="memory-fractional-gibibytes"),
        pytest.param("1Ki", "memory", 1024, id="memory-kibibyte"),
        pytest.param("1Mi", "memory", 2**20, id="memory-mebibyte"),
        pytest.param("1Ti", "memory", 2**40, id="memory-tebibyte"),
        pytest.param("1Pi", "memory", 2**50, id="memory-pebibyte"),
        pytest.param("1Ei", "memory", 2**60, id="memory-exbibyte"),
        pytest.param("1e3", "memory", 1000, id="memory-exponent"),
        pytest.param("1E3", "memory", 1000, id="memory-capital-exponent"),
        pytest.param("1e+3", "memory", 1000, id="memory-signed-exponent"),
        pytest.param("1E", "memory", 10**18, id="memory-exa-suffix"),
        pytest.param("1k", "memory", 1000, id="memory-kilo"),
        pytest.param("1M", "memory", 10**6, id="memory-mega"),
        pytest.param("1G", "memory", 10**9, id="memory-giga"),
        pytest.param("1T", "memory", 10**12, id="memory-tera"),
        pytest.param("1P", "memory", 10**15, id="memory-peta"),
        pytest.param("500m", "memory", 1, id="memory-milli-rounds-up"),
        pytest.param("0.5", "memory", 1, id="memory-half-byte-rounds-up"),
        pytest.param("1e-100", "memory", 1, id="memory-tiny-rounds-up"),
        pytest.param("0e99", "memory", 0, id="memory-zero-large-exponent"),
        pytest.param(1e18, "memory", 10**18, id="memory-yaml-float-exponent"),
        pytest.param("4", "nvidia.com/gpu", 4, id="gpu"),
        pytest.param("110", "pods", 110, id="pods"),
        pytest.param("7Ei", "memory", 7 * 2**60, id="memory-near-int64-limit"),
    ],
)
def test_parse_quantity_exact(value: object, resource: str, expected: int) -> None:
    assert parse_quantity(value, resource, "p") == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("", "quantity is empty", id="empty"),
        pytest.param("   ", "quantity is empty", id="blank"),
        pytest.param("-1", "quantity '-1' is negative", id="negative"),
        pytest.param(-1, "quantity '-1' is negative", id="negative-int"),
        pytest.param("-500m", "quantity '-500m' is negative", id="negative-millis"),
        pytest.param(True, "quantity must be a string or number, got True", id="boolean"),
        pytest.param(None, "quantity must be a string or number, got null", id="null"),
        pytest.param([1], "quantity must be a string or number, got list", id="list"),
        pytest.param(math.nan, "quantity nan is not a finite number", id="nan"),
        pytest.param(math.inf, "quantity inf is not a finite number", id="inf"),
        pytest.param(
            "abc",
            "quantity 'abc' is not Kubernetes notation (e.g. 100, 500m, 1.5, 10Gi, 1e3)",
            id="letters",
        ),
        pytest.param("1KiB", "quantity '1KiB' is not Kubernetes", id="unknown-suffix"),
        pytest.param("1mi", "quantity '1mi' is not Kubernetes", id="lowercase-binary"),
        pytest.param("1.2.3", "quantity '1.2.3' is not Kubernetes", id="two-dots"),
        pytest.param("1 Gi", "quantity '1 Gi' is not Kubernetes", id="inner-space"),
        pytest.param("nan", "quantity 'nan' is not Kubernetes", id="nan-string"),
        pytest.param("1e", "quantity '1e' is not Kubernetes", id="dangling-exponent"),
        pytest.param("1e3Gi", "quantity '1e3Gi' is not Kubernetes", id="exponent-and-suffix"),
        pytest.param("0x10", "quantity '0x10' is not Kubernetes", id="hex"),
        pytest.param("1_000", "quantity '1_000' is not Kubernetes", id="underscore"),
        pytest.param("8Ei", "quantity '8Ei' is too large", id="above-int64"),
        pytest.param("1e99", "quantity '1e99' is too large", id="huge-exponent"),
        pytest.param("1" * 65, "quantity is longer than 64 characters", id="too-long"),
    ],
)
def test_parse_quantity_rejects(value: object, message: str) -> None:
    with pytest.raises(QuantityError) as caught:
        parse_quantity(value, "memory", "spec.root.min.memory")
    assert caught.value.path == "spec.root.min.memory"
    assert caught.value.value is value
    [error] = caught.value.errors
    assert error.path == "spec.root.min.memory"
    assert error.code == "invalid-quantity"
    assert error.message.startswith(message)


def test_cpu_limit_is_in_millicores() -> None:
    assert parse_quantity(str(MAX_CANONICAL) + "m", "cpu", "p") == MAX_CANONICAL
    with pytest.raises(QuantityError, match="too large"):
        parse_quantity(str(MAX_CANONICAL // 1000 + 1), "cpu", "p")


def test_parse_resources_converts_every_entry() -> None:
    parsed = parse_resources(
        {"cpu": "100", "memory": "100Gi", "nvidia.com/gpu": 4}, "spec.root.max"
    )
    assert parsed == {"cpu": 100_000, "memory": 100 * GI, "nvidia.com/gpu": 4}


def test_parse_resources_null_is_empty() -> None:
    assert parse_resources(None, "spec.root.min") == {}


def test_parse_resources_single_bad_entry_is_quantity_error() -> None:
    with pytest.raises(QuantityError) as caught:
        parse_resources({"cpu": "1", "memory": "-1Gi"}, "spec.root.min")
    assert caught.value.path == "spec.root.min.memory"
    assert caught.value.value == "-1Gi"


def test_parse_resources_reports_every_bad_entry() -> None:
    with pytest.raises(InputError) as caught:
        parse_resources({"cpu": "x", "memory": "1Gi", "pods": -3, 7: "1"}, "spec.root.min")
    assert [(e.path, e.code) for e in caught.value.errors] == [
        ("spec.root.min.cpu", "invalid-quantity"),
        ("spec.root.min.pods", "invalid-quantity"),
        ("spec.root.min.7", "invalid-resource-name"),
    ]


@pytest.mark.parametrize("mapping", [["cpu"], "cpu: 1", 5], ids=["list", "string", "int"])
def test_parse_resources_rejects_non_mapping(mapping: object) -> None:
    with pytest.raises(InputError) as caught:
        parse_resources(mapping, "spec.root.min")
    [error] = caught.value.errors
    assert error.path == "spec.root.min"
    assert error.code == "not-a-mapping"


def test_collect_resources_keeps_the_good_entries() -> None:
    resources, errors = collect_resources({"cpu": "2", "memory": "lots"}, "m")
    assert resources == {"cpu": 2000}
    assert errors == [
        FieldError(
            path="m.memory",
            code="invalid-quantity",
            message="quantity 'lots' is not Kubernetes notation (e.g. 100, 500m, 1.5, 10Gi, 1e3)",
        )
    ]


@pytest.mark.parametrize(
    ("resource", "amount", "expected"),
    [
        pytest.param("cpu", 60_000, "60", id="cpu-whole"),
        pytest.param("cpu", 1500, "1500m", id="cpu-fraction"),
        pytest.param("cpu", 0, "0", id="cpu-zero"),
        pytest.param("cpu", 1, "1m", id="cpu-one-milli"),
        pytest.param("cpu", -2000, "-2", id="cpu-negative"),
        pytest.param("memory", 64_424_509_440, "60Gi", id="memory-gi"),
        pytest.param("memory", 1000, "1000", id="memory-not-binary"),
        pytest.param("memory", 1536, "1536", id="memory-1.5Ki-stays-plain"),
        pytest.param("memory", 3 * 2**20, "3Mi", id="memory-mi"),
        pytest.param("memory", 2**60, "1Ei", id="memory-ei"),
        pytest.param("memory", 1024 * 2**60, "1024Ei", id="memory-beyond-ei"),
        pytest.param("memory", 0, "0", id="memory-zero"),
        pytest.param("memory", -(2**30), "-1Gi", id="memory-negative"),
        pytest.param("nvidia.com/gpu", 4, "4", id="gpu"),
        pytest.param("nvidia.com/gpu", 2048, "2Ki", id="gpu-large-uses-binary"),
    ],
)
def test_format_quantity(resource: str, amount: int, expected: str) -> None:
    assert format_quantity(resource, amount) == expected


@settings(max_examples=200)
@given(
    resource=st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods", "example.com/fpga"]),
    amount=st.one_of(
        st.integers(min_value=0, max_value=MAX_CANONICAL),
        st.integers(min_value=0, max_value=2**20).map(lambda n: n * 2**30),
        st.integers(min_value=0, max_value=10**6).map(lambda n: n * 1000),
    ),
)
def test_format_then_parse_round_trips(resource: str, amount: int) -> None:
    assert parse_quantity(format_quantity(resource, amount), resource, "") == amount


@settings(max_examples=200)
@given(
    whole=st.integers(min_value=0, max_value=10**6),
    fraction=st.text(alphabet="0123456789", min_size=1, max_size=9),
)
def test_decimal_cpu_rounds_up_exactly(whole: int, fraction: str) -> None:
    text = f"{whole}.{fraction}"
    assert parse_quantity(text, "cpu", "") == math.ceil(Fraction(text) * 1000)


@settings(max_examples=200)
@given(st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False))
def test_yaml_floats_parse_as_their_decimal_repr(value: float) -> None:
    assert parse_quantity(value, "memory", "") == math.ceil(Fraction(repr(value)))
