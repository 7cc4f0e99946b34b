"""TP1 topology fit: whether a gang fits in one domain of a topology level, and which domain.

What it does: a topology level is a node label (``topology.usher.io/rack``); its domains are
the values the schedulable nodes of a zone carry for it, each the set of nodes carrying that
value. A domain's room is what its nodes allocate minus what every admission pinned to nodes
it shares uses: all of a pin inside it (a rack of the block), and all of a wider pin that
covers it (a block pin counts in each of the block's racks: its pods may all be there, so a
rack is never promised twice). Work not pinned at all counts in its zone only (the zone room,
section 3), not in any domain. A gang fits a domain when
its whole request is within the domain's room and each of its pods fits some node of it by
allocatable (the zone room's rule, section 3, one domain at a time). ``choose`` answers for an
ask: ``required`` tries its level only; ``preferred`` tries its level, then each wider one
(narrowest first), and else places the gang anywhere in the zone (no pin). Among the domains of
a level that fit, the tightest wins (least left over, resources in name order; then the
domain's name), keeping roomy domains for larger gangs. When none fits, ``choose`` names the
domain with the most room for the gang (the reason's numbers).
What it must never do: read the engine, change what it is given, read a clock, or iterate an
unordered collection where the order could reach a decision (nodes and domains are sorted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from schemas import NodeName, TopologyAsk, TopologyPin

Amounts = Sequence[tuple[str, int]]
"""A request or a pod's request: ``(resource, amount)`` pairs, resources in name order."""


class NodeView(Protocol):
    """One node as the fit reads it (the engine's ``NodeCapacity``)."""

    @property
    def allocatable(self) -> dict[str, int]: ...

    @property
    def unschedulable(self) -> bool: ...

    @property
    def labels(self) -> dict[str, str]: ...


@dataclass(frozen=True, slots=True)
class DomainRoom:
    """One domain of a level, with what it allocates and has free for a gang."""

    level: str
    domain: str
    free: dict[str, int]
    """Its schedulable nodes' allocatable minus the usage pinned inside it."""
    holds_each_pod: bool
    """Every pod of the gang fits some schedulable node of it by allocatable."""

    def fits(self, request: Amounts) -> bool:
        return self.holds_each_pod and all(
            amount <= self.free.get(resource, 0) for resource, amount in request
        )

    def room_for(self, request: Amounts) -> Fraction:
        """The share of ``request`` its free room holds (1 or more: all of it)."""
        if not self.holds_each_pod:
            return Fraction(0)
        shares = [
            Fraction(max(self.free.get(resource, 0), 0), amount)
            for resource, amount in request
            if amount > 0
        ]
        return min(shares, default=Fraction(1))

    def left_over(self, request: Amounts) -> tuple[int, ...]:
        asked = dict(request)
        return tuple(self.free.get(resource, 0) - asked[resource] for resource in sorted(asked))


@dataclass(frozen=True, slots=True)
class Choice:
    """``choose``'s answer: whether the gang may be admitted, and where."""

    fits: bool
    pin: TopologyPin | None = None
    """The domain chosen for every pod; None: anywhere in the zone (or it does not fit)."""
    best: DomainRoom | None = None
    """When it does not fit: the asked level's domain with the most room for it (None: the
    zone has no schedulable node carrying that level)."""


def candidate_levels(ask: TopologyAsk, levels: Sequence[str]) -> list[str]:
    """The levels tried for ``ask``, narrowest first: its own; for a preferred ask, then each
    wider one. Empty when the tree names no such level (a required ask never fits then)."""
    if ask.level not in levels:
        return []
    if ask.required:
        return [ask.level]
    return list(reversed(levels[: levels.index(ask.level) + 1]))


def domains_of(nodes: Mapping[NodeName, NodeView], level: str) -> dict[str, list[NodeName]]:
    """Each domain of ``level`` -> its schedulable nodes, both sorted by name."""
    found: dict[str, list[NodeName]] = {}
    for name in sorted(nodes):
        node = nodes[name]
        value = node.labels.get(level)
        if value is not None and not node.unschedulable:
            found.setdefault(value, []).append(name)
    return dict(sorted(found.items()))


def rooms(
    nodes: Mapping[NodeName, NodeView],
    level: str,
    pinned: Sequence[tuple[TopologyPin, Amounts]],
    pods: Sequence[Amounts],
) -> list[DomainRoom]:
    """Every domain of ``level`` with its free room and whether it holds each of ``pods``."""
    members = {pin: _members(nodes, pin) for pin, _ in pinned}
    found = []
    for domain, names in domains_of(nodes, level).items():
        inside = set(names)
        free: dict[str, int] = {}
        for name in names:
            for resource, amount in nodes[name].allocatable.items():
                free[resource] = free.get(resource, 0) + amount
        for pin, used in pinned:
            if members[pin] & inside:
                for resource, amount in used:
                    free[resource] = free.get(resource, 0) - amount
        holds = all(any(_fits_node(pod, nodes[name].allocatable) for name in names) for pod in pods)
        found.append(DomainRoom(level, domain, free, holds))
    return found


def choose(
    ask: TopologyAsk,
    levels: Sequence[str],
    nodes: Mapping[NodeName, NodeView],
    pinned: Sequence[tuple[TopologyPin, Amounts]],
    pods: Sequence[Amounts],
    request: Amounts,
) -> Choice:
    """Where ``request`` (its pods ``pods``) goes for ``ask`` (the module's rule)."""
    tried = candidate_levels(ask, levels)
    for level in tried:
        fitting = [room for room in rooms(nodes, level, pinned, pods) if room.fits(request)]
        if fitting:
            chosen = min(fitting, key=lambda room: (room.left_over(request), room.domain))
            return Choice(fits=True, pin=TopologyPin(level=level, domain=chosen.domain))
    if not ask.required:
        return Choice(fits=True)
    if not tried:
        return Choice(fits=False)
    every = rooms(nodes, ask.level, pinned, pods)
    best = min(every, key=lambda room: (-room.room_for(request), room.domain), default=None)
    return Choice(fits=False, best=best)


def _members(nodes: Mapping[NodeName, NodeView], pin: TopologyPin) -> frozenset[NodeName]:
    return frozenset(
        name for name, node in nodes.items() if node.labels.get(pin.level) == pin.domain
    )


def _fits_node(pod: Amounts, allocatable: dict[str, int]) -> bool:
    return all(amount <= allocatable.get(resource, 0) for resource, amount in pod)


def slots(room: DomainRoom, pod: Amounts) -> int:
    """How many pods asking ``pod`` a domain's free room holds (0 when no node holds one)."""
    if not room.holds_each_pod:
        return 0
    counts = [max(room.free.get(resource, 0), 0) // amount for resource, amount in pod if amount]
    return min(counts, default=0)
