"""Readable, typed reasons for every pending, inadmissible, unmapped or preempted workload.

What it does: builds ``schemas.Reason`` values with the numbers a person needs to act on them
(node, resource, used, requested, limit) and a sentence in canonical Kubernetes notation.
What it must never do: decide anything; it only words what the engine found.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from schemas import (
    ContainerTermination,
    FieldError,
    MemoryResize,
    QuotaPath,
    Reason,
    RetryCause,
    WorkloadKey,
    Zone,
)
from usher.core.model.config import format_rate
from usher.core.model.quantity import format_quantity
from usher.core.model.reason_text import (
    amounts,
    bound,
    in_zone,
    oversold_max,
    requested_over,
    used_and_requested_over,
    used_over,
)


def quota_exceeded(
    node: QuotaPath,
    resource: str,
    used: int,
    requested: int,
    maximum: int,
    cap: int,
    rate: Fraction,
) -> Reason:
    """Pending: some node on the path would exceed ``max x oversellRate``."""
    over = used_and_requested_over(resource, used, requested, oversold_max(resource, maximum, rate))
    message = f"{node} {resource} {over}"
    return Reason(
        code="QuotaExceeded",
        message=message,
        node=node,
        resource=resource,
        used=used,
        requested=requested,
        limit=cap,
    )


def held_for_preemptor(
    node: QuotaPath, resource: str, used: int, requested: int, cap: int, holder: WorkloadKey
) -> Reason:
    """Pending: the capacity is held for a preemptor whose admission is not confirmed yet."""
    over = used_and_requested_over(resource, used, requested, format_quantity(resource, cap))
    message = f"{node} {resource}: capacity freed by preemption is held for {holder} ({over})"
    return Reason(
        code="HeldForPreemptor",
        message=message,
        node=node,
        resource=resource,
        used=used,
        requested=requested,
        limit=cap,
        blocker=holder,
    )


def victims_still_stopping(
    node: QuotaPath, resource: str, used: int, requested: int, cap: int, stopping: int
) -> Reason:
    """Pending: it fits once preempted workloads still winding down have stopped."""
    over = used_and_requested_over(resource, used, requested, format_quantity(resource, cap))
    message = (
        f"{node} {resource} {over}, of which {format_quantity(resource, stopping)} is held by "
        "preempted workloads whose pods were not seen stopped yet"
    )
    return Reason(
        code="VictimsStopping",
        message=message,
        node=node,
        resource=resource,
        used=used,
        requested=requested,
        limit=cap,
    )


def victim_stopping(victim: WorkloadKey, preemptor: WorkloadKey) -> Reason:
    """Pending: preempted for ``preemptor``; admitted again only once seen stopped."""
    return Reason(
        code="PreemptionInProgress",
        message=(
            f"{victim} was preempted for {preemptor}; its pods were not seen stopped yet, so "
            "it cannot be admitted again"
        ),
        blocker=preemptor,
    )


def exceeds_max(
    node: QuotaPath, resource: str, requested: int, maximum: int, cap: int, rate: Fraction
) -> Reason:
    """Inadmissible: the request alone is above ``max x oversellRate`` of a node."""
    over = requested_over(resource, requested, oversold_max(resource, maximum, rate))
    message = f"{node} {resource} {over}; it can never fit"
    return Reason(
        code="ExceedsMax",
        message=message,
        node=node,
        resource=resource,
        requested=requested,
        limit=cap,
    )


def pod_too_large(zone: Zone, resource: str, requested: int, largest: int) -> Reason:
    """Inadmissible: one pod is larger than every node of its zone."""
    message = (
        f"one pod requests {resource} {format_quantity(resource, requested)} but no node of "
        f"zone {zone} has that much with the rest of the pod (largest: "
        f"{format_quantity(resource, largest)})"
    )
    return Reason(
        code="PodTooLarge", message=message, resource=resource, requested=requested, limit=largest
    )


def zone_total_exceeded(zone: Zone, resource: str, requested: int, total: int) -> Reason:
    """Inadmissible: the whole gang is larger than all nodes of its zone together."""
    message = (
        f"requests {resource} {format_quantity(resource, requested)} > "
        f"{format_quantity(resource, total)} allocatable on all nodes of zone {zone}"
    )
    return Reason(
        code="ZoneCapacity", message=message, resource=resource, requested=requested, limit=total
    )


def zone_capacity(zone: Zone, resource: str, used: int, requested: int, total: int) -> Reason:
    """Pending: the zone's schedulable nodes have no room for the whole gang now."""
    message = (
        f"zone {zone} {resource} {format_quantity(resource, used)} admitted + "
        f"{format_quantity(resource, requested)} requested > "
        f"{format_quantity(resource, total)} allocatable"
    )
    return Reason(
        code="ZoneCapacity",
        message=message,
        resource=resource,
        used=used,
        requested=requested,
        limit=total,
    )


