"""Kubernetes quantities (``100``, ``500m``, ``10Gi``, ``1e3``) as exact canonical integers.

What it does: parses quantity notation with exact rational arithmetic into Usher's canonical
units -- ``cpu`` in millicores, every other resource (memory, ephemeral-storage,
``nvidia.com/gpu``, pods, extended resources) in integer base units -- and formats canonical
integers back into the short human form used in output; ``unit_of``/``hours`` name the unit
people read resource x time in (CPU-hours, GiB-hours, GPU-hours: usage U1, budgets B1).

Rounding follows Kubernetes: a value that is not a whole number of canonical units is rounded
UP to the next integer (``cpu: 0.0001`` is 0.1m and becomes ``1`` millicore; ``memory: 0.5``
becomes ``1`` byte). Only malformed, negative, non-finite or absurdly large values are errors.

What it must never do: use float arithmetic on a quantity, do I/O, or return a rounded-down value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

from schemas import FieldError, Resources
from usher.core.model.errors import InputError, QuantityError

CPU = "cpu"

MS_PER_HOUR = 3_600_000
GIB = 1 << 30

BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage"})
"""Resources counted in bytes, shown in GiB-hours (hugepages-* too, by their prefix)."""

MAX_CANONICAL = 2**63 - 1
"""The largest amount we accept, in canonical units (Kubernetes' own int64 bound)."""

_MAX_TEXT_LENGTH = 64
"""Longer strings are refused before any arithmetic so a hostile value cannot cost memory."""

_MAX_EXPONENT = 64
"""Bound for the decimal exponent; beyond it a non-zero value is certainly out of range."""

_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)"
    r"(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    # The exponent form must be tried before the bare "E" (exa) suffix: "1E3" is 1000, "1E" is 1e18.
    r"(?:[eE](?P<exponent>[+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)"
)

_DECIMAL_SUFFIX_EXPONENT: dict[str, int] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}

_BINARY_SUFFIX_POWER: dict[str, int] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}

# Largest first, so formatting picks the biggest suffix that divides exactly.
_BINARY_SUFFIXES_DESCENDING = sorted(
    _BINARY_SUFFIX_POWER.items(), key=lambda item: item[1], reverse=True
)


def parse_quantity(value: object, resource: str, path: str) -> int:
    """Parse a quantity for ``resource`` into canonical units, rounding fractions up.

    Accepts a ``str`` in Kubernetes notation, or an ``int``/``float`` as YAML produces them.
    Raises ``QuantityError`` naming ``path`` for anything else.
    """
    text = _quantity_text(value, path)
    amount = _exact_amount(text, value, path)
    if amount < 0:
        raise QuantityError(path, value, f"quantity {text!r} is negative")
    canonical = math.ceil(amount * _canonical_scale(resource))
    if canonical > MAX_CANONICAL:
        raise QuantityError(path, value, f"quantity {text!r} is too large")
    return canonical


def quantity_value(value: object, path: str = "") -> Fraction:
    """The exact signed value of a quantity in written units (``1Gi`` is 2**30, ``500m`` is
    1/2), as Kubernetes compares quantities; ``QuantityError`` for what is not one."""
    text = _quantity_text(value, path)
    return _exact_amount(text, value, path)


def parse_resources(mapping: object, path: str) -> Resources:
    """Parse a resource list (name -> quantity); every bad entry is reported, not just the first.

    ``None`` (an empty YAML key) is an empty list. Raises ``QuantityError`` when exactly one
    quantity is bad, ``InputError`` carrying every ``FieldError`` otherwise.
    """
    resources, failures = _parse_entries(mapping, path)
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise InputError([error for failure in failures for error in failure.errors])
    return resources


def collect_resources(mapping: object, path: str) -> tuple[Resources, list[FieldError]]:
    """Parse what can be parsed of a resource list and return it with every problem found.

    Used by callers that gather all errors of a larger document before rejecting it.
    """
    resources, failures = _parse_entries(mapping, path)
    return resources, [error for failure in failures for error in failure.errors]


def _parse_entries(mapping: object, path: str) -> tuple[Resources, list[InputError]]:
    if mapping is None:
        return {}, []
    if not isinstance(mapping, Mapping):
        message = f"expected a mapping of resource name to quantity, got {_type_name(mapping)}"
        return {}, [InputError([FieldError(path=path, code="not-a-mapping", message=message)])]
    resources: Resources = {}
    failures: list[InputError] = []
    for name, raw in mapping.items():
        entry_path = f"{path}.{name}"
        if not isinstance(name, str) or not name:
            message = f"resource name must be a non-empty string, got {name!r}"
            error = FieldError(path=entry_path, code="invalid-resource-name", message=message)
            failures.append(InputError([error]))
            continue
        try:
            resources[name] = parse_quantity(raw, name, entry_path)
        except QuantityError as failure:
            failures.append(failure)
    return resources, failures


