"""Kubernetes quantities at Usher's boundaries (an annotation, a CLI option), strictly.

What it does: ``quantity`` reads one quantity for a resource with the one parser of quantity
notation (``usher.core.model.quantity.parse_quantity``, which caps the text and refuses negative and
non-finite values), and adds what a boundary asks on top: a string with no surrounding spaces,
and at most ``MAX_QUANTITY`` canonical units (2**62: sums of such amounts stay within the int64
the log is written with). ``resource_amounts`` reads a list of them, one per resource
(``cpu=4, nvidia.com/gpu=2``). Raises ``ValueRefused`` naming the field.
What it must never do: parse quantity notation itself (``usher.core.model.quantity`` does), or do
I/O.
"""

from __future__ import annotations

import re
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


MAX_RESOURCES: Final = 32
"""The most resources one list of amounts (``cpu=4, nvidia.com/gpu=2``) names."""

_RESOURCE_NAME: Final = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
"""A Kubernetes resource name: an optional DNS-subdomain prefix and ``/``, then a name."""


def resource_amounts(raw: object, path: str, *, name: str | None = None) -> dict[str, int]:
    """``resource=quantity`` pairs separated by ``,`` (``cpu=4, nvidia.com/gpu=2``): at least
    one, at most ``MAX_RESOURCES``, each resource once, each amount as ``quantity`` reads it."""
    label = name or path
    wrong = f"{label}: {shown(raw)} is not 'resource=quantity, ...', e.g. 'cpu=4, memory=16Gi'"
    if not isinstance(raw, str):
        raise ValueRefused(path, "invalid-type", f"{wrong} (a string)")
    if len(raw) > MAX_RESOURCES * 128:
        raise ValueRefused(path, "too-long", f"{wrong} of at most {MAX_RESOURCES} resources")
    parts = [part.strip(" ") for part in raw.split(",")]
    if len(parts) > MAX_RESOURCES:
        raise ValueRefused(path, "too-long", f"{wrong} of at most {MAX_RESOURCES} resources")
    amounts: dict[str, int] = {}
    for part in parts:
        resource, equals, amount = (side.strip(" ") for side in part.partition("="))
        if not equals or len(resource) > 253 or _RESOURCE_NAME.fullmatch(resource) is None:
            raise ValueRefused(path, "invalid-value", f"{wrong}: {shown(part)}")
        if resource in amounts:
            message = f"{label}: {shown(raw)} names {resource} twice"
            raise ValueRefused(path, "invalid-value", message)
        amounts[resource] = quantity(amount, path, resource, name=f"{label} {resource}")
    return amounts