def no_node_fits(zone: Zone) -> Reason:
    """Pending: only cordoned nodes of the zone are large enough for one of its pods."""
    message = f"no schedulable node of zone {zone} is large enough for one pod"
    return Reason(code="NoNodeFits", message=message)


def zone_not_served(zone: Zone, served: list[Zone]) -> Reason:
    """Pending: no dequeuer serves the workload's zone, so nothing will ever admit it there."""
    known = ", ".join(served) if served else "none"
    message = (
        f"no dequeuer serves zone {zone} (served zones: {known}); it is admitted once a "
        f"dequeuer of zone {zone} starts, or set label usher.io/zone to a served zone"
    )
    return Reason(code="ZoneNotServed", message=message)


def admission_gated(gates: Sequence[str]) -> Reason:
    """Pending (G1): admission gates are still listed on it; each must be removed."""
    names = ", ".join(gates)
    message = (
        f"admission gates still closed: {names}; it is not admitted until each is removed from "
        "its usher.io/admission-gated-by annotation"
    )
    return Reason(code="AdmissionGated", message=message)


def blocked_by_head(head: WorkloadKey, queue: str) -> Reason:
    """Pending, Block policy: an earlier workload of the queue does not fit."""
    message = f"Block policy: {head} at the head of queue {queue} does not fit yet"
    return Reason(code="BlockedByHead", message=message, blocker=head)


def not_yet_evaluated(message: str) -> Reason:
    """Pending: no decision pass has looked at the workload in its current situation."""
    return Reason(code="NotYetEvaluated", message=message)


def rejected(errors: list[FieldError]) -> Reason:
    """Rejected: the job's manifest could not be turned into a workload; never queued."""
    detail = "; ".join(f"{e.path}: {e.message} [{e.code}]" for e in errors)
    return Reason(code="Rejected", message=detail or "invalid manifest")


def no_tree() -> Reason:
    """Unmapped: no valid quota tree is in force yet."""
    return Reason(code="NoTree", message="no valid ElasticQuotaTree has been applied yet")


def no_leaf(namespace: str) -> Reason:
    """Unmapped: the namespace belongs to no leaf."""
    return Reason(
        code="NoLeaf", message=f"namespace {namespace} belongs to no leaf of the quota tree"
    )


def unknown_quota(label_value: str) -> Reason:
    """Unmapped: the quota label names no leaf."""
    return Reason(
        code="UnknownQuota",
        message=f"label quota.scheduling.alibabacloud.com/name={label_value} names no leaf",
    )


def reclaimed(
    preemptor: WorkloadKey,
    preemptor_leaf: QuotaPath,
    victim_leaf: QuotaPath,
    resource: str,
    used: int,
    minimum: int,
    requested: int,
) -> Reason:
    """Preempted: a leaf within its min reclaimed capacity a borrowing leaf was using."""
    message = (
        f"{preemptor} reclaims the guarantee of {preemptor_leaf}: {victim_leaf} borrows "
        f"{resource} ({used_over(resource, used, bound('min', resource, minimum))})"
    )
    return _reclaim(message, preemptor, victim_leaf, resource, used, minimum, requested)


