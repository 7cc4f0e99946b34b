"""Readiness after admission (docs/admission-rules.md R10): the policy and each workload's record.

What it does: ``readiness_policy`` reads a node's ready timeout, requeue backoff and attempt
limit from its attributes, inheriting what it does not set; ``requeued_preemption_refusal``
says whether a workload requeued before may preempt (the engine's reclaim search and the
ledger's re-check of a reclaim both ask it); ``Readiness`` is what the engine
keeps per workload (the running attempt's deadline, the latest pod counts, requeues so far,
the end of its backoff); ``armed``, ``progressed`` and ``requeued`` are its transitions.
What it must never do: read a clock (time comes in as arguments), decide when to requeue
(the engine does), or word a reason (``reasons`` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import msgspec

from schemas import Reason, WorkloadKey
from usher.core.model import reasons
from usher.core.model.config import ReadinessPolicy
from usher.core.values.registry import (
    READY_TIMEOUT,
    REQUEUE_BACKOFF,
    REQUEUE_BACKOFF_MAX,
    REQUEUE_MAX_ATTEMPTS,
    REQUEUED_MAY_PREEMPT,
    Setting,
)

_MILLIS_ATTRIBUTES: tuple[tuple[Setting[int], str], ...] = (
    (READY_TIMEOUT, "timeout_ms"),
    (REQUEUE_BACKOFF, "backoff_base_ms"),
    (REQUEUE_BACKOFF_MAX, "backoff_cap_ms"),
)


def readiness_policy(attributes: Mapping[str, str], inherited: ReadinessPolicy) -> ReadinessPolicy:
    """A node's readiness policy: its own attributes where set and valid, else inherited.

    The tree's validation (T1) refuses invalid values; this only skips them, like
    ``reclaim.node_policy``, so a tree read back from the ledger cannot raise here.
    """
    changes: dict[str, Any] = {}
    for attribute, field in _MILLIS_ATTRIBUTES:
        seconds = attribute.read(attributes)
        if seconds is not None:
            changes[field] = seconds * 1000
    attempts = REQUEUE_MAX_ATTEMPTS.read(attributes)
    if attempts is not None:
        changes["max_attempts"] = attempts
    policy = replace(inherited, **changes) if changes else inherited
    may_preempt = REQUEUED_MAY_PREEMPT.read(attributes)
    if may_preempt is not None and may_preempt != policy.requeued_may_preempt:
        policy = replace(policy, requeued_may_preempt=may_preempt)
    return policy


def requeued_preemption_refusal(
    preemptor: WorkloadKey, requeues: int, policy: ReadinessPolicy
) -> Reason | None:
    """Why ``preemptor`` may not preempt anyone; None when it may (R10).

    A workload requeued ``requeues`` times for not becoming ready takes only free room on its
    later attempts -- the room it would take is running work that did become ready -- unless
    its leaf's policy says ``usher.io/requeued-may-preempt: "true"``.
    """
    if requeues == 0 or policy.requeued_may_preempt:
        return None
    return reasons.requeued_takes_free_room(preemptor, requeues)


class Readiness(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """One workload's readiness record (immutable: a trial pass shares it with the original)."""

    deadline_ms: int = 0
    """When the running admission must be ready by; 0 once it was ready (or with no timeout)."""
    ready: int = 0
    total: int = 0
    """Pods ready and pods expected, from the latest progress (none seen: 0 ready)."""
    requeues: int = 0
    """Admissions that timed out so far."""
    not_before_ms: int = 0
    """After a requeue: the workload is not offered before this instant."""
    last: Reason | None = None
    """The last requeue's reason (``explain``; the inadmissible reason after the last one)."""
    exhausted: bool = False
    """The last attempt timed out: the workload stays inadmissible."""
    started_ms: int = 0
    """When the running deadline started (the admission, or the ledger's grant of it)."""


def armed(record: Readiness | None, started_ms: int, timeout_ms: int, pods: int) -> Readiness:
    """A new admission: its deadline runs, nothing is ready yet; earlier requeues count."""
    base = record if record is not None else Readiness()
    return msgspec.structs.replace(
        base,
        deadline_ms=started_ms + timeout_ms,
        started_ms=started_ms,
        ready=0,
        total=pods,
        not_before_ms=0,
    )


def restarted(record: Readiness, started_ms: int, timeout_ms: int) -> Readiness:
    """The deadline runs again from ``started_ms`` (the ledger's grant); counts are kept."""
    return msgspec.structs.replace(
        record, deadline_ms=started_ms + timeout_ms, started_ms=started_ms
    )


def progressed(record: Readiness, ready: int, total: int) -> Readiness:
    """Pod counts observed; the deadline stops once every pod expected is ready."""
    met = total > 0 and ready >= total
    return msgspec.structs.replace(
        record, ready=ready, total=total, deadline_ms=0 if met else record.deadline_ms
    )


def requeued(
    record: Readiness, attempt: int, not_before_ms: int | None, reason: Reason
) -> Readiness:
    """The ``attempt``-th admission timed out; ``not_before_ms`` None: it was the last one."""
    return msgspec.structs.replace(
        record,
        deadline_ms=0,
        requeues=attempt,
        not_before_ms=not_before_ms or 0,
        last=reason,
        exhausted=not_before_ms is None,
    )


__all__ = ["Readiness", "armed", "progressed", "readiness_policy", "requeued", "restarted"]