def format_quantity(resource: str, amount: int) -> str:
    """Render a canonical amount in the short form used in output (inverse of the parser).

    cpu: whole cores as ``"60"``, otherwise millicores ``"1500m"``. Others: the largest binary
    suffix that divides exactly (``"60Gi"``), otherwise the plain integer (``"1000"``).
    """
    if amount < 0:
        # Never expected for usage, but a debit shown as "-2Gi" is clearer than a crash.
        return "-" + format_quantity(resource, -amount)
    if resource == CPU:
        return _format_millicores(amount)
    return _format_base_units(amount)


def _format_millicores(amount: int) -> str:
    cores, millis = divmod(amount, 1000)
    return str(cores) if millis == 0 else f"{amount}m"


def _format_base_units(amount: int) -> str:
    if amount == 0:
        return "0"
    for suffix, power in _BINARY_SUFFIXES_DESCENDING:
        units, remainder = divmod(amount, 1 << power)
        if remainder == 0:
            return f"{units}{suffix}"
    return str(amount)


def _canonical_scale(resource: str) -> int:
    """How many canonical units one written unit is: millicores for cpu, base units otherwise."""
    return 1000 if resource == CPU else 1


def _quantity_text(value: object, path: str) -> str:
    """The notation to parse; YAML numbers are read through their shortest exact repr."""
    # bool is an int subclass; `cpu: true` is a typo, not one core.
    if isinstance(value, bool):
        raise QuantityError(path, value, f"quantity must be a string or number, got {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(path, value, f"quantity {value!r} is not a finite number")
        # repr gives the shortest decimal that reads back as this float: 1.5 -> "1.5".
        return repr(value)
    if isinstance(value, str):
        return value.strip()
    raise QuantityError(
        path, value, f"quantity must be a string or number, got {_type_name(value)}"
    )


def _exact_amount(text: str, value: object, path: str) -> Fraction:
    """The exact rational value of ``text`` in written units (before the cpu x1000 scale)."""
    if not text:
        raise QuantityError(path, value, "quantity is empty")
    if len(text) > _MAX_TEXT_LENGTH:
        raise QuantityError(path, value, f"quantity is longer than {_MAX_TEXT_LENGTH} characters")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(
            path,
            value,
            f"quantity {text!r} is not Kubernetes notation (e.g. 100, 500m, 1.5, 10Gi, 1e3)",
        )
    number = Fraction(match["number"])
    if match["sign"] == "-":
        number = -number
    if match["exponent"] is not None:
        return _scaled_by_exponent(number, int(match["exponent"]), text, value, path)
    suffix = match["suffix"] or ""
    if suffix in _BINARY_SUFFIX_POWER:
        return number * (1 << _BINARY_SUFFIX_POWER[suffix])
    return _scaled_by_exponent(number, _DECIMAL_SUFFIX_EXPONENT[suffix], text, value, path)


def _scaled_by_exponent(
    number: Fraction, exponent: int, text: str, value: object, path: str
) -> Fraction:
    """``number x 10**exponent`` exactly, refusing exponents no real quantity needs."""
    if number == 0:
        return number
    if exponent > _MAX_EXPONENT:
        raise QuantityError(path, value, f"quantity {text!r} is too large")
    # A tiny positive value still rounds up to one unit; clamping keeps the power cheap.
    exponent = max(exponent, -_MAX_EXPONENT)
    return number * Fraction(10) ** exponent


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


# ---------------------------------------------------------------------------- resource x time
# The units usage (U1) and budgets (B1) are read in: one place for both.


def unit_of(resource: str) -> tuple[str, int]:
    """The unit people read a resource's usage in, and how many canonical units it is."""
    if resource == CPU:
        return "CPU", 1000
    if resource in BYTE_RESOURCES or resource.startswith("hugepages-"):
        return "GiB", GIB
    return resource.rsplit("/", 1)[-1].upper() if "/" in resource else resource, 1


def hours(resource: str, amount_ms: int) -> Decimal:
    """Canonical units x ms as hours of the resource's unit, exact to 3 decimals (rounded half
    up only here, for display)."""
    _, scale = unit_of(resource)
    exact = Decimal(amount_ms) / Decimal(scale * MS_PER_HOUR)
    return exact.quantize(Decimal("0.001"), rounding=ROUND_HALF_UP)