def zone_reclaimed(
    preemptor: WorkloadKey,
    preemptor_leaf: QuotaPath,
    victim_leaf: QuotaPath,
    zone: Zone,
    resource: str,
    used: int,
    minimum: int,
    requested: int,
) -> Reason:
    """Preempted: a leaf within its guarantee in ``zone`` reclaimed what a leaf above its own
    guarantee there was using in that zone (Z4)."""
    message = (
        f"{preemptor} reclaims the guarantee of {preemptor_leaf} in zone {zone}: "
        f"{in_zone(victim_leaf, resource, zone)}: "
        f"{used_over(resource, used, bound('min', resource, minimum))}"
    )
    return _reclaim(message, preemptor, victim_leaf, resource, used, minimum, requested)


def _reclaim(
    message: str,
    preemptor: WorkloadKey,
    victim_leaf: QuotaPath,
    resource: str,
    used: int,
    minimum: int,
    requested: int,
) -> Reason:
    """A ``Reclaim`` preemption's numbers: the victim's leaf, what it used above its min."""
    return Reason(
        code="Reclaim",
        message=message,
        node=victim_leaf,
        resource=resource,
        used=used,
        requested=requested,
        limit=minimum,
        blocker=preemptor,
    )


def lower_priority(
    preemptor: WorkloadKey, priority: int, victim_priority: int, leaf: QuotaPath
) -> Reason:
    """Preempted: a strictly higher-priority workload of the same leaf (withinQuota)."""
    message = (
        f"{preemptor} (priority {priority}) preempts lower-priority work "
        f"(priority {victim_priority}) in {leaf}"
    )
    return Reason(code="WithinQuotaPriority", message=message, node=leaf, blocker=preemptor)


def stale_view(preemptor: WorkloadKey, detail: str, blocker: WorkloadKey | None = None) -> Reason:
    """A reclaim proposal no longer holds on the current state (it was made on an older one)."""
    return Reason(
        code="StaleView", message=f"reclaim for {preemptor} refused: {detail}", blocker=blocker
    )


def victim_within_min_runtime(
    preemptor: WorkloadKey, victim: WorkloadKey, ran_ms: int, min_runtime_ms: int
) -> Reason:
    """A reclaim refused: ``victim`` ran less than its leaf's minimum runtime (R6)."""
    detail = f"{victim} is within its minimum runtime ({ran_ms} of {min_runtime_ms} ms)"
    return stale_view(preemptor, detail, victim)


def victim_not_lower_priority(
    preemptor: WorkloadKey, victim: WorkloadKey, leaf: QuotaPath
) -> Reason:
    """A reclaim refused: a victim of the preemptor's own leaf that ``LowerPriority`` does not
    allow (off there, or the victim not of strictly lower priority) (R5)."""
    detail = f"{victim} is not of lower priority in {leaf} (or LowerPriority is off there)"
    return stale_view(preemptor, detail, victim)


def beyond_guarantee(preemptor: WorkloadKey, leaf: QuotaPath, victim: WorkloadKey) -> Reason:
    """A reclaim refused: a victim of another leaf, for a preemptor asking beyond the guarantee
    of its ``leaf`` (reclaim only restores a guarantee, R5)."""
    return stale_view(preemptor, f"{preemptor} asks beyond the guarantee of {leaf}", victim)


def reclaimed_while_borrowing(
    preemptor: WorkloadKey,
    priority: int,
    preemptor_leaf: QuotaPath,
    victim_priority: int,
    victim_leaf: QuotaPath,
    resource: str,
    used: int,
    minimum: int,
    requested: int,
) -> Reason:
    """Preempted: a workload asking beyond its leaf's guarantee took a lower-priority borrower
    of another leaf, as ``usher.io/preempt-while-borrowing`` lets it (P2)."""
    message = (
        f"{preemptor} (priority {priority}) of {preemptor_leaf} preempts while borrowing "
        f"(usher.io/preempt-while-borrowing): {victim_leaf} borrows {resource} "
        f"({used_over(resource, used, bound('min', resource, minimum))}), "
        f"priority {victim_priority}"
    )
    return Reason(
        code="ReclaimWhileBorrowing",
        message=message,
        node=victim_leaf,
        resource=resource,
        used=used,
        requested=requested,
        limit=minimum,
        blocker=preemptor,
    )


