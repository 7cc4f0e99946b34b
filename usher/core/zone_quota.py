"""Quota per zone inside the tree (docs/admission-rules.md Z1): parsing and the fit check.

What it does: ``parse_zone_max`` reads a tree node's ``usher.io/zone-max`` attribute
(``a100: nvidia.com/gpu=8, cpu=64; h100: nvidia.com/gpu=4``) into exact canonical amounts per
zone and resource, or every error refusing it (T1 names the attribute); ``zone_shortfall`` finds
the first node of a path, nearest the leaf first, whose cap in the workload's zone the request
would exceed, with the numbers (``root/gpu-team nvidia.com/gpu in zone a100: 6 used + 4
requested > max 8``). A node without the attribute caps no zone: its total ``max`` (R2) is the
only limit, so trees that never use it decide exactly as before.
What it must never do: perform I/O, read a clock, use float arithmetic on an amount, or scale
a zone cap by ``oversellRate`` (a zone cap is a hard partition of scarce hardware).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, NamedTuple, Protocol

from schemas import FieldError, QuotaPath, Reason, Zone
from usher.core.quantity import collect_resources, format_quantity

ZONE_MAX_ATTRIBUTE: Final = "usher.io/zone-max"
"""Per zone, the most a node's subtree may use there (Z1), on top of its total ``max``."""

ZoneCaps = dict[Zone, dict[str, int]]
"""Per zone, per resource: a node's cap in that zone (canonical units)."""


class ZoneShortfall(NamedTuple):
    """The node whose cap in ``zone`` a request would exceed, with the numbers (Z1)."""

    node: QuotaPath
    zone: Zone
    resource: str
    used: int
    requested: int
    cap: int


class ZoneCapped(Protocol):
    """What the fit check needs of one tree node: its path, per-zone caps and usage there."""

    @property
    def path(self) -> QuotaPath: ...

    @property
    def zone_max(self) -> ZoneCaps: ...

    @property
    def zone_used(self) -> ZoneCaps: ...


def parse_zone_max(
    attributes: Mapping[str, str], field_prefix: str
) -> tuple[ZoneCaps, list[FieldError]]:
    """A node's per-zone caps, or every error refusing them at the attribute's path under
    ``field_prefix`` (T1 names it). Zones are separated by ``;``, resources by ``,``."""
    text = attributes.get(ZONE_MAX_ATTRIBUTE)
    if text is None:
        return {}, []
    field = f"{field_prefix}.{ZONE_MAX_ATTRIBUTE}"
    caps: ZoneCaps = {}
    errors: list[FieldError] = []
    for item in (part.strip() for part in text.split(";") if part.strip()):
        zone, resources, problems = _parse_zone_item(item, field)
        errors.extend(problems)
        if zone is None:
            continue
        if zone in caps:
            errors.append(_invalid(field, f"{item!r}: zone {zone} is capped twice"))
            continue
        caps[zone] = resources
    if not caps and not errors:
        errors.append(_invalid(field, "no zone given; expected e.g. 'a100: nvidia.com/gpu=8'"))
    return (caps if not errors else {}), errors


def _parse_zone_item(item: str, field: str) -> tuple[Zone | None, dict[str, int], list[FieldError]]:
    zone, colon, rest = item.partition(":")
    zone = zone.strip()
    if not colon or not zone or any(c.isspace() for c in zone):
        return None, {}, [_invalid(field, f"{item!r} is not '<zone>: <resource>=<quantity>, ...'")]
    entries: dict[str, str] = {}
    for pair in (p.strip() for p in rest.split(",") if p.strip()):
        name, equals, amount = (s.strip() for s in pair.partition("="))
        if not equals or not name or not amount:
            return None, {}, [_invalid(field, f"{pair!r} in zone {zone} is not '<resource>=<n>'")]
        if name in entries:
            return None, {}, [_invalid(field, f"{name} given twice for zone {zone}")]
        entries[name] = amount
    if not entries:
        return None, {}, [_invalid(field, f"zone {zone} caps no resource")]
    resources, problems = collect_resources(entries, f"{field}[{zone}]")
    if problems:
        return None, {}, [_invalid(p.path, p.message) for p in problems]
    return Zone(zone), dict(resources), []


def zone_shortfall(
    path: Iterable[ZoneCapped], zone: Zone, shape: Iterable[tuple[str, int]]
) -> ZoneShortfall | None:
    """The first cap in ``zone`` that ``shape`` would exceed, nearest the leaf first (the node a
    person can act on), resources in request order; None when every zone cap has room (Z1)."""
    for node in reversed(tuple(path)):
        caps = node.zone_max.get(zone)
        if caps is None:
            continue
        used = node.zone_used.get(zone, {})
        for resource, amount in shape:
            cap = caps.get(resource)
            if cap is not None and used.get(resource, 0) + amount > cap:
                return ZoneShortfall(node.path, zone, resource, used.get(resource, 0), amount, cap)
    return None


def fits_zone_caps(
    path: Iterable[ZoneCapped], zone: Zone, shape: Iterable[tuple[str, int]]
) -> bool:
    """Whether ``shape`` stays within every cap in ``zone`` on ``path`` (Z1)."""
    return zone_shortfall(path, zone, tuple(shape)) is None


def zone_quota_exceeded(short: ZoneShortfall) -> Reason:
    """Pending: a node's cap in the workload's zone has no room (Z1), with the numbers."""
    resource = short.resource
    message = (
        f"{short.node} {resource} in zone {short.zone}: "
        f"{format_quantity(resource, short.used)} used + "
        f"{format_quantity(resource, short.requested)} requested > max "
        f"{format_quantity(resource, short.cap)}"
    )
    return Reason(
        code="ZoneQuotaExceeded",
        message=message,
        node=short.node,
        resource=resource,
        used=short.used,
        requested=short.requested,
        limit=short.cap,
    )


def count_in_zone(
    path: Iterable[ZoneCapped], zone: Zone, shape: Iterable[tuple[str, int]], sign: int
) -> None:
    """Add (``sign`` 1) or take back (-1) ``shape`` in ``zone`` on every node of ``path`` that
    caps ``zone`` (only capped usage is ever looked at; a new tree counts it again)."""
    for node in path:
        if zone not in node.zone_max:
            continue
        used = node.zone_used.setdefault(zone, {})
        for resource, amount in shape:
            used[resource] = used.get(resource, 0) + sign * amount


def _invalid(field: str, message: str) -> FieldError:
    return FieldError(path=field, code="invalid-attribute", message=message)
