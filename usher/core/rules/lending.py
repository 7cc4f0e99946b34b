"""Lending of idle guarantees and whom a reclaim may take from (docs/admission-rules.md L1, L2).

What it does: one notion of a node's *lendable idle guarantee*, shared by the engine (which
proposes) and the ledger (which re-checks against its own rows, R8):

* ``Lending`` is a node's policy, inherited down the tree (``node_lending``/``path_lending``):
  ``usher.io/reclaim-within`` (L1: ``Any``, ``LowerPriority`` or ``Never`` -- Kueue's
  ``reclaimWithinCohort``) and ``usher.io/lending-limit`` (L2: per resource, at most that much
  of the node's idle guarantee is lent -- Kueue's ``lendingLimit``). ``Never`` lends nothing:
  a guarantee that could not be taken back is not lent, i.e. a lending limit of 0.
* ``kept`` is what a node's subtree keeps of its idle guarantee (``min - used``, above 0) for
  itself: the part above what it lends, or what nodes below it keep, whichever is more.
* ``lending_shortfall`` checks a request on the whole path root..leaf: at every ancestor
  ``used + requested + kept <= cap``, ``kept`` summing what the subtrees beside the path keep
  (the request's own path keeps nothing from it: the guarantee is its subtree's).
* ``reclaim_refusal`` is L1 on one victim of another leaf: ``Never`` takes none,
  ``LowerPriority`` only a strictly lower-priority one.

A tree that sets neither attribute keeps nothing (``reserving`` is empty) and reclaims from
any borrower: every decision is today's.
What it must never do: perform I/O, read a clock, word a reason itself (``reasons`` does), or
be asked for a node's policy anywhere but through ``node_lending``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

from schemas import QuotaPath, Reason, WorkloadKey
from usher.core.model import reasons
from usher.core.values.registry import LENDING_LIMIT, RECLAIM_WITHIN

ReclaimWithin = Literal["Any", "LowerPriority", "Never"]


@dataclass(frozen=True, slots=True)
class Lending:
    """A node's lending policy: whom its leaves reclaim from (L1), what it lends (L2)."""

    reclaim: ReclaimWithin = "Any"
    limit: Mapping[str, int] = field(default_factory=dict)
    """Per resource, the most of its idle guarantee it lends; a resource absent: no limit."""

    @property
    def restricted(self) -> bool:
        """Whether it keeps some idle guarantee for itself (else it lends all of it)."""
        return self.reclaim == "Never" or bool(self.limit)

    def lendable(self, resource: str) -> int | None:
        """The most of its idle ``resource`` it lends; None: all of it."""
        if self.reclaim == "Never":
            return 0  # it could not take it back
        return self.limit.get(resource)


LENDS_ALL: Final = Lending()
"""The policy of a tree that sets neither attribute: today's behaviour."""


def node_lending(attributes: Mapping[str, str], inherited: Lending) -> Lending:
    """A node's policy: its own attributes where set and valid, else what it inherits."""
    reclaim = RECLAIM_WITHIN.read(attributes)
    limit = LENDING_LIMIT.read(attributes)
    if reclaim is None and limit is None:
        return inherited
    chosen: ReclaimWithin = inherited.reclaim
    if reclaim == "Never":
        chosen = "Never"
    elif reclaim == "LowerPriority":
        chosen = "LowerPriority"
    elif reclaim == "Any":
        chosen = "Any"
    return Lending(chosen, inherited.limit if limit is None else dict(limit))


def path_lending(chain: Iterable[Mapping[str, str]]) -> Lending:
    """The policy of the last node of ``chain`` (attributes root..node)."""
    policy = LENDS_ALL
    for attributes in chain:
        policy = node_lending(attributes, policy)
    return policy


class LendingNode(Protocol):
    """One tree node as lending reads it: its guarantee, what counts there, its policy."""

    @property
    def path(self) -> QuotaPath: ...

    @property
    def min(self) -> Mapping[str, int]: ...

    @property
    def used(self) -> Mapping[str, int]: ...

    @property
    def cap(self) -> Mapping[str, int]: ...

    @property
    def children(self) -> Sequence[QuotaPath]: ...

    @property
    def lending(self) -> Lending: ...


