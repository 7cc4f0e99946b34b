"""Reclaim conditions shared by the engine and the ledger (docs/admission-rules.md R5-R7).

What it does: the pure predicates that decide whether a reclaim may happen, on plain
mappings, so that the engine (which proposes) and the ledger (which carries it out, against its
own rows) apply one definition: a node's *claim* (what counts once stopping victims have
stopped), whether a request stays within a guarantee, which resource makes a leaf borrowing,
and the within-quota / min-runtime policy a node inherits down the tree.
What it must never do: perform I/O, read a clock, or decide anything beyond these predicates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from usher.core.model.config import WithinQuota
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


__all__ = [
    "Amounts",
    "NodePolicy",
    "borrowed_resource",
    "node_policy",
    "path_policy",
    "within_guarantee",
]