def beyond_guarantee_in_leaf(
    preemptor: WorkloadKey, leaf: QuotaPath, victim: WorkloadKey
) -> Reason:
    """A reclaim refused: a victim of the preemptor's own ``leaf`` while the preemptor asks more
    than the leaf's ``min`` and ``usher.io/within-quota-request: WithinMin`` is in force (P3)."""
    detail = (
        f"{preemptor} asks more than the min of {leaf}, so it may not preempt {victim} in it "
        "(usher.io/within-quota-request: WithinMin)"
    )
    return stale_view(preemptor, detail, victim)


def not_taken_while_borrowing(
    preemptor: WorkloadKey,
    priority: int,
    victim: WorkloadKey,
    victim_priority: int | None,
    threshold: int | None,
) -> Reason:
    """A reclaim refused: the preemptor asks beyond its guarantee and may preempt other leaves'
    borrowers only of lower priority (at most ``threshold``, when set), which ``victim`` is not
    (P2)."""
    limit = f"below {priority}" + ("" if threshold is None else f" and at most {threshold}")
    has = "no priority (it has ended)" if victim_priority is None else f"priority {victim_priority}"
    detail = (
        f"{preemptor} asks beyond its guarantee and preempts while borrowing only priorities "
        f"{limit} (usher.io/preempt-while-borrowing); {victim} has {has}"
    )
    return stale_view(preemptor, detail, victim)


def lender_below_guarantee(preemptor: WorkloadKey, victim: WorkloadKey, leaf: QuotaPath) -> Reason:
    """A reclaim refused: the preemptor asks beyond its guarantee, and taking ``victim`` would
    leave its ``leaf`` below its own guarantee -- preempting while borrowing takes only what
    another leaf borrows (P2)."""
    detail = (
        f"{preemptor} asks beyond its guarantee and preempts while borrowing only what other "
        f"leaves borrow; without {victim}, {leaf} would hold less than its min"
    )
    return stale_view(preemptor, detail, victim)


def requeued_takes_free_room(preemptor: WorkloadKey, requeues: int) -> Reason:
    """A reclaim refused: the preemptor was requeued for readiness before and takes only free
    room on its later attempts (R10)."""
    times = "once" if requeues == 1 else f"{requeues} times"
    return stale_view(
        preemptor,
        f"{preemptor} was requeued {times} for not becoming ready and takes only free room "
        "(usher.io/requeued-may-preempt)",
    )


def victim_not_borrowing(preemptor: WorkloadKey, victim: WorkloadKey, leaf: QuotaPath) -> Reason:
    """A reclaim refused: the victim's ``leaf`` borrows none of what the preemptor asks (R5)."""
    return stale_view(preemptor, f"{victim} is not borrowing what is asked on {leaf}", victim)


def victim_not_admitted(victim: WorkloadKey, state: str | None, node: QuotaPath | None) -> Reason:
    """The ledger refuses a preemption: it holds no ``admitted`` allocation for ``victim``
    (``state`` is what it holds, None: nothing live; ``node`` where that allocation counts)."""
    return Reason(
        code="StaleView",
        message=f"victim {victim} is not admitted: the ledger holds {_holds(state, node)}",
        node=node,
        blocker=victim,
    )


def _holds(state: str | None, node: QuotaPath | None) -> str:
    """What the ledger holds for a workload: its live allocation's ``state`` on ``node``."""
    return "no live allocation" if state is None else f"a {state} allocation on {node}"