def reserving_nodes(
    nodes: Iterable[tuple[QuotaPath, QuotaPath | None, Lending]],
) -> frozenset[QuotaPath]:
    """The nodes that keep something or have one below that does (``(path, parent, policy)``
    parents first): only these are walked by ``kept``; empty when no node restricts."""
    parent_of: dict[QuotaPath, QuotaPath | None] = {}
    found: set[QuotaPath] = set()
    for path, parent, policy in nodes:
        parent_of[path] = parent
        if not policy.restricted:
            continue
        at: QuotaPath | None = path
        while at is not None and at not in found:
            found.add(at)
            at = parent_of.get(at)
    return frozenset(found)


def kept(
    node: LendingNode,
    nodes: Mapping[QuotaPath, LendingNode],
    reserving: Collection[QuotaPath],
    resource: str,
) -> int:
    """What ``node``'s subtree keeps of its idle ``resource`` guarantee for itself: above what
    it lends (L1 ``Never``: all of it; L2: above its limit), or what nodes below keep."""
    idle = max(0, node.min.get(resource, 0) - node.used.get(resource, 0))
    lendable = node.lending.lendable(resource)
    own = 0 if lendable is None else max(0, idle - lendable)
    below = sum(
        kept(nodes[child], nodes, reserving, resource)
        for child in node.children
        if child in reserving and child in nodes
    )
    return max(own, min(below, idle))


@dataclass(frozen=True, slots=True)
class LendingShortfall:
    """Where a request would take idle guarantee others keep (L1, L2): on ``node``,
    ``used + requested + kept > cap`` for ``resource`` (though ``used + requested`` fits)."""

    node: QuotaPath
    resource: str
    used: int
    requested: int
    kept: int
    cap: int


def lending_shortfall(
    path: Sequence[LendingNode],
    nodes: Mapping[QuotaPath, LendingNode],
    reserving: Collection[QuotaPath],
    request: Sequence[tuple[str, int]],
) -> LendingShortfall | None:
    """The nearest node of ``path`` (root..leaf) where ``request`` would take idle guarantee
    that subtrees beside the path keep; None when it takes none (or none is kept)."""
    if not reserving:
        return None
    beside: dict[str, int] = {}
    for depth in range(len(path) - 1, -1, -1):
        node = path[depth]
        mine = path[depth + 1].path if depth + 1 < len(path) else None
        for child in node.children:
            if child != mine and child in reserving and child in nodes:
                for resource, _ in request:
                    amount = kept(nodes[child], nodes, reserving, resource)
                    beside[resource] = beside.get(resource, 0) + amount
        for resource, amount in request:
            keep = beside.get(resource, 0)
            cap = node.cap.get(resource)
            if amount == 0 or keep == 0 or cap is None:
                continue
            used = node.used.get(resource, 0)
            if used + amount + keep > cap:
                return LendingShortfall(node.path, resource, used, amount, keep, cap)
    return None


def lending_refused(short: LendingShortfall) -> Reason:
    """The ``GuaranteeNotLent`` reason that names ``short`` and its numbers."""
    return reasons.guarantee_not_lent(
        short.node, short.resource, short.used, short.requested, short.kept, short.cap
    )


def may_reclaim_from(policy: Lending, priority: int, victim_priority: int | None) -> bool:
    """L1: whether a preemptor of ``priority`` under ``policy`` may take a borrower of another
    leaf (``victim_priority`` None: an ended victim, only its allocation lingers)."""
    if policy.reclaim == "Never":
        return False
    if policy.reclaim == "LowerPriority":
        return victim_priority is None or victim_priority < priority
    return True


def reclaim_refusal(
    policy: Lending,
    preemptor: WorkloadKey,
    priority: int,
    victim: WorkloadKey,
    victim_priority: int | None,
) -> Reason | None:
    """Why L1 spares ``victim`` (a borrower of another leaf) from ``preemptor``; None: it
    may be taken."""
    if may_reclaim_from(policy, priority, victim_priority):
        return None
    return reasons.reclaim_not_allowed(preemptor, priority, victim, victim_priority, policy.reclaim)


__all__ = [
    "LENDS_ALL",
    "Lending",
    "LendingNode",
    "LendingShortfall",
    "ReclaimWithin",
    "kept",
    "lending_refused",
    "lending_shortfall",
    "may_reclaim_from",
    "node_lending",
    "path_lending",
    "reclaim_refusal",
    "reserving_nodes",
]
