"""How one pass's decisions are carried out, and in which order they reach the log.

What it does: ``plan_pass`` splits a pass's decisions into what the dequeuer asks of the
others (readiness requeues and drains to the ledger first, then the admissions as one
reservation, then one reclaim per preemptor to the preemptor service; announcements and
retries it publishes itself). ``on_the_log`` is the order the ledger's decisions of a pass
reach the log when everything is granted, which the exact audit (D4) compares with.
What it must never do: perform I/O or decide anything (it only sorts what a pass decided).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas import Admitted, Decision, Inadmissible, Preempted, Requeued, Retried, Unmapped


@dataclass
class PassPlan:
    """What one pass asks of the others: reservations, reclaims and announcements."""

    admissions: list[Admitted] = field(default_factory=list)
    requeues: list[Requeued] = field(default_factory=list)
    retries: list[Retried] = field(default_factory=list)
    drains: list[Preempted] = field(default_factory=list)
    """Preemptions for a drain whose grace ran out (R15): each its own preemptor."""
    reclaims: list[tuple[Admitted, list[Preempted]]] = field(default_factory=list)
    announcements: list[Inadmissible | Unmapped] = field(default_factory=list)

    @property
    def proposes(self) -> bool:
        """Whether the pass asks anyone for anything (what a ``PassRan`` is recorded for)."""
        return bool(
            self.admissions or self.requeues or self.retries or self.drains or self.reclaims
        )


def plan_pass(decisions: list[Decision]) -> PassPlan:
    """Split a pass's decisions: a preemptor's ``Admitted`` follows its victims' ``Preempted``."""
    plan = PassPlan()
    victims: list[Preempted] = []
    for decision in decisions:
        match decision:
            case Preempted() if decision.preemptor == decision.workload:
                plan.drains.append(decision)
            case Preempted():
                victims.append(decision)
            case Admitted():
                mine = [v for v in victims if v.preemptor == decision.workload]
                if mine:
                    plan.reclaims.append((decision, mine))
                    victims = [v for v in victims if v.preemptor != decision.workload]
                else:
                    plan.admissions.append(decision)
            case Inadmissible() | Unmapped():
                plan.announcements.append(decision)
            case Requeued():
                plan.requeues.append(decision)
            case Retried():
                plan.retries.append(decision)
            case _:
                # Released comes from the ledger; Pending is not emitted by passes.
                pass
    return plan


LedgerProposal = Admitted | Preempted | Requeued
"""A pass's proposal the ledger carries out and records on the log itself."""


def on_the_log(plan: PassPlan) -> list[LedgerProposal]:
    """The ledger's decisions of a fully granted pass, in the order they reach the log.

    The dequeuer asks in this order and waits for each answer (requeues and drains, then the
    reservation, then each reclaim), and the ledger's outbox publishes in commit order. A
    reclaim's preemptor is not among them: the ledger admits it later, once its victims are
    seen stopped (R7).
    """
    out: list[LedgerProposal] = [*plan.requeues, *plan.drains, *plan.admissions]
    for _, victims in plan.reclaims:
        out.extend(victims)
    return out