def ended_after_view(workload: WorkloadKey, end_seq: int, view_seq: int) -> Reason:
    """The ledger refuses a proposal: ``workload`` ended (log entry ``end_seq``) after the
    view the proposal was made on (entry ``view_seq``) (R8)."""
    return Reason(
        code="StaleView",
        message=(
            f"{workload} finished or was deleted at log entry {end_seq}, after the proposal's "
            f"view (entry {view_seq})"
        ),
        blocker=workload,
    )


def requeue_refused(workload: WorkloadKey, state: str | None, node: QuotaPath | None) -> Reason:
    """The ledger refuses a requeue (R10) or a drain's stop (R15): it holds no ``admitted``
    allocation of ``workload`` on the requeue's quota (``state`` on ``node``: what it holds)."""
    return Reason(
        code="StaleView",
        message=f"requeue of {workload} refused: the ledger holds {_holds(state, node)}",
        blocker=workload,
    )


def earlier_preemption_stopping(preemptor: WorkloadKey, victim: WorkloadKey) -> Reason:
    """No new preemption: ``preemptor``'s earlier one still waits for ``victim`` to stop (R7)."""
    return Reason(
        code="PreemptionInProgress",
        message=(
            f"{preemptor} preempted {victim} earlier and its pods were not seen stopped yet; "
            f"{preemptor} preempts again only once its earlier victims have stopped"
        ),
        blocker=victim,
    )


def being_preempted(
    workload: WorkloadKey, node: QuotaPath, preemptor: WorkloadKey | None
) -> Reason:
    """The ledger refuses a grant: ``workload`` is a victim still stopping on ``node``."""
    return Reason(
        code="PreemptionInProgress",
        message=f"{workload} is being preempted: its pods were not seen stopped yet",
        node=node,
        blocker=preemptor,
    )


def already_admitted(workload: WorkloadKey, held_on: QuotaPath, asked: QuotaPath) -> Reason:
    """The ledger refuses a grant: ``workload`` already holds a live allocation elsewhere."""
    return Reason(
        code="AlreadyAdmitted",
        message=f"{workload} already holds a live allocation on {held_on}, not on {asked}",
        node=held_on,
        blocker=workload,
    )


def not_a_leaf(quota: QuotaPath) -> Reason:
    """The ledger refuses a grant: ``quota`` is no leaf of the quota tree in force."""
    return Reason(
        code="UnknownQuota",
        message=f"{quota} is not a leaf of the quota tree in force",
        node=quota,
    )


def _seconds(ms: int) -> str:
    """Milliseconds as seconds for a sentence: ``300``, ``1.5``."""
    whole, rest = divmod(ms, 1000)
    return str(whole) if rest == 0 else f"{whole}.{rest:03d}".rstrip("0")


seconds_text = _seconds
"""The same wording for sentences outside this module (``usher explain``)."""


def pods_not_ready(
    ready: int, total: int, waited_ms: int, attempt: int, attempts: int, wait_ms: int | None
) -> Reason:
    """Requeued (R10): admitted ``waited_ms`` ago, fewer than all pods ready; what follows."""
    after = "no attempts left" if wait_ms is None else f"next try after {_seconds(wait_ms)} s"
    message = (
        f"{ready}/{total} pods ready after {_seconds(waited_ms)} s, "
        f"attempt {attempt} of {attempts}, {after}"
    )
    return Reason(code="PodsNotReady", message=message, used=ready, limit=total)


def partial_admission(
    pods: int, count: int, least: int, request: tuple[tuple[str, int], ...], why: Reason | None
) -> Reason:
    """Admitted with fewer pods (R11): how many, and what the whole gang lacked."""
    message = f"{pods} of {count} pods admitted (min {least})"
    if why is not None and why.node is not None and why.resource is not None:
        amounts = dict(request)
        short = (why.used or 0) + amounts.get(why.resource, 0) - (why.limit or 0)
        message += (
            f"; {why.node} {why.resource} {format_quantity(why.resource, short)} short for {count}"
        )
    elif why is not None:
        message += f"; {why.message}"
    return Reason(
        code="PartialAdmission",
        message=message,
        node=why.node if why is not None else None,
        resource=why.resource if why is not None else None,
        used=why.used if why is not None else None,
        requested=why.requested if why is not None else None,
        limit=why.limit if why is not None else None,
    )


