"""Kubernetes quantities at Usher's boundaries (an annotation, a CLI option), strictly.

What it does: ``quantity`` reads one quantity for a resource with the one parser of quantity
notation (``usher.core.model.quantity.parse_quantity``, which caps the text and refuses negative and
non-finite values), and adds what a boundary asks on top: a string with no surrounding spaces,
and at most ``MAX_QUANTITY`` canonical units (2**62: sums of such amounts stay within the int64
the log is written with). Raises ``ValueRefused`` naming the field.
What it must never do: parse quantity notation itself (``usher.core.model.quantity`` does), or do
I/O.
"""

from __future__ import annotations

from typing import Final

from usher.core.model.errors import QuantityError, ValueRefused
from usher.core.model.quantity import format_quantity, parse_quantity
from usher.core.values.shown import shown

MAX_QUANTITY: Final = 2**62
"""The largest amount a boundary takes, in canonical units (millicores, bytes, devices)."""


def quantity(
    raw: object, path: str, resource: str, *, allow_zero: bool = True, name: str | None = None
) -> int:
    """One quantity of ``resource`` in canonical units, ``0`` (or 1 when not ``allow_zero``)
    to ``MAX_QUANTITY``; written as a string (``"500m"``, ``"4Gi"``)."""
    label = name or path
    if not isinstance(raw, str):
        message = f"{label} must be a quantity such as 500m or 4Gi (a string), got {shown(raw)}"
        raise ValueRefused(path, "invalid-type", message)
    if raw != raw.strip():
        message = f"{label} must be a quantity without surrounding spaces, got {shown(raw)}"
        raise ValueRefused(path, "invalid-value", message)
    try:
        amount = parse_quantity(raw, resource, path)
    except QuantityError as refused:
        raise ValueRefused(
            path, "invalid-quantity", f"{label}: {refused.errors[0].message}"
        ) from None
    if amount > MAX_QUANTITY:
        most = format_quantity(resource, MAX_QUANTITY)
        raise ValueRefused(
            path, "out-of-range", f"{label} must be at most {most}, got {shown(raw)}"
        )
    if amount == 0 and not allow_zero:
        raise ValueRefused(path, "out-of-range", f"{label} must be more than 0, got {shown(raw)}")
    return amount
