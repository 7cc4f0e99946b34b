"""Quota per zone inside the tree (docs/admission-rules.md Z1, Z4): parsing, fit, guarantees.

What it does: ``parse_zone_max`` reads a tree node's ``usher.io/zone-max`` attribute
(``a100: nvidia.com/gpu=8, cpu=64; h100: nvidia.com/gpu=4``) into exact canonical amounts per
zone and resource, or every error refusing it (T1 names the attribute); ``zone_shortfall`` finds
the first node of a path, nearest the leaf first, whose cap in the workload's zone the request
would exceed, with the numbers (``root/gpu-team nvidia.com/gpu in zone a100: 6 used + 4
requested > max 8``). A node without the attribute caps no zone: its total ``max`` (R2) is the
only limit, so trees that never use it decide exactly as before. ``parse_zone_min`` reads
``usher.io/zone-min`` (same syntax, Z4: a guarantee per zone) and ``zone_min_errors`` the T1
checks relating it to the node's ``min``, its ``zone-max`` and its children's;
``count_in_counted_zone`` counts usage on every node that caps or guarantees the zone.
What it must never do: perform I/O, read a clock, use float arithmetic on an amount, or scale
a zone cap by ``oversellRate`` (a zone cap is a hard partition of scarce hardware).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final, NamedTuple, Protocol

from schemas import FieldError, QuotaPath, Reason, Zone
from usher.core.model.quantity import collect_resources, format_quantity
from usher.core.model.reason_text import bound, in_zone, used_and_requested_over
from usher.core.values import registry
from usher.core.values.names import LABEL_RULE, is_zone_name
from usher.core.values.shown import shown

ZONE_MAX_ATTRIBUTE: Final = registry.ZONE_MAX.key
"""Per zone, the most a node's subtree may use there (Z1), on top of its total ``max``."""

ZONE_MIN_ATTRIBUTE: Final = registry.ZONE_MIN.key
"""Per zone, what a node is guaranteed there (Z4), part of its total ``min``."""

ZoneCaps = dict[Zone, dict[str, int]]
"""Per zone, per resource: a node's cap (or guarantee) in that zone (canonical units)."""


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


class ZoneCounted(ZoneCapped, Protocol):
    """A tree node whose usage is counted per zone: where it caps or guarantees one (Z1, Z4)."""

    @property
    def zone_min(self) -> ZoneCaps: ...


def parse_zone_max(
    attributes: Mapping[str, str], field_prefix: str
) -> tuple[ZoneCaps, list[FieldError]]:
    """A node's per-zone caps, or every error refusing them at the attribute's path under
    ``field_prefix`` (T1 names it). Zones are separated by ``;``, resources by ``,``."""
    return _parse_zone_amounts(attributes, ZONE_MAX_ATTRIBUTE, field_prefix, ("capped", "caps"))


def parse_zone_min(
    attributes: Mapping[str, str], field_prefix: str
) -> tuple[ZoneCaps, list[FieldError]]:
    """A node's per-zone guarantees (Z4), read like ``parse_zone_max`` (T1 names the
    attribute ``usher.io/zone-min`` when refusing them)."""
    return _parse_zone_amounts(
        attributes, ZONE_MIN_ATTRIBUTE, field_prefix, ("guaranteed", "guarantees")
    )


def _parse_zone_amounts(
    attributes: Mapping[str, str], attribute: str, field_prefix: str, verbs: tuple[str, str]
) -> tuple[ZoneCaps, list[FieldError]]:
    """Zones separated by ``;``, resources by ``,``; ``verbs`` word the errors (``capped``,
    ``caps``)."""
    text = attributes.get(attribute)
    if text is None:
        return {}, []
    field = f"{field_prefix}.{attribute}"
    caps: ZoneCaps = {}
    errors: list[FieldError] = []
    for item in (part.strip() for part in text.split(";") if part.strip()):
        zone, resources, problems = _parse_zone_item(item, field, verbs[1])
        errors.extend(problems)
        if zone is None:
            continue
        if zone in caps:
            errors.append(_invalid(field, f"{item!r}: zone {zone} is {verbs[0]} twice"))
            continue
        caps[zone] = resources
    if not caps and not errors:
        errors.append(_invalid(field, "no zone given; expected e.g. 'a100: nvidia.com/gpu=8'"))
    return (caps if not errors else {}), errors


