"""Burst zones and a tree node's default zones (docs/admission-rules.md Z3).

What it does: reads the two tree attributes of Z3 -- the root's ``usher.io/burst-zones``
(``"eci"``: zones of virtual nodes, used only when a job's other zones are full) and any node's
``usher.io/zones`` (``"default,eci"``: the accepted zones, in preference order, of the
workloads below it that list none themselves, inherited down the tree) -- and every error
refusing them (T1 names the attribute). Then the three small decisions burst zones change:
which zones a workload accepts when the tree gives the list (``tree_accepted``), the order its
accepted zones are tried in (``try_order``: every non-burst zone before any burst zone, each
part in the listed order), and the order of reclaim candidates of one standing
(``burst_first``: among candidates at the same tree distance and of the same priority, those
running in a burst zone first), and the tolerations the pods of a workload admitted into a
burst zone get (``zone_tolerations``; the root's ``usher.io/burst-tolerations`` is read and
refused by ``burst_tolerations``, T1 reports it here with the others).

What it must never do: perform I/O, admit or preempt anything itself, or change any order when
the tree marks no burst zone (every decision is then exactly what Z2 and R5 decide).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Final, TypeVar

from schemas import FieldError, Zone
from usher.core.tree.burst_tolerations import (
    BURST_TOLERATIONS_ATTRIBUTE,
    DEFAULT_TOLERATIONS,
    Toleration,
    parse_burst_tolerations,
)
from usher.core.tree.zone_names import ZONES_KEY, parse_zone_names
from usher.core.values import registry

BURST_ZONES_ATTRIBUTE: Final = registry.BURST_ZONES.key
"""On the root only: the zones used only when a workload's other accepted zones are full, and
whose workloads are reclaimed first among candidates of one standing (Z3)."""

DEFAULT_ZONES_ATTRIBUTE: Final = ZONES_KEY
"""On any node, inherited: the accepted zones of workloads below it that list none (Z3); the
same key and syntax as the job annotation of Z2, which wins over it."""

T = TypeVar("T")


def attribute_errors(attributes: Mapping[str, str], path: str, *, root: bool) -> list[FieldError]:
    """Every error refusing a node's Z3 attributes, each at the attribute's path under
    ``path`` (``spec.root.attributes``): a value that is not a list of distinct zone names,
    or burst zones marked below the root (a zone is one node pool for the whole tree)."""
    errors: list[FieldError] = []
    for name in (DEFAULT_ZONES_ATTRIBUTE, BURST_ZONES_ATTRIBUTE):
        raw = attributes.get(name)
        if raw is None:
            continue
        field = f"{path}.{name}"
        if name == BURST_ZONES_ATTRIBUTE and not root:
            message = f"{name} may be set on the root only (zones are the whole tree's)"
            errors.append(_invalid(field, message))
            continue
        problem = parse_zone_names(raw)[1]
        if problem is not None:
            errors.append(_invalid(field, problem))
    errors.extend(_toleration_errors(attributes, path, root=root))
    return errors


def _toleration_errors(attributes: Mapping[str, str], path: str, *, root: bool) -> list[FieldError]:
    raw = attributes.get(BURST_TOLERATIONS_ATTRIBUTE)
    if raw is None:
        return []
    field = f"{path}.{BURST_TOLERATIONS_ATTRIBUTE}"
    if not root:
        message = f"{BURST_TOLERATIONS_ATTRIBUTE} may be set on the root only (as burst zones)"
        return [_invalid(field, message)]
    problem = parse_burst_tolerations(raw, sorted(burst_zones(attributes)))[1]
    return [] if problem is None else [_invalid(field, problem)]


def zone_tolerations(root_attributes: Mapping[str, str], zone: Zone) -> tuple[Toleration, ...]:
    """The tolerations the pods of a workload admitted into ``zone`` get (Z3): none unless
    it is a burst zone; then those the root's ``usher.io/burst-tolerations`` names for it,
    else the virtual kubelet's (``DEFAULT_TOLERATIONS``)."""
    burst = burst_zones(root_attributes)
    if zone not in burst:
        return ()
    raw = root_attributes.get(BURST_TOLERATIONS_ATTRIBUTE)
    named = parse_burst_tolerations(raw, sorted(burst))[0] if raw is not None else {}
    return named.get(zone, DEFAULT_TOLERATIONS)


def burst_zones(root_attributes: Mapping[str, str]) -> frozenset[Zone]:
    """The burst zones the root marks (empty: none, or a value T1 refuses)."""
    raw = root_attributes.get(BURST_ZONES_ATTRIBUTE)
    return frozenset(parse_zone_names(raw)[0]) if raw is not None else frozenset()


def default_zones(attributes: Mapping[str, str], inherited: tuple[Zone, ...]) -> tuple[Zone, ...]:
    """A node's default accepted zones: its own ``usher.io/zones`` when set and valid, else
    what it inherits (the root inherits none)."""
    raw = attributes.get(DEFAULT_ZONES_ATTRIBUTE)
    if raw is None:
        return inherited
    zones, problem = parse_zone_names(raw)
    return tuple(zones) if problem is None else inherited


def tree_accepted(default: Sequence[Zone], home: Zone) -> tuple[Zone, ...]:
    """The zones a workload of zone ``home`` accepts from its node's default list: the list
    from ``home`` on (the zones the tree prefers after it, never one it prefers before the
    zone the job names); none when ``home`` is not listed or is the last (it stays alone)."""
    if home not in default:
        return ()
    rest = tuple(default[default.index(home) :])
    return rest if len(rest) > 1 else ()


def try_order(zones: Sequence[Zone], burst: Collection[Zone]) -> Sequence[Zone]:
    """The order a workload's accepted zones are tried in: the non-burst ones first, then the
    burst ones, each part in the listed order. ``zones`` itself when no zone is burst."""
    if not burst or not any(zone in burst for zone in zones):
        return zones
    return (*(z for z in zones if z not in burst), *(z for z in zones if z in burst))


def burst_first(
    candidates: Iterable[T],
    burst: Collection[Zone],
    zone_of: Callable[[T], Zone],
    priority_of: Callable[[T], int],
) -> Iterator[T]:
    """Reclaim candidates (already in R5's order, so priorities ascend) with, among each run
    of one priority, those in a burst zone first, each part in its order. Lazy: it reads
    ahead no further than the first candidate of the next priority."""
    if not burst:
        yield from candidates
        return
    run: list[T] = []
    for candidate in candidates:
        if run and priority_of(candidate) != priority_of(run[0]):
            yield from _burst_part_first(run, burst, zone_of)
            run = []
        run.append(candidate)
    yield from _burst_part_first(run, burst, zone_of)


def _burst_part_first(
    run: list[T], burst: Collection[Zone], zone_of: Callable[[T], Zone]
) -> Iterator[T]:
    yield from (c for c in run if zone_of(c) in burst)
    yield from (c for c in run if zone_of(c) not in burst)


def _invalid(field: str, message: str) -> FieldError:
    return FieldError(path=field, code="invalid-attribute", message=message)
