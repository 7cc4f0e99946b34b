"""Numbers at Usher's boundaries: counts, whole seconds, exact decimals (factors), durations.

What it does: each parser takes a raw value (the string of a tree attribute, a job annotation or
a CLI option) and the field path it came from, and returns the number or raises
``ValueRefused`` naming that path. The text is ASCII digits only (``str.isdigit`` also takes
Arabic-Indic and superscript digits; ``[0-9]`` does not), with no sign (a priority alone may
start with ``-``), no surrounding spaces,
no exponent and nothing non-finite; its length is capped (``MOST_DIGITS``) BEFORE any
conversion, so a 100,000-digit value costs nothing; and every caller states the value's bounds,
which the message repeats.
What it must never do: call ``int`` or ``Fraction`` on unchecked text, use floats, do I/O.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction
from typing import Final

from usher.core.model.errors import ValueRefused
from usher.core.values.shown import shown

MOST_DIGITS: Final = 20
"""The longest text a number may be written with (leading zeros included); longer is refused
before it is read. Every bound below has far fewer digits."""

MAX_COUNT: Final = 1_000_000
"""The default upper bound of a count (pods, attempts, weights): no real job needs more."""

MAX_SECONDS: Final = 30 * 24 * 3600
"""The default upper bound of a number of seconds a policy waits: 30 days."""

_DIGITS: Final = re.compile(r"[0-9]+")
_DECIMAL: Final = re.compile(r"(?P<whole>[0-9]+)(?:\.(?P<fraction>[0-9]+))?")


MAX_HALF_LIFE_SECONDS: Final = 366 * 24 * 3600
"""The longest half-life of fair share's memory (F1): a year."""
MAX_SEQUENCE: Final = 2**63 - 1
"""The largest log sequence number (JetStream numbers entries with unsigned 64-bit integers;
int64 keeps them within what every reader stores)."""


def _string(raw: object, path: str, name: str, wanted: str) -> str:
    """``raw`` as a string of at most ``MOST_DIGITS`` characters, else refused."""
    if not isinstance(raw, str):
        message = f"{name} must be {wanted} (a string), got {shown(raw)}"
        raise ValueRefused(path, "invalid-type", message)
    if len(raw) > MOST_DIGITS:
        message = f"{name} must be {wanted}, got {shown(raw)}: longer than {MOST_DIGITS} characters"
        raise ValueRefused(path, "too-long", message)
    return raw


def whole(
    raw: object,
    path: str,
    *,
    low: int = 0,
    high: int = MAX_COUNT,
    name: str | None = None,
    unit: str = "",
) -> int:
    """A whole number ``low..high`` written in ASCII digits (``"30"``; ``"030"`` is 30)."""
    label = name or path
    wanted = f"a whole number{unit} from {low} to {high}"
    text = _string(raw, path, label, wanted)
    if _DIGITS.fullmatch(text) is None:
        message = f"{label} must be {wanted} (ASCII digits only), got {shown(raw)}"
        raise ValueRefused(path, "invalid-value", message)
    number = int(text)  # at most MOST_DIGITS ASCII digits
    if not low <= number <= high:
        message = f"{label} must be {wanted}, got {shown(raw)}"
        raise ValueRefused(path, "out-of-range", message)
    return number


def count(
    raw: object, path: str, *, low: int = 0, high: int = MAX_COUNT, name: str | None = None
) -> int:
    """A count (pods, attempts, a weight): a whole number ``low..high``."""
    return whole(raw, path, low=low, high=high, name=name)


def seconds(
    raw: object, path: str, *, low: int = 0, high: int = MAX_SECONDS, name: str | None = None
) -> int:
    """A whole number of seconds ``low..high`` (default at most 30 days)."""
    return whole(raw, path, low=low, high=high, name=name, unit=" of seconds")


MIN_PRIORITY: Final = -(2**31)
"""The lowest priority a workload may have (a PriorityClass value is an int32, T4)."""
MAX_PRIORITY: Final = 2**31 - 1
"""The highest priority a workload may have (T4)."""
_SIGNED: Final = re.compile(r"-?[0-9]+")


def priority(raw: object, path: str, *, name: str | None = None) -> int:
    """A priority as a PriorityClass value (T4): an optional ``-`` then ASCII digits, within
    int32 (``"100"``, ``"-5"``)."""
    label = name or path
    wanted = f"a whole number from {MIN_PRIORITY} to {MAX_PRIORITY}"
    text = _string(raw, path, label, wanted)
    if _SIGNED.fullmatch(text) is None:
        message = f"{label} must be {wanted} (ASCII digits, optionally after '-'), got {shown(raw)}"
        raise ValueRefused(path, "invalid-value", message)
    number = int(text)  # at most MOST_DIGITS ASCII characters
    if not MIN_PRIORITY <= number <= MAX_PRIORITY:
        message = f"{label} must be {wanted}, got {shown(raw)}"
        raise ValueRefused(path, "out-of-range", message)
    return number


def decimal(
    raw: object,
    path: str,
    *,
    low: Fraction,
    high: Fraction,
    places: int = 3,
    name: str | None = None,
    unit: str = "",
) -> Fraction:
    """An exact decimal ``low..high`` (``"1.5"``): ASCII digits, at most one ``.`` and
    ``places`` decimals; no sign, exponent, ``nan`` or ``inf``."""
    label = name or path
    bounds = f"from {_plain(low)} to {_plain(high)} with at most {places} decimals"
    wanted = f"a decimal number{unit} {bounds}"
    text = _string(raw, path, label, wanted)
    match = _DECIMAL.fullmatch(text)
    if match is None or len(match["fraction"] or "") > places:
        message = f"{label} must be {wanted} (ASCII digits, e.g. 1.5), got {shown(raw)}"
        raise ValueRefused(path, "invalid-value", message)
    number = Fraction(text)  # at most MOST_DIGITS ASCII characters
    if not low <= number <= high:
        message = f"{label} must be {wanted}, got {shown(raw)}"
        raise ValueRefused(path, "out-of-range", message)
    return number


def factor(
    raw: object, path: str, *, high: Fraction = Fraction(100), name: str | None = None
) -> Fraction:
    """A multiplication factor ``1..high`` written as a decimal (``"1.5"``)."""
    return decimal(raw, path, low=Fraction(1), high=high, name=name)


def duration(
    raw: object, path: str, *, high: int = MAX_SECONDS, name: str | None = None
) -> Fraction:
    """A non-negative duration in seconds, ``0..high``, with at most 3 decimals (``"1.5"``: one
    and a half seconds, exact to the millisecond)."""
    return decimal(raw, path, low=Fraction(0), high=Fraction(high), name=name, unit=" of seconds")


def _plain(value: Fraction) -> str:
    """``1`` or ``1.5``: a bound as people write it."""
    if value.denominator == 1:
        return str(value.numerator)
    return str(Decimal(value.numerator) / Decimal(value.denominator))
