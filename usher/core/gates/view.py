"""What a gate reads and answers: the read-only view of the state, a gate, a refusal.

What it does: ``AdmissionView`` is the narrow, read-only face of the engine's state a gate may
read (the engine implements it with public methods); ``Gate`` is one rule's answer to "may
this workload be offered now" in the shape the chain asks it (whether it shuts the workload,
the reason with numbers, whether a shut workload still stands in its queue, which leaves it
closes, when and on what a shut answer can next change: ``Opening``); ``Refusal`` is the
chain's answer.
What it must never do: hold state, change what it reads, or import the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

import msgspec

from schemas import Millis, QuotaPath, Reason, WorkloadKey, Zone
from usher.core.rules.budgets import BudgetStatus
from usher.core.rules.holds import HoldRecord
from usher.core.state.durable import EngineState
from usher.core.state.indexed import Job
from usher.core.tree.budget_spec import BudgetKey


class AdmissionView(Protocol):
    """The state a gate may read, and the few answers the engine keeps derived from it."""

    @property
    def state(self) -> EngineState: ...

    def decides(self, zone: Zone) -> bool:
        """Whether a pass of this engine decides for ``zone`` (its own, and served)."""
        ...

    def serves(self, zone: Zone) -> bool:
        """Whether some dequeuer decides for ``zone``."""
        ...

    def served_zones(self) -> list[Zone]: ...

    def decides_some_zone(self, job: Job) -> bool:
        """Whether a pass of this engine decides for ``job``: its zone, or one it accepts."""
        ...

    def stopping_for(self, key: WorkloadKey) -> WorkloadKey | None:
        """The preemptor of ``key`` while ``key`` is not seen stopped yet (R7), else None."""
        ...

    def hold_over(self, leaf: QuotaPath) -> HoldRecord | None:
        """The hold nearest to ``leaf`` that stops its admissions (R14), or None."""
        ...

    def spent_budget_over(self, leaf: QuotaPath) -> BudgetStatus | None:
        """The spent budget governing ``leaf`` as of the last refresh (B1), or None."""
        ...

    def budget_statuses(self, now: Millis | None = None) -> dict[BudgetKey, BudgetStatus]:
        """Every budget of the tree in force now (B1, B2)."""
        ...


class Timed(IntEnum):
    """Whether a gate's answer moves with the clock alone (no event)."""

    NEVER = 0
    """Only an event (an order, a release, an announcement, a refresh) changes it."""
    WHEN_SHUT = 1
    """A workload it shuts may open by time alone (a backoff ends)."""
    ALWAYS = 2
    """It may shut a workload by time alone, as well (what a budget has left shrinks)."""


def _never_leaf(view: AdmissionView, leaf: QuotaPath) -> bool:
    return False


def _any_leaf(view: AdmissionView, leaf: QuotaPath) -> bool:
    return True


class Opening(msgspec.Struct, frozen=True, kw_only=True):
    """When a gate's "not now" for one workload can next change: the one answer the start
    estimate reads (and whatever must know when a shut workload may move), from the gate
    that shut it and from nowhere else."""

    at_ms: Millis | None = None
    """The earliest instant the answer can change by time alone (a backoff's end, a budget
    window's reset); None: only an event changes it. Before it, nothing but ``on`` can."""
    on: str
    """What opens it, in a clause for people that follows "not before" (``its backoff ends
    at ...``, ``root/Department-b is resumed``, ``a dequeuer serves zone mars``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Gate:
    """One rule's "not now", as the chain asks it."""

    name: str
    """The rule, as people read it (``R14 hold``)."""
    says: str
    """What shuts the workload, in a clause for people (``a node above it is held (R14)``)."""
    shuts: Callable[[AdmissionView, Job], bool]
    """Whether it keeps the workload from being offered now."""
    reason: Callable[[AdmissionView, Job], Reason]
    """Why, with the numbers (only asked of a workload it shuts)."""
    opens: Callable[[AdmissionView, Job], Opening]
    """When and on what a shut answer can next change (only asked of a workload it shuts):
    every gate says it, so no caller has to guess."""
    stands: bool = False
    """A workload it shuts still stands in its queue: a pass offers it and it fails there, so
    under Block it closes its queue (R7's victims); otherwise a pass passes over it."""
    may_shut: Callable[[AdmissionView, QuotaPath], bool] = _any_leaf
    """Whether it may shut some workload of the leaf now (False: the chain skips it there)."""
    closes: Callable[[AdmissionView, QuotaPath], bool] = _never_leaf
    """Whether it shuts every workload of the leaf but a preemptor the ledger already holds
    capacity for (pruning: such a leaf can only move through that preemptor)."""
    timed: Timed = Timed.NEVER


def stop_gate(
    name: str,
    says: str,
    stop: Callable[[AdmissionView, Job], Reason | None],
    *,
    opens: Callable[[AdmissionView, Job], Opening],
    may_shut: Callable[[AdmissionView, QuotaPath], bool] = _any_leaf,
    closes: Callable[[AdmissionView, QuotaPath], bool] = _never_leaf,
    timed: Timed = Timed.NEVER,
) -> Gate:
    """A gate from one function that says why it shuts a workload, or None."""

    def shuts(view: AdmissionView, job: Job) -> bool:
        return stop(view, job) is not None

    def reason(view: AdmissionView, job: Job) -> Reason:
        found = stop(view, job)
        assert found is not None
        return found

    return Gate(
        name=name,
        says=says,
        shuts=shuts,
        reason=reason,
        may_shut=may_shut,
        closes=closes,
        timed=timed,
        opens=opens,
    )


class Refusal(msgspec.Struct, frozen=True, kw_only=True):
    """The first gate that shuts a workload, and what it says."""

    gate: str
    says: str
    """The gate's clause for people (``Gate.says``)."""
    reason: Reason
    stands: bool
    """A pass still offers it (and it fails there): under Block it closes its queue."""
    opens: Opening
    """When and on what the answer can next change (the gate's ``Gate.opens``)."""

    @property
    def until(self) -> Millis | None:
        """When the answer next changes by time alone; None: only an event changes it."""
        return self.opens.at_ms

    @property
    def timed(self) -> bool:
        return self.opens.at_ms is not None
