"""Quota arbitration rules shared by the engine and the ledger (docs/admission-rules.md R2, R7-R8).

What it does: the pure rules both the engine (which proposes) and the ledger (which arbitrates,
against its own rows) apply, so that they judge on one definition:

* the cap of a node: ``floor(max x oversellRate)`` (R2);
* the first shortfall of a request along a path root..leaf: the *nearest* node that would
  exceed its cap, leaf first, resources in name order (R2; the README promises the nearest
  node: the leaf or department a person can act on);
* the allocation states of the ledger and the transitions between them (R7-R8): a grant
  creates ``admitted``, a preemption ``held`` for the preemptor and turns its victims
  ``admitted`` -> ``preempting``; a ``held`` preemptor becomes ``admitted`` once its last
  victim has stopped; every live state ends ``released``; what an observed cluster event does
  to an allocation in each state;
* what a preemption group counts on each (node, resource): ``max(victims, hold)`` (R7), and
  that a preemptor has one group at a time (a preemptor created again waits for its earlier
  victims to stop before it preempts anew).

The reclaim predicates (R5) live beside it in ``usher/core/rules/reclaim.py``.
What it must never do: perform I/O, read a clock, know about SQL or the engine's indexes, or
say why in prose a person reads (the callers turn a ``Shortfall`` into a ``Reason``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Final, Literal, Protocol

from schemas import QuotaPath, Reason, WorkloadKey
from schemas.decisions import ReleaseCause
from usher.core.model import reasons

# ---------------------------------------------------------------------- caps and fit (R2)


def effective_cap(maximum: int, rate: Fraction) -> int:
    """``floor(max x rate)``: with integer usage, ``used <= max x rate`` iff ``used <= cap``."""
    return (maximum * rate.numerator) // rate.denominator


class NodeLoad(Protocol):
    """One node of a path as the fit check reads it: what counts there and its limits.

    ``max`` and ``cap`` name only the resources the node limits; ``used`` is everything the
    ledger counts there (R7), a resource it does not name counting 0.
    """

    @property
    def path(self) -> QuotaPath: ...

    @property
    def used(self) -> Mapping[str, int]: ...

    @property
    def max(self) -> Mapping[str, int]: ...

    @property
    def cap(self) -> Mapping[str, int]: ...


@dataclass(frozen=True, slots=True)
class Load:
    """A ``NodeLoad`` built from plain values (the ledger's rows, or an adjusted view)."""

    path: QuotaPath
    used: Mapping[str, int]
    max: Mapping[str, int]
    cap: Mapping[str, int]

    @classmethod
    def of_limits(
        cls, path: QuotaPath, used: Mapping[str, int], maximum: Mapping[str, int], rate: Fraction
    ) -> Load:
        """The load of a node limited by ``maximum``, its caps worked out at ``rate``."""
        caps = {resource: effective_cap(high, rate) for resource, high in maximum.items()}
        return cls(path=path, used=used, max=maximum, cap=caps)


@dataclass(frozen=True, slots=True)
class Shortfall:
    """Where a request does not fit: ``used + requested > cap`` on ``node`` for ``resource``."""

    node: QuotaPath
    resource: str
    used: int
    requested: int
    maximum: int
    cap: int


def first_shortfall(
    path: Sequence[NodeLoad], request: Sequence[tuple[str, int]]
) -> Shortfall | None:
    """The nearest node of ``path`` (root..leaf) that ``request`` would take above its cap.

    Searched leaf first, then up towards the root; on one node, resources in the order of
    ``request`` (callers give them sorted by name). A zero amount constrains nothing, and a
    node limits only the resources it names in ``max`` (R2). ``None`` when it fits everywhere.
    """
    for node in reversed(path):
        for resource, amount in request:
            if amount == 0:
                continue
            cap = node.cap.get(resource)
            used = node.used.get(resource, 0)
            if cap is None or used + amount <= cap:
                continue
            return Shortfall(node.path, resource, used, amount, node.max[resource], cap)
    return None


def quota_exceeded(shortfall: Shortfall, rate: Fraction) -> Reason:
    """The ``QuotaExceeded`` reason that names ``shortfall`` and its numbers."""
    return reasons.quota_exceeded(
        shortfall.node,
        shortfall.resource,
        shortfall.used,
        shortfall.requested,
        shortfall.maximum,
        shortfall.cap,
        rate,
    )


# ---------------------------------------------------------------------- allocations (R7, R8)


class AllocationState(StrEnum):
    """The state of one allocation row in the ledger (the values are what the rows hold)."""

    RESERVED = "reserved"
    """Written by ledgers before holds existed; counted like ``admitted``, only released."""
    ADMITTED = "admitted"
    HELD = "held"
    """Capacity held for a preemptor whose victims have not all stopped; not admitted yet."""
    PREEMPTING = "preempting"
    """A victim still running: it counts (R7) until its pods are seen stopped."""
    RELEASED = "released"


CREATED: Final[frozenset[AllocationState]] = frozenset(
    {AllocationState.ADMITTED, AllocationState.HELD}
)
"""The states a new allocation starts in: a grant (R2, R8) or a preemptor's hold (R5-R7)."""

TRANSITIONS: Final[Mapping[AllocationState, frozenset[AllocationState]]] = {
    AllocationState.RESERVED: frozenset({AllocationState.RELEASED}),
    AllocationState.ADMITTED: frozenset({AllocationState.PREEMPTING, AllocationState.RELEASED}),
    AllocationState.HELD: frozenset({AllocationState.ADMITTED, AllocationState.RELEASED}),
    AllocationState.PREEMPTING: frozenset({AllocationState.RELEASED}),
    AllocationState.RELEASED: frozenset(),
}
"""Every state a live allocation may move to; ``released`` is final."""

COUNTED: Final[frozenset[AllocationState]] = frozenset(
    {AllocationState.RESERVED, AllocationState.ADMITTED, AllocationState.HELD}
)
"""States of a workload that holds (or is being given) quota for itself: a grant stands."""

CLAIMING: Final[tuple[AllocationState, ...]] = (AllocationState.ADMITTED, AllocationState.HELD)
"""States that count toward a leaf's claim: what stays once stopping victims stop (R5, R7)."""


class IllegalTransition(ValueError):
    """An allocation was asked to move from ``source`` (None: no row yet) to ``target``, which
    ``TRANSITIONS`` (or ``CREATED``) does not allow; the message says what ``source`` allows."""

    def __init__(self, source: AllocationState | None, target: AllocationState, why: str) -> None:
        super().__init__(why)
        self.source = source
        self.target = target


def transition_refusal(source: AllocationState | None, target: AllocationState) -> str | None:
    """Why an allocation in ``source`` (``None``: no row yet) may not become ``target``."""
    if source is None:
        if target in CREATED:
            return None
        return f"an allocation starts {' or '.join(sorted(CREATED))}, not {target}"
    if target in TRANSITIONS[source]:
        return None
    if not TRANSITIONS[source]:
        return f"{source} is final"
    allowed = " or ".join(sorted(TRANSITIONS[source]))
    return f"{source} may become {allowed}, not {target}"


def advance(source: AllocationState | None, target: AllocationState) -> AllocationState:
    """``target``, once ``transition_refusal`` allows it; else ``IllegalTransition``."""
    why = transition_refusal(source, target)
    if why is not None:
        raise IllegalTransition(source, target, why)
    return target


Change = Literal["Finished", "Failed", "Deleted", "Preempted", "Requeued", "Suspended"]
"""What was observed about a workload: a ``ReleaseCause``, or its suspension observed."""


def release_cause(
    state: AllocationState, change: Change, *, before_preemption: bool, requeued: bool = False
) -> ReleaseCause | None:
    """With which cause an observed ``change`` releases an allocation in ``state``; or None.

    A ``preempting`` victim is released by any sign its pods stopped (cause ``Preempted``, or
    ``Requeued`` when it stops for its own requeue for readiness, R10; ``Deleted`` if
    deleted), except a suspension observed before it was preempted
    (``before_preemption``): that says nothing about its pods since. A counted allocation is
    released by its end (finished, failed, deleted, preempted); an observed suspension of it
    changes nothing: an admitted workload may not have been unsuspended yet, a held one is
    suspended until admitted (R7).
    """
    if state == AllocationState.PREEMPTING:
        if change == "Suspended" and before_preemption:
            return None
        if change == "Deleted":
            return "Deleted"
        return "Requeued" if requeued else "Preempted"
    if state in COUNTED and change != "Suspended":
        return change
    return None


def earlier_preemption_refusal(
    preemptor: WorkloadKey, still_stopping: Iterable[WorkloadKey]
) -> Reason | None:
    """Why ``preemptor`` may not preempt now; None when it may (R7).

    A preemption group is one preemptor's hold and its victims until they are seen stopped.
    A preemptor whose hold ended (deleted while held) leaves its victims stopping in their
    group; the same workload, created again, preempts anew only once they have stopped, so
    that one preemptor never has two groups' victims counted as one (R7's ``max(victims,
    hold)`` is for the victims of one hold).
    """
    first = min(still_stopping, default=None)
    return None if first is None else reasons.earlier_preemption_stopping(preemptor, first)


UsageKey = tuple[str, str]
"""(node path, resource) of one usage counter."""


def group_usage(
    hold: Mapping[UsageKey, int] | None, victims: Iterable[Mapping[UsageKey, int]]
) -> dict[UsageKey, int]:
    """What one preemption group counts: ``max(victims, hold)`` per (node, resource) (R7).

    The victims' whole usage until they stop, the preemptor's hold carved out of it; keys in
    sorted order.
    """
    running: dict[UsageKey, int] = {}
    for victim in victims:
        for key, amount in victim.items():
            running[key] = running.get(key, 0) + amount
    held = hold or {}
    return {
        key: max(running.get(key, 0), held.get(key, 0))
        for key in sorted(running.keys() | held.keys())
    }


__all__ = [
    "CLAIMING",
    "COUNTED",
    "CREATED",
    "TRANSITIONS",
    "AllocationState",
    "Change",
    "IllegalTransition",
    "Load",
    "NodeLoad",
    "Shortfall",
    "UsageKey",
    "advance",
    "earlier_preemption_refusal",
    "effective_cap",
    "first_shortfall",
    "group_usage",
    "quota_exceeded",
    "release_cause",
    "transition_refusal",
]
