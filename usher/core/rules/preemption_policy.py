"""Who may preempt whom beyond R5's defaults (docs/admission-rules.md P1-P3), for the engine and
the ledger alike.

What it does: ``PreemptionPolicy`` is what a leaf inherits down the tree from three attributes
(``preemption_policy``, ``path_preemption_policy``): P1 ``usher.io/reclaim-with-own-victims``
(the guarantee is judged with the preemptor's own victims set aside, so one search takes them
and other leaves' borrowers together: ``claim_without``), P2 ``usher.io/preempt-while-borrowing``
(a request beyond the guarantee may take other leaves' borrowers of lower priority, at most a
threshold, from what they borrow beyond their own guarantee: ``takes_while_borrowing``,
``lender_keeps_guarantee``), P3 ``usher.io/within-quota-request`` (only a request
within the leaf's ``min`` preempts in its own leaf: ``preempts_in_leaf``). ``policy_refusal``
is the check both the engine's victim search (and its check of a proposed reclaim) and the
ledger's re-check ask before ``reclaim.victim_refusal``, so they cannot disagree. Every
default is today's R5: nothing here refuses or allows anything a tree does not ask for.
What it must never do: perform I/O, read a clock, word a reason itself (``reasons`` does), or
decide a victim set (the engine's ``reclaim_search`` does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from schemas import QuotaPath, Reason, WorkloadKey
from usher.core.model import reasons
from usher.core.values.registry import (
    PREEMPT_WHILE_BORROWING,
    RECLAIM_WITH_OWN_VICTIMS,
    WITHIN_QUOTA_REQUEST,
)

Amounts = Mapping[str, int]


@dataclass(frozen=True, slots=True)
class WhileBorrowing:
    """P2 ``LowerPriority``: a victim of another leaf below the preemptor's priority and, with a
    ``threshold``, at most it; ``LowerPriorityBorrowersOnly`` (``borrowers_only``): and only
    while its leaf keeps its guarantee once it has left."""

    threshold: int | None = None
    borrowers_only: bool = False


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    """A leaf's preemption policy (P1-P3); the defaults are R5 as it always was."""

    with_own_victims: bool = False
    """P1: the guarantee is judged with the preemptor's own victims set aside."""
    while_borrowing: WhileBorrowing | None = None
    """P2: None is ``Never`` (only a request within the guarantee takes other leaves' work)."""
    request_within_min: bool = False
    """P3 ``WithinMin``: only a request within ``min`` preempts in its own leaf."""


DEFAULT_POLICY = PreemptionPolicy()


def preemption_policy(
    attributes: Mapping[str, str], inherited: PreemptionPolicy
) -> PreemptionPolicy:
    """A node's policy: its own attributes where set and valid, else what it inherits (the
    tree's validation, T1, refuses invalid values; reading skips them, so a tree read back from
    the ledger cannot raise here)."""
    policy = inherited
    own = RECLAIM_WITH_OWN_VICTIMS.read(attributes)
    if own is not None and own != policy.with_own_victims:
        policy = replace(policy, with_own_victims=own)
    borrowing = PREEMPT_WHILE_BORROWING.read(attributes)
    if borrowing is not None:
        mode, threshold = borrowing
        only = mode == "LowerPriorityBorrowersOnly"
        wanted = None if mode == "Never" else WhileBorrowing(threshold, borrowers_only=only)
        if wanted != policy.while_borrowing:
            policy = replace(policy, while_borrowing=wanted)
    request = WITHIN_QUOTA_REQUEST.read(attributes)
    if request is not None and (request == "WithinMin") != policy.request_within_min:
        policy = replace(policy, request_within_min=request == "WithinMin")
    return policy


def path_preemption_policy(chain: Sequence[Mapping[str, str]]) -> PreemptionPolicy:
    """The policy of the last node of ``chain`` (attributes root..node)."""
    policy = DEFAULT_POLICY
    for attributes in chain:
        policy = preemption_policy(attributes, policy)
    return policy


def may_preempt_beyond_guarantee(policy: PreemptionPolicy, lower_priority: bool) -> bool:
    """Whether a request beyond its leaf's guarantee may preempt anything there: in its own
    leaf (``LowerPriority``), or other leaves' borrowers while borrowing (P2). Pruning asks it:
    a leaf where it is False can only preempt for a request within its ``min``."""
    return lower_priority or policy.while_borrowing is not None