def requeue_backoff(attempt: int, attempts: int, left_ms: int, stopping: bool) -> Reason:
    """Pending (R10): requeued for readiness; not offered again before its backoff ends."""
    if stopping:
        wait = "its pods were not seen stopped yet"
    else:
        wait = f"offered again in {_seconds(left_ms)} s"
    message = f"requeued after attempt {attempt} of {attempts} (pods not ready); {wait}"
    return Reason(code="RequeueBackoff", message=message)


def _ended(terminations: list[ContainerTermination]) -> str:
    """How the failed containers ended: ``main/w OOMKilled at 4Gi, main/x Error exit code 1``."""
    if not terminations:
        return "no container termination reported"
    parts = []
    for item in terminations:
        size = item.memory_request if item.memory_request is not None else item.memory_limit
        where = (
            f" at {format_quantity('memory', size)}" if item.reason == "OOMKilled" and size else ""
        )
        code = "" if item.reason == "OOMKilled" else f" exit code {item.exit_code}"
        parts.append(f"{item.pod_set}/{item.container} {item.reason}{where}{code}")
    return ", ".join(parts)


def _memory_change(resized: list[MemoryResize]) -> str:
    parts = []
    for item in resized:
        old = item.request if item.request is not None else item.limit
        new = item.new_request if item.new_request is not None else item.new_limit
        if old is None or new is None:
            parts.append(f"{item.pod_set}/{item.container} memory unset, unchanged")
        else:
            parts.append(
                f"{item.pod_set}/{item.container} memory {format_quantity('memory', old)} -> "
                f"{format_quantity('memory', new)}"
            )
    return ", ".join(parts)


def retrying(
    cause: RetryCause,
    attempt: int,
    limit: int,
    terminations: list[ContainerTermination],
    resized: list[MemoryResize],
    factor: Fraction,
) -> Reason:
    """Retried (R12, R13): attempt ``attempt`` failed; the next one, and its size."""
    message = (
        f"attempt {attempt} of {limit + 1} failed ({_ended(terminations)}); attempt {attempt + 1}"
    )
    if cause == "OOMKilled" and resized:
        message += f" with {_memory_change(resized)} (x{format_rate(factor)})"
    else:
        message += " with the same resources"
    return Reason(code=cause, message=message, used=attempt, limit=limit + 1)


def retry_limit_reached(
    attempt: int, limit: int, terminations: list[ContainerTermination]
) -> Reason:
    """Retried with no next attempt (R12): the failed attempt was the last one allowed."""
    message = (
        f"attempt {attempt} of {limit + 1} failed ({_ended(terminations)}); "
        f"no retry left (retry limit {limit})"
    )
    return Reason(code="RetryLimitReached", message=message, used=attempt, limit=limit + 1)


def memory_cap_reached(item: ContainerTermination, cap: int, attempt: int) -> Reason:
    """Retried with no next attempt (R13): an OOMKilled container already had its cap."""
    size = item.memory_request if item.memory_request is not None else item.memory_limit
    message = (
        f"attempt {attempt}: {item.pod_set}/{item.container} OOMKilled at "
        f"{format_quantity('memory', size or 0)}, already at its memory cap "
        f"{format_quantity('memory', cap)}; not retried"
    )
    return Reason(code="MemoryCapReached", message=message, resource="memory", used=size, limit=cap)


def format_moment(ms: int) -> str:
    """An instant for people: ``2026-11-24T10:00Z`` (seconds shown only when not zero)."""
    when = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    whole_minute = when.second == 0 and when.microsecond == 0
    return when.strftime("%Y-%m-%dT%H:%MZ" if whole_minute else "%Y-%m-%dT%H:%M:%SZ")


