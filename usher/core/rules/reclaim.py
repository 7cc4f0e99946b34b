"""Reclaim conditions shared by the engine and the ledger (docs/admission-rules.md R5-R7).

What it does: the pure predicates that decide whether a reclaim may happen, on plain
mappings, so that the engine (which proposes) and the ledger (which carries it out, against its
own rows) apply one definition: a node's *claim* (what counts once stopping victims have
stopped), whether a request stays within a guarantee, which resource makes a leaf borrowing,
the within-quota / min-runtime policy a node inherits down the tree, and whether one victim may
be preempted for a preemptor (``victim_refusal``, R5-R6: the engine's check of a proposed
reclaim and the ledger's re-check against its rows are this one function).
What it must never do: perform I/O, read a clock, or decide anything beyond these predicates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from schemas import QuotaPath, Reason, WorkloadKey
from usher.core.model import reasons
from usher.core.model.config import WithinQuota
from usher.core.rules.lending import LENDS_ALL, Lending, reclaim_refusal
from usher.core.values.registry import MIN_RUNTIME, WITHIN_QUOTA

Amounts = Mapping[str, int]
NodePolicy = tuple[WithinQuota, int]
"""A node's within-quota mode and minimum runtime in milliseconds."""

_EMPTY: dict[str, int] = {}


def within_guarantee(
    used: Amounts, stopping: Amounts, minimum: Amounts, request: Iterable[tuple[str, int]]
) -> bool:
    """Whether ``request`` fits under ``min`` on top of the node's claim (``used - stopping``).

    The claim leaves out what victims already chosen still hold while they stop: a guarantee
    is judged on what stays once they have stopped (R7).
    """
    for resource, amount in request:
        claim = used.get(resource, 0) - stopping.get(resource, 0)
        if claim + amount > minimum.get(resource, 0):
            return False
    return True


def borrowed_resource(
    used: Amounts, stopping: Amounts, minimum: Amounts, request: Iterable[tuple[str, int]]
) -> str | None:
    """The first resource of ``request`` (in its order) the node holds above its ``min``.

    A leaf is *borrowing* what a reclaim asks for when its claim exceeds its guarantee on a
    resource the preemptor needs (R5); ``None`` when it borrows none of them.
    """
    for resource, _ in request:
        if used.get(resource, 0) - stopping.get(resource, 0) > minimum.get(resource, 0):
            return resource
    return None


def node_policy(attributes: Mapping[str, str], inherited: NodePolicy) -> NodePolicy:
    """A node's policy: its own attributes where set and valid, else what it inherits."""
    within, runtime = inherited
    raw_within = WITHIN_QUOTA.read(attributes)
    if raw_within == "Never":
        within = "Never"
    elif raw_within == "LowerPriority":
        within = "LowerPriority"
    seconds = MIN_RUNTIME.read(attributes)
    if seconds is not None:
        runtime = seconds * 1000
    return within, runtime


def path_policy(chain: Sequence[Mapping[str, str]], default: NodePolicy) -> NodePolicy:
    """The policy of the last node of ``chain`` (attributes root..node), defaults first."""
    policy = default
    for attributes in chain:
        policy = node_policy(attributes, policy)
    return policy


def victim_refusal(
    preemptor: WorkloadKey,
    preemptor_leaf: QuotaPath,
    preemptor_priority: int,
    victim: WorkloadKey,
    victim_leaf: QuotaPath,
    victim_priority: int | None,
    *,
    ran_ms: int | None,
    min_runtime_ms: int,
    lower_priority: bool,
    within: bool,
    borrowing: bool,
    lending: Lending = LENDS_ALL,
) -> Reason | None:
    """Why ``victim`` (counting on ``victim_leaf``) may not be preempted for ``preemptor``; None
    when it may (R5, R6).

    In order: a victim that ran ``ran_ms`` < ``min_runtime_ms`` is protected (``ran_ms`` None:
    it has already ended and only its allocation lingers, so no runtime protects it); on the
    preemptor's own leaf only a strictly lower-priority victim, where ``lower_priority``
    (within-quota ``LowerPriority``) is in force; on another leaf only with the preemptor
    ``within`` its guarantee and the victim's leaf ``borrowing`` a resource it asks, and
    only a victim the preemptor's ``lending`` policy lets it reclaim from (L1). A
    ``victim_priority`` of None (an ended victim) is of no priority to compare.
    """
    if ran_ms is not None and ran_ms < min_runtime_ms:
        return reasons.victim_within_min_runtime(preemptor, victim, ran_ms, min_runtime_ms)
    if victim_leaf == preemptor_leaf:
        if lower_priority and victim_priority is not None and victim_priority < preemptor_priority:
            return None
        return reasons.victim_not_lower_priority(preemptor, victim, victim_leaf)
    if not within:
        return reasons.beyond_guarantee(preemptor, preemptor_leaf, victim)
    if not borrowing:
        return reasons.victim_not_borrowing(preemptor, victim, victim_leaf)
    return reclaim_refusal(lending, preemptor, preemptor_priority, victim, victim_priority)


__all__ = [
    "Amounts",
    "NodePolicy",
    "borrowed_resource",
    "node_policy",
    "path_policy",
    "victim_refusal",
    "within_guarantee",
]