def preempts_in_leaf(
    policy: PreemptionPolicy, request: Iterable[tuple[str, int]], minimum: Amounts
) -> bool:
    """P3: whether a request may preempt lower-priority work of its own leaf: always by default
    (``Any``); with ``WithinMin`` only when it fits within the leaf's ``min`` on every resource
    it asks (its own usage aside: Kueue's "fits within nominal quota"), or when preempting
    while borrowing is allowed there (P2)."""
    if not policy.request_within_min or policy.while_borrowing is not None:
        return True
    return all(amount <= minimum.get(resource, 0) for resource, amount in request)


def takes_while_borrowing(
    policy: PreemptionPolicy,
    preemptor_priority: int,
    victim_priority: int | None,
    *,
    lender_keeps: bool,
) -> bool:
    """P2: whether a victim of another leaf may be taken by a preemptor asking beyond its
    guarantee: ``LowerPriority`` there, the victim strictly below the preemptor and at most the
    threshold; with ``LowerPriorityBorrowersOnly``, its leaf keeping its guarantee once it has
    left (``lender_keeps``: ``lender_keeps_guarantee``). An ended victim (``victim_priority``
    None) has no priority to compare."""
    borrowing = policy.while_borrowing
    if borrowing is None or victim_priority is None or victim_priority >= preemptor_priority:
        return False
    if borrowing.threshold is not None and victim_priority > borrowing.threshold:
        return False
    return lender_keeps or not borrowing.borrowers_only


def lender_keeps_guarantee(
    claim: Amounts, usage: Amounts, minimum: Amounts, request: Iterable[tuple[str, int]]
) -> bool:
    """P2 ``LowerPriorityBorrowersOnly``: whether a victim's leaf, claiming ``claim``, still
    claims at least its ``min`` once the victim's ``usage`` has left, on every resource the
    preemptor asks. A preemptor beyond its own guarantee then takes only what the other leaf
    truly borrows: with ``LowerPriority``, taking part of that leaf's guarantee lets the leaf's
    waiting work reclaim it back (R5), and preemptions may go round for ever (Kueue's KEP-1337
    describes this cycle)."""
    return all(
        claim.get(resource, 0) - usage.get(resource, 0) >= minimum.get(resource, 0)
        for resource, _ in request
    )


def claim_without(claim: Amounts, victims: Iterable[Amounts]) -> dict[str, int]:
    """P1: a leaf's claim with its own ``victims``' usage set aside -- what the guarantee is
    judged on when ``usher.io/reclaim-with-own-victims`` is on."""
    left = dict(claim)
    for usage in victims:
        for resource, amount in usage.items():
            left[resource] = left.get(resource, 0) - amount
    return left


def policy_refusal(
    preemptor: WorkloadKey,
    preemptor_leaf: QuotaPath,
    preemptor_priority: int,
    victim: WorkloadKey,
    victim_leaf: QuotaPath,
    victim_priority: int | None,
    *,
    policy: PreemptionPolicy,
    within: bool,
    in_leaf: bool,
    lender_keeps: bool,
) -> Reason | None:
    """Why the preemptor's leaf ``policy`` refuses ``victim``; None when it does not (R5's own
    conditions, ``reclaim.victim_refusal``, are asked next). ``within``: the preemptor asks
    within its guarantee (P1: its own victims set aside where on); ``in_leaf``: P3 lets it
    preempt in its own leaf (``preempts_in_leaf``); ``lender_keeps``: the victim's leaf keeps
    its guarantee once the victim has left (``lender_keeps_guarantee``). Refused: a victim of
    its own leaf when P3 does not let it; a victim of another leaf, the preemptor beyond its
    guarantee, that P2 allows for lower priorities only and this one is not, or whose leaf
    would fall below its guarantee."""
    if victim_leaf == preemptor_leaf:
        if in_leaf:
            return None
        return reasons.beyond_guarantee_in_leaf(preemptor, preemptor_leaf, victim)
    if within or policy.while_borrowing is None:
        return None
    if not takes_while_borrowing(policy, preemptor_priority, victim_priority, lender_keeps=True):
        threshold = policy.while_borrowing.threshold
        return reasons.not_taken_while_borrowing(
            preemptor, preemptor_priority, victim, victim_priority, threshold
        )
    if not lender_keeps and policy.while_borrowing.borrowers_only:
        return reasons.lender_below_guarantee(preemptor, victim, victim_leaf)
    return None


__all__ = [
    "DEFAULT_POLICY",
    "PreemptionPolicy",
    "WhileBorrowing",
    "claim_without",
    "lender_keeps_guarantee",
    "may_preempt_beyond_guarantee",
    "path_preemption_policy",
    "policy_refusal",
    "preemption_policy",
    "preempts_in_leaf",
    "takes_while_borrowing",
]
