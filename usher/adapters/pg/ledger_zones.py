"""The ledger's check of quota per zone (docs/admission-rules.md Z1), over its own rows.

What it does: ``ZoneBook.load`` reads, for the paths of a batch of reservations, every node that
caps a zone (its ``usher.io/zone-max`` attribute, as the tree rows keep it) and what the
ledger's counted allocations (``reserved``, ``admitted``, ``held``: what the engine counts in a
zone) hold in each such zone below it; ``refusal`` answers the core's ``ZoneQuotaExceeded``
for a reservation that would overfill one, and ``add`` counts a grant so that later ones of the
same batch see it. The caller has already locked the ``quota_usage`` rows of every path
(``ledger_store._lock_usage``): any two reservations below one capping node lock its rows for
the resources they share, so the allocation rows read here cannot change under the check.
``ZoneGuarantees.load`` reads, for a reclaim's leaves, their guarantees per zone
(``usher.io/zone-min``, Z4) and their claims (``admitted`` and ``held``, stopping victims
aside, as for ``min``) in the preemptor's zone, so that the store's reclaim check judges
"within its guarantee" and "borrowing" per zone as the engine does.
What it must never do: lock or write anything (the store does), read before the usage locks
are held, or differ from the engine's checks (it calls the core's ``zone_shortfall``,
``within_zone_min`` and ``zone_borrowed_resource``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table, select
from sqlalchemy.ext.asyncio import AsyncConnection

from schemas import QuotaPath, Reason, Zone
from schemas.ledger import Reservation
from usher.adapters.pg.models import Base
from usher.core.rules.arbitration import CLAIMING, COUNTED
from usher.core.state.indexed import shape_of
from usher.core.tree.quota_tree import path_nodes
from usher.core.tree.zone_quota import (
    ZoneCaps,
    parse_zone_max,
    parse_zone_min,
    within_zone_min,
    zone_borrowed_resource,
    zone_quota_exceeded,
    zone_shortfall,
)

_NODES: Table = Base.metadata.tables["quota_nodes"]
_ALLOCATIONS: Table = Base.metadata.tables["allocations"]


@dataclass
class _CappedNode:
    """One node that caps some zone, as ``zone_shortfall`` reads it."""

    path: QuotaPath
    zone_max: ZoneCaps
    zone_used: ZoneCaps = field(default_factory=dict)


@dataclass
class ZoneBook:
    """The capping nodes above a batch's leaves and their usage per capped zone."""

    nodes: dict[QuotaPath, _CappedNode] = field(default_factory=dict)

    @classmethod
    async def load(cls, conn: AsyncConnection, leaves: Iterable[QuotaPath]) -> ZoneBook:
        prefixes = {p for leaf in leaves for p in path_nodes(leaf)}
        if not prefixes:
            return cls()
        rows = await conn.execute(
            select(_NODES.c.path, _NODES.c.attributes).where(_NODES.c.path.in_(prefixes))
        )
        return await cls.of_nodes(conn, [(p, dict(a or {})) for p, a in rows], leaves)

    @classmethod
    async def of_nodes(
        cls,
        conn: AsyncConnection,
        nodes: Iterable[tuple[str, dict[str, Any]]],
        leaves: Iterable[QuotaPath],
    ) -> ZoneBook:
        """The book of ``leaves`` from the (path, attributes) of the nodes on their paths, as
        the caller read them; reads the counted allocations only when some node caps a zone."""
        prefixes = {p for leaf in leaves for p in path_nodes(leaf)}
        book = cls()
        for path, attributes in nodes:
            caps, _ = parse_zone_max(attributes, "")
            if caps and path in prefixes:
                book.nodes[QuotaPath(path)] = _CappedNode(QuotaPath(path), caps)
        if book.nodes:
            await book._count(conn)
        return book

    async def _count(self, conn: AsyncConnection) -> None:
        zones = sorted({zone for node in self.nodes.values() for zone in node.zone_max})
        rows = await conn.execute(
            select(_ALLOCATIONS.c.quota_path, _ALLOCATIONS.c.zone, _ALLOCATIONS.c.requests).where(
                _ALLOCATIONS.c.zone.in_(zones),
                _ALLOCATIONS.c.state.in_([state.value for state in COUNTED]),
            )
        )
        for quota, zone, requests in rows:
            self.add(QuotaPath(quota), Zone(zone), dict(requests))

    def _path(self, leaf: QuotaPath) -> Sequence[_CappedNode]:
        return [self.nodes[p] for p in path_nodes(leaf) if p in self.nodes]

    def refusal(self, item: Reservation) -> Reason | None:
        """``ZoneQuotaExceeded`` naming the nearest node whose cap in the item's zone it would
        exceed (Z1), or None."""
        short = zone_shortfall(self._path(item.quota), item.zone, shape_of(item.requests))
        return None if short is None else zone_quota_exceeded(short)

    def add(self, leaf: QuotaPath, zone: Zone, requests: dict[str, int]) -> None:
        """Count ``requests`` in ``zone`` on the capping nodes of ``leaf``'s path."""
        for node in self._path(leaf):
            if zone not in node.zone_max:
                continue
            used = node.zone_used.setdefault(zone, {})
            for resource, amount in requests.items():
                used[resource] = used.get(resource, 0) + amount