def reserved(
    node: QuotaPath, resource: str, holds: int, requested: int, since_ms: int, waited_ms: int
) -> Reason:
    """Pending (N1): it starved at the head of its queue; capacity on its path is held for it."""
    message = (
        f"{node} holds {resource} {format_quantity(resource, holds)} of "
        f"{format_quantity(resource, requested)} for it since {format_moment(since_ms)}, "
        f"waited {_seconds(waited_ms)} s at the head"
    )
    return Reason(
        code="Reserved",
        message=message,
        node=node,
        resource=resource,
        used=holds,
        requested=requested,
    )


def behind_reservation(
    node: QuotaPath, resource: str, held: int, requested: int, cap: int, holder: WorkloadKey
) -> Reason:
    """Pending (N1): it would fit but for the capacity reserved for a starved workload."""
    message = (
        f"{node} {resource}: {format_quantity(resource, held)} of "
        f"{format_quantity(resource, cap)} held for {holder}, which starved at the head of "
        f"its queue; {format_quantity(resource, requested)} requested does not fit beside it"
    )
    return Reason(
        code="BehindReservation",
        message=message,
        node=node,
        resource=resource,
        used=held,
        requested=requested,
        limit=cap,
        blocker=holder,
    )


def backfilled(runtime_ms: int, ends_ms: int, holder: WorkloadKey, satisfied_ms: int) -> Reason:
    """Admitted (N2) beside a reservation: its declared maximum runtime ends it before the
    declared runtimes of the running work free enough for the reserved workload."""
    message = (
        f"declared to run at most {_seconds(runtime_ms)} s, so it ends by "
        f"{format_moment(ends_ms)}, before the reservation of {holder} can be satisfied "
        f"({format_moment(satisfied_ms)} by the declared runtimes of the running work)"
    )
    return Reason(code="Backfilled", message=message, blocker=holder)


def held(node: QuotaPath, mode: str, by: str, since_ms: int, why: str) -> Reason:
    """Pending (R14): a node on its path is held or drained; by whom, since when and why."""
    verb = "held" if mode == "Hold" else "drained"
    message = f"{node} {verb} by {by} at {format_moment(since_ms)}"
    if why:
        message += f": {why}"
    return Reason(code="Held", message=message, node=node)


def grew_after_admission(
    resources: list[str], counted: dict[str, int], observed: dict[str, int]
) -> Reason:
    """Stopped (R16): the admitted job now asks more than its admission counted."""
    growth = ", ".join(
        f"{r} {format_quantity(r, counted.get(r, 0))} -> {format_quantity(r, observed[r])}"
        for r in resources
    )
    message = (
        f"the job grew after its admission ({growth}); its admission counts only what was "
        "admitted, so it is suspended and waits again at its new size"
    )
    first = resources[0]
    return Reason(
        code="GrewAfterAdmission",
        message=message,
        resource=first,
        used=counted.get(first, 0),
        requested=observed[first],
    )


def drained(node: QuotaPath, by: str, since_ms: int, grace_ms: int, why: str) -> Reason:
    """Preempted (R15): the drain of a node on its path ran out of grace."""
    message = (
        f"{node} drained by {by} at {format_moment(since_ms)}, grace {_seconds(grace_ms)} s over"
    )
    if why:
        message += f": {why}"
    return Reason(code="Drained", message=message, node=node)


def guarantee_not_lent(
    node: QuotaPath, resource: str, used: int, requested: int, kept: int, cap: int
) -> Reason:
    """Pending: on ``node`` it fits, but only by taking idle guarantee that a node beside its
    path keeps for itself (L1 ``usher.io/reclaim-within: Never``, L2 ``usher.io/lending-limit``)."""
    amounts = (format_quantity(resource, n) for n in (used, requested, kept, cap))
    message = (
        "{} {}: {} used + {} requested + {} idle guarantee not lent > {}".format(
            node, resource, *amounts
        )
        + " (usher.io/reclaim-within: Never or usher.io/lending-limit below it)"
    )
    return Reason(
        code="GuaranteeNotLent",
        message=message,
        node=node,
        resource=resource,
        used=used,
        requested=requested,
        limit=cap,
    )