def _parse_zone_item(
    item: str, field: str, verb: str
) -> tuple[Zone | None, dict[str, int], list[FieldError]]:
    zone, colon, rest = item.partition(":")
    zone = zone.strip()
    if not colon or not zone or any(c.isspace() for c in zone):
        return None, {}, [_invalid(field, f"{item!r} is not '<zone>: <resource>=<quantity>, ...'")]
    if not is_zone_name(zone):
        return None, {}, [_invalid(field, f"{shown(zone)} is not a zone name ({LABEL_RULE})")]
    entries: dict[str, str] = {}
    for pair in (p.strip() for p in rest.split(",") if p.strip()):
        name, equals, amount = (s.strip() for s in pair.partition("="))
        if not equals or not name or not amount:
            return None, {}, [_invalid(field, f"{pair!r} in zone {zone} is not '<resource>=<n>'")]
        if name in entries:
            return None, {}, [_invalid(field, f"{name} given twice for zone {zone}")]
        entries[name] = amount
    if not entries:
        return None, {}, [_invalid(field, f"zone {zone} {verb} no resource")]
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
    over = used_and_requested_over(
        resource, short.used, short.requested, bound("max", resource, short.cap)
    )
    message = f"{in_zone(short.node, resource, short.zone)}: {over}"
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
    caps ``zone`` (Z1: only capped usage is ever looked at; a new tree counts it again)."""
    _add_in_zone([node for node in path if zone in node.zone_max], zone, tuple(shape), sign)


def count_in_counted_zone(
    path: Iterable[ZoneCounted], zone: Zone, shape: Iterable[tuple[str, int]], sign: int
) -> None:
    """``count_in_zone`` on every node of ``path`` that caps (Z1) or guarantees (Z4) ``zone``:
    what the engine counts, since reclaim judges the claims of guaranteeing leaves."""
    nodes = [node for node in path if zone in node.zone_max or zone in node.zone_min]
    _add_in_zone(nodes, zone, tuple(shape), sign)


def _add_in_zone(
    nodes: Iterable[ZoneCapped], zone: Zone, shape: tuple[tuple[str, int], ...], sign: int
) -> None:
    for node in nodes:
        used = node.zone_used.setdefault(zone, {})
        for resource, amount in shape:
            used[resource] = used.get(resource, 0) + sign * amount


def within_zone_min(
    zone_min: Mapping[Zone, Mapping[str, int]],
    zone_used: Mapping[Zone, Mapping[str, int]],
    zone: Zone,
    request: Iterable[tuple[str, int]],
) -> bool:
    """Whether ``request`` in ``zone`` stays within the node's guarantee there (Z4) on every
    resource that guarantee names; True where the node declares none for ``zone`` (its total
    ``min`` alone then says whether it is within its guarantee, R5)."""
    minimum = zone_min.get(zone)
    if minimum is None:
        return True
    used = zone_used.get(zone, {})
    return all(
        used.get(resource, 0) + amount <= minimum[resource]
        for resource, amount in request
        if resource in minimum
    )


def zone_borrowed_resource(
    zone_min: Mapping[Zone, Mapping[str, int]],
    zone_used: Mapping[Zone, Mapping[str, int]],
    zone: Zone,
    request: Iterable[tuple[str, int]],
) -> str | None:
    """The first resource of ``request`` (in its order) the node holds in ``zone`` above its
    guarantee there (Z4: named by its ``zone-min`` for that zone); None when it declares none
    for ``zone`` or is within it on every resource asked for."""
    minimum = zone_min.get(zone)
    if minimum is None:
        return None
    used = zone_used.get(zone, {})
    for resource, _ in request:
        if resource in minimum and used.get(resource, 0) > minimum[resource]:
            return resource
    return None


def zone_min_errors(
    node_min: Mapping[str, int], attributes: Mapping[str, str], field_prefix: str
) -> list[FieldError]:
    """T1 (Z4): a guarantee in a zone is part of the node's total ``min`` and within its cap in
    that zone, so each amount of ``zone-min`` above the node's ``min`` of that resource (absent:
    0) or above its ``zone-max`` for that zone and resource (where it caps them) is refused."""
    guarantees, _ = parse_zone_min(attributes, field_prefix)
    caps, _ = parse_zone_max(attributes, field_prefix)
    field = f"{field_prefix}.{ZONE_MIN_ATTRIBUTE}"
    errors: list[FieldError] = []
    for zone, amounts in sorted(guarantees.items()):
        for resource, amount in sorted(amounts.items()):
            shown = format_quantity(resource, amount)
            total = node_min.get(resource, 0)
            if amount > total:
                message = (
                    f"zone {zone} {resource} {shown} > min {format_quantity(resource, total)}:"
                    " a zone guarantee is part of the total min"
                )
                errors.append(FieldError(path=field, code="zone-min-exceeds-min", message=message))
            cap = caps.get(zone, {}).get(resource)
            if cap is not None and amount > cap:
                message = (
                    f"zone {zone} {resource} {shown} > {ZONE_MAX_ATTRIBUTE} "
                    f"{format_quantity(resource, cap)}"
                )
                errors.append(
                    FieldError(path=field, code="zone-min-exceeds-zone-max", message=message)
                )
    return errors


def children_zone_min_errors(
    parent: Mapping[str, str],
    children: Sequence[Mapping[str, str]],
    parent_field: str,
    parent_path: QuotaPath,
) -> list[FieldError]:
    """T1 (Z4), as for ``min``: where the parent guarantees a zone and resource, its
    children's guarantees there must not sum above it. A parent that guarantees nothing in a
    zone bounds its children's there only through ``min`` (each child's zone-min is within its
    own ``min``, and the children's ``min`` within the parent's)."""
    own, _ = parse_zone_min(parent, "")
    kids = [parse_zone_min(child, "")[0] for child in children]
    field = f"{parent_field}.{ZONE_MIN_ATTRIBUTE}"
    errors: list[FieldError] = []
    for zone, amounts in sorted(own.items()):
        for resource, amount in sorted(amounts.items()):
            total = sum(kid.get(zone, {}).get(resource, 0) for kid in kids)
            if total > amount:
                message = (
                    f"sum of children zone-min {resource} in zone {zone} "
                    f"{format_quantity(resource, total)} > parent {parent_path} zone-min "
                    f"{format_quantity(resource, amount)}"
                )
                errors.append(
                    FieldError(path=field, code="children-zone-min-exceed-parent", message=message)
                )
    return errors


def _invalid(field: str, message: str) -> FieldError:
    return FieldError(path=field, code="invalid-attribute", message=message)