@dataclass
class ZoneGuarantees:
    """Z4 on the ledger's rows: a reclaim's leaves' guarantees and claims in one zone."""

    zone: Zone
    minimums: dict[QuotaPath, ZoneCaps] = field(default_factory=dict)
    claims: dict[QuotaPath, ZoneCaps] = field(default_factory=dict)

    @classmethod
    async def load(
        cls, conn: AsyncConnection, leaves: Iterable[QuotaPath], zone: Zone
    ) -> ZoneGuarantees:
        """The leaves' ``usher.io/zone-min`` and, when one of them declares any, their claims
        in ``zone`` (a tree with no zone guarantee costs one read of the leaves' rows)."""
        book = cls(zone)
        wanted = sorted(set(leaves))
        rows = await conn.execute(
            select(_NODES.c.path, _NODES.c.attributes).where(_NODES.c.path.in_(wanted))
        )
        for path, attributes in rows:
            minimums, _ = parse_zone_min(dict(attributes or {}), "")
            if minimums:
                book.minimums[QuotaPath(path)] = minimums
        if book.minimums:
            await book._count(conn, wanted)
        return book

    async def _count(self, conn: AsyncConnection, leaves: list[QuotaPath]) -> None:
        rows = await conn.execute(
            select(_ALLOCATIONS.c.quota_path, _ALLOCATIONS.c.requests).where(
                _ALLOCATIONS.c.quota_path.in_(leaves),
                _ALLOCATIONS.c.zone == self.zone,
                _ALLOCATIONS.c.state.in_([state.value for state in CLAIMING]),
            )
        )
        for quota, requests in rows:
            self.add(QuotaPath(quota), self.zone, dict(requests), 1)

    def within(self, leaf: QuotaPath, request: Sequence[tuple[str, int]]) -> bool:
        """Whether ``request`` stays within ``leaf``'s guarantee in the zone, where it declares
        one (the total ``min`` is checked by the store)."""
        return within_zone_min(
            self.minimums.get(leaf, {}), self.claims.get(leaf, {}), self.zone, request
        )

    def borrowing(
        self, owner: QuotaPath, victim: QuotaPath, zone: Zone, request: Sequence[tuple[str, int]]
    ) -> bool:
        """Whether a victim of ``victim``'s leaf running in ``zone`` may go for ``owner``'s
        guarantee in the zone: it runs there, ``owner`` declares a guarantee there, and
        ``victim`` holds more there than it is guaranteed, on a resource asked for."""
        if zone != self.zone or self.zone not in self.minimums.get(owner, {}):
            return False
        held = zone_borrowed_resource(
            self.minimums.get(victim, {}), self.claims.get(victim, {}), self.zone, request
        )
        return held is not None

    def add(self, leaf: QuotaPath, zone: Zone, requests: dict[str, int], sign: int) -> None:
        """Count (``sign`` 1) or take back (-1) ``requests`` in ``leaf``'s claim in ``zone``."""
        if zone != self.zone:
            return
        claim = self.claims.setdefault(leaf, {}).setdefault(zone, {})
        for resource, amount in requests.items():
            claim[resource] = claim.get(resource, 0) + sign * int(amount)
