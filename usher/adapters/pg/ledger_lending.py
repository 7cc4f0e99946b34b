"""The ledger's check of lent idle guarantees (docs/admission-rules.md L1, L2), over its own rows.

What it does: ``LendingBook.load`` reads whether any node of the tree in force sets
``usher.io/reclaim-within`` or ``usher.io/lending-limit`` (one indexed read; none: the book is
empty and refuses nothing, so a tree without them is arbitrated exactly as before); when one
does, it reads every present node (its parent and attributes, each node's policy inherited down
the tree by the core's ``node_lending``) and the usage rows (``min``, ``max``, ``used``) of the
resources the batch asks for. ``refusal`` answers the core's ``GuaranteeNotLent`` for a
reservation that would take idle guarantee a node beside its path keeps (the core's
``lending_shortfall``, the engine's very check), and ``add`` counts a grant (or takes back a
victim) so that later ones of the same batch see it.
The caller has already locked the usage rows of each reservation's path, root included: every
change to a node's usage also changes the root's row for that resource, so the rows read here
after those locks cannot change under the check.
What it must never do: lock or write anything (the store does), read before the usage locks are
held, or judge lending otherwise than the core's ``lending_shortfall``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final

from sqlalchemy import Table, Text, select
from sqlalchemy.dialects.postgresql import array
from sqlalchemy.ext.asyncio import AsyncConnection

from schemas import QuotaPath, Reason
from schemas.ledger import Reservation
from usher.adapters.pg.models import Base
from usher.core.rules.arbitration import effective_cap
from usher.core.rules.lending import (
    LENDS_ALL,
    Lending,
    lending_refused,
    lending_shortfall,
    node_lending,
    reserving_nodes,
)
from usher.core.state.indexed import shape_of
from usher.core.tree.quota_tree import path_nodes
from usher.core.values.registry import LENDING_LIMIT, RECLAIM_WITHIN

_NODES: Table = Base.metadata.tables["quota_nodes"]
_USAGE: Table = Base.metadata.tables["quota_usage"]

LENDING_KEYS: Final = [RECLAIM_WITHIN.key, LENDING_LIMIT.key]
"""The attributes by which a node restricts lending: a tree with none of them lends all."""


@dataclass
class _Node:
    """One present node as ``lending_shortfall`` reads it."""

    path: QuotaPath
    lending: Lending
    children: list[QuotaPath] = field(default_factory=list)
    min: dict[str, int] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=dict)
    cap: dict[str, int] = field(default_factory=dict)


@dataclass
class LendingBook:
    """The tree's lending policies and usage, when some node restricts lending."""

    nodes: dict[QuotaPath, _Node] = field(default_factory=dict)
    reserving: frozenset[QuotaPath] = frozenset()

    @classmethod
    async def load(
        cls,
        conn: AsyncConnection,
        resources: Collection[str],
        rate: Fraction,
        *,
        restricted: bool | None = None,
    ) -> LendingBook:
        """The book for ``resources``; ``restricted``: whether some present node sets one of
        ``LENDING_KEYS``, when the caller read it already (None: read it here)."""
        book = cls()
        if restricted is None:
            restricted = (
                await conn.scalar(
                    select(_NODES.c.path)
                    .where(
                        _NODES.c.present,
                        _NODES.c.attributes.has_any(array(LENDING_KEYS, type_=Text)),
                    )
                    .limit(1)
                )
                is not None
            )
        if not restricted or not resources:
            return book
        rows = await conn.execute(
            select(_NODES.c.path, _NODES.c.parent_path, _NODES.c.attributes).where(_NODES.c.present)
        )
        # Parents first, each level in path order: a node inherits its parent's policy.
        found = sorted(rows, key=lambda row: (str(row.path).count("/"), str(row.path)))
        parents: dict[QuotaPath, QuotaPath | None] = {}
        for row in found:
            path = QuotaPath(row.path)
            parent = QuotaPath(row.parent_path) if row.parent_path is not None else None
            above = book.nodes.get(parent) if parent is not None else None
            inherited = above.lending if above is not None else LENDS_ALL
            book.nodes[path] = _Node(path, node_lending(dict(row.attributes or {}), inherited))
            parents[path] = parent
            if above is not None:
                above.children.append(path)
        book.reserving = reserving_nodes(
            (path, parents[path], node.lending) for path, node in book.nodes.items()
        )
        await book._count(conn, sorted(resources), rate)
        return book

    async def _count(self, conn: AsyncConnection, resources: list[str], rate: Fraction) -> None:
        rows = await conn.execute(
            select(_USAGE.c.path, _USAGE.c.resource, _USAGE.c.min, _USAGE.c.max, _USAGE.c.used)
            .where(_USAGE.c.resource.in_(resources))
            .order_by(_USAGE.c.path, _USAGE.c.resource)
        )
        for path, resource, low, high, used in rows:
            node = self.nodes.get(QuotaPath(path))
            if node is None:
                continue  # a dropped node: its usage counts on the present prefixes too
            node.min[resource] = int(low)
            node.used[resource] = int(used)
            if high is not None:
                node.cap[resource] = effective_cap(int(high), rate)

    def refusal(self, item: Reservation) -> Reason | None:
        """``GuaranteeNotLent`` naming the nearest node where ``item`` would take idle
        guarantee a node beside its path keeps (L1, L2), or None."""
        if not self.reserving:
            return None
        path = [self.nodes[p] for p in path_nodes(item.quota) if p in self.nodes]
        short = lending_shortfall(path, self.nodes, self.reserving, shape_of(item.requests))
        return None if short is None else lending_refused(short)

    def add(self, leaf: QuotaPath, requests: Iterable[tuple[str, int]], sign: int = 1) -> None:
        """Count (``sign`` 1) or take back (-1) ``requests`` on the present nodes of ``leaf``'s
        path, as the store does on its usage rows."""
        if not self.reserving:
            return
        amounts = list(requests)
        for path in path_nodes(leaf):
            node = self.nodes.get(path)
            if node is None:
                continue
            for resource, amount in amounts:
                node.used[resource] = node.used.get(resource, 0) + sign * amount