def reclaim_not_allowed(
    preemptor: WorkloadKey,
    priority: int,
    victim: WorkloadKey,
    victim_priority: int | None,
    policy: str,
) -> Reason:
    """A reclaim refused: ``usher.io/reclaim-within`` of the preemptor's leaf spares ``victim``,
    a borrower of another leaf (L1: ``Never`` spares all, ``LowerPriority`` those of equal or
    higher priority)."""
    if policy == "Never":
        detail = f"{preemptor} may not reclaim from other leaves (usher.io/reclaim-within: Never)"
    else:
        detail = (
            f"{victim} (priority {victim_priority}) is not of lower priority than {preemptor} "
            f"(priority {priority}) and usher.io/reclaim-within is {policy}"
        )
    return stale_view(preemptor, detail, victim)


def topology_no_fit(
    zone: Zone,
    noun: str,
    request: Sequence[tuple[str, int]],
    pods: int,
    pod: Sequence[tuple[str, int]] | None,
    best: str | None,
    free: dict[str, int],
    slots: int,
) -> Reason:
    """Pending (TP1): no domain of the required level has room for all the gang's pods now;
    ``best`` is the domain with the most room (None: no schedulable node carries the level).
    It may fit once work pinned in the zone ends or its nodes change."""
    needs = f"{pods} x {amounts(pod)}" if pod is not None else amounts(request)
    if best is None:
        has = f"no schedulable node of zone {zone} is in a {noun}"
    elif pod is not None:
        has = f"best {best} has {slots} x {amounts(pod)} free"
    else:
        has = f"best {best} has {amounts([(r, max(free.get(r, 0), 0)) for r, _ in request])} free"
    # The typed numbers: the first resource the best domain lacks (its free room as limit).
    lacking = [(r, a) for r, a in request if a > free.get(r, 0)] or list(request[:1])
    resource, requested = lacking[0] if lacking else (None, None)
    return Reason(
        code="TopologyNoFit",
        message=f"needs {needs} in one {noun}; {has} (zone {zone}: fits once work there ends)",
        resource=resource,
        requested=requested,
        limit=None if best is None or resource is None else max(free.get(resource, 0), 0),
    )


def topology_level_unknown(level: str, levels: Sequence[str]) -> Reason:
    """Inadmissible (TP1): the job asks for a level its tree does not name."""
    named = ", ".join(levels) if levels else "none (usher.io/topology-levels is not set)"
    message = f"topology level {level} is not one its quota tree names (levels: {named})"
    return Reason(code="TopologyLevelUnknown", message=message)


def cluster_disconnected(cluster: str, since_ms: int, why: str) -> Reason:
    """Pending (M1): its cluster's watcher lost the API server; nothing is admitted there."""
    message = (
        f"cluster {cluster} disconnected at {format_moment(since_ms)}"
        + (f" ({why})" if why else "")
        + "; nothing is admitted there until its watcher connects again or an operator "
        f"declares it lost (usher cluster lost {cluster})"
    )
    return Reason(code="ClusterDisconnected", message=message)


def cluster_lost(cluster: str, since_ms: int, why: str) -> Reason:
    """Pending (M1): an operator declared its cluster lost; its watcher has not come back."""
    message = (
        f"cluster {cluster} declared lost at {format_moment(since_ms)} {why}; nothing is "
        "admitted there until its watcher connects again"
    )
    return Reason(code="ClusterLost", message=message)


def zone_in_other_cluster(zone: Zone, owner: str, cluster: str) -> Reason:
    """Pending (M1): a zone it accepts is another cluster's; a job runs where it was created."""
    message = (
        f"zone {zone} is cluster {owner}'s, and this job lives in cluster {cluster}; a job is "
        f"admitted only into its own cluster's zones: set usher.io/zone to one of them"
    )
    return Reason(code="ZoneInOtherCluster", message=message)
