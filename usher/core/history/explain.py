"""Explain one workload from the log: where it is, why, whether it may reclaim, and its story.

What it does: folds the whole log into the pure ``Engine`` (as ``usher replay`` does) and
answers for one ``namespace/name``: its state, queue, position and priority; the reason it
waits as of now (``Engine.reason_now``: the limiting node, resource and numbers, e.g.
``root/Department-a cpu 60 used + 60 requested > max 100 x 1.0``); for a pending workload, a
dry run of reclaim on that state (``Engine.reclaim_preview``, which leaves the engine as it
was): whether it may reclaim and whom it would preempt; and its history: every decision about
it on the log (including the preemptions it caused) and its cluster events, with times; with
fair share on, its leaf's decayed usage, weight and interleave key (F1); its declared maximum
runtime when it declares one (RT1), and what backfill (N2) and the overrun hold (B2) said.
``explain_about`` answers the same from only what it needs (the entries about the workload,
the engine at the end, the allocation intervals), for a reader that keeps that state.
What it must never do: perform I/O or read a clock (``now`` comes from the caller), or decide
anything: the engine it queries is thrown away afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec

from schemas import (
    Admitted,
    Inadmissible,
    Millis,
    Pending,
    Preempted,
    QueueName,
    QuotaPath,
    Reason,
    Released,
    Requeued,
    Retried,
    Unmapped,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    WorkloadProgress,
    WorkloadRejected,
)
from usher.core.engine.facade import Engine
from usher.core.history.estimate import Estimate, describe, estimate_pending
from usher.core.history.fold import forged
from usher.core.history.replay import (
    History,
    fold,
    format_datetime,
    format_resources,
    quantities,
    to_datetime,
)
from usher.core.history.sim import pin_text
from usher.core.history.usage import Interval, intervals_of
from usher.core.intake.workload import SUSPENDED_BY_USHER, bypassed_queue, suspended_by_usher
from usher.core.model import reasons
from usher.core.model.config import EngineConfig
from usher.core.model.quantity import format_quantity
from usher.core.model.reason_text import requested_over, used_and_requested_over
from usher.core.protocol.log import LogEntry
from usher.core.rules import fairshare
from usher.core.state.indexed import JobState, total_requests


class UnknownWorkload(LookupError):
    """The workload never appears on the log (no event and no decision names it)."""

    def __init__(self, workload: str) -> None:
        super().__init__(f"{workload} does not appear on the log")
        self.workload = workload


class HistoryLine(msgspec.Struct, frozen=True, kw_only=True):
    """One log entry about the workload."""

    seq: int
    time: datetime
    source: str
    what: str
    """``observed``, ``progress`` (its pods' readiness), ``finished``, ``deleted``,
    ``rejected``, ``Admitted``, ``Preempted``, ``preempts`` (it preempted another workload),
    ``Requeued`` (not ready in time, R10), ``Retried`` (it failed; what followed, R12),
    ``retry of`` (it is the next attempt of a failed one), ``Released``, ``Inadmissible``,
    ``Unmapped`` or ``Pending``."""
    detail: str
    reason: Reason | None = None


class AttemptLine(msgspec.Struct, frozen=True, kw_only=True):
    """One attempt of a job with retries (R12) and how it ended."""

    workload: WorkloadKey
    attempt: int
    """1 = the first attempt."""
    ended: str
    """``failed``, ``succeeded``, or ``not ended`` (waiting or running)."""
    reason: Reason | None = None
    """For a failed attempt: the ``Retried`` reason (what killed it, what followed)."""


class ReclaimView(msgspec.Struct, frozen=True, kw_only=True):
    """Whether a pass now could reclaim for the workload, and whom it would preempt."""

    possible: bool
    detail: str
    victims: list[Preempted]


class FairShareView(msgspec.Struct, frozen=True, kw_only=True):
    """What fair share with memory (F1) saw of the job's leaf at the end of the log: its
    decayed usage, weight, and the key it is ordered by beyond its guarantee."""

    quota: QuotaPath
    half_life_s: float
    weight: int
    decayed_usage: dict[str, str]
    """Per resource, in hours of its unit (``12.5 CPU-hours``), decayed to the end of the log."""
    key: str
    """Dominant decayed usage per weight, as hours of the whole root (``0.144 root-hours``;
    lower goes first among borrowing queues)."""


class Explanation(msgspec.Struct, frozen=True, kw_only=True):
    """What ``usher explain`` prints."""

    workload: WorkloadKey
    state: JobState
    """One of the engine's states, ``Rejected`` (its manifest could not be read, and it was
    not deleted since) or ``Deleted``."""
    queue: QueueName | None = None
    quota: QuotaPath | None = None
    position: int | None = None
    priority: int = 0
    requests: dict[str, str]
    reason: Reason | None = None
    reclaim: ReclaimView | None = None
    history: list[HistoryLine]
    as_of_seq: int
    as_of: datetime | None
    attempts: list[AttemptLine] = []
    """Every attempt of its job, first to last, when it has retries (R12); else empty."""
    estimate: Estimate | None = None
    """Its estimated start while it waits in a queue (``usher.core.history.estimate``); else
    None."""
    fair_share: FairShareView | None = None
    """Its leaf's decayed usage when fair share is on (F1); else None."""


def explain(
    history: History, config: EngineConfig, key: WorkloadKey, now_ms: Millis
) -> Explanation:
    """Explain ``key`` on the state at the end of the log; reclaim is tried at ``now_ms``.
    Entries not made by their owner (``usher.core.history.fold.forged``) are left out of all of
    it."""
    believed = believed_only(history)

    def at_end() -> Engine:
        engine = Engine(config)
        fold(engine, believed.items)
        return engine

    last = believed.items[-1] if believed.items else None
    return explain_about(
        believed,
        at_end,
        lambda: intervals_of(believed.items),
        (last.seq, last.time_ms) if last is not None else (0, 0),
        key,
        now_ms,
    )


def believed_only(history: History) -> History:
    """``history`` without the entries their owner did not make (``fold.forged``)."""
    return History(items=[item for item in history.items if forged(item) is None], bad=history.bad)


def explain_about(
    history: History,
    at_end: Callable[[], Engine],
    intervals: Callable[[], list[Interval]],
    as_of: tuple[int, int],
    key: WorkloadKey,
    now_ms: Millis,
) -> Explanation:
    """``explain`` from what it needs of the log: ``history`` (``believed_only``) holds at
    least every entry about ``key`` (``Subjects.about_workload`` matches them all; any other
    is skipped),
    ``at_end`` the engine at the end of the log and ``intervals`` every allocation interval
    (both asked only when needed), ``as_of`` the sequence and time of the log's last entry
    its owner made. A reader that keeps the state (``usher.client.readmodel``) answers
    without the whole log, and exactly as ``explain`` on it."""
    lines: list[HistoryLine] = []
    requests: dict[str, int] = {}
    previous: WorkloadObserved | None = None
    rejected: WorkloadRejected | None = None
    created_ms = _created_ms(history, key)
    for item in history.items:
        event = item.event
        if isinstance(event, WorkloadObserved) and event.workload == key:
            requests = total_requests(event)
        if isinstance(event, WorkloadObserved | WorkloadRejected | WorkloadDeleted) and (
            event.workload == key
        ):
            # The latest word on the object: a rejected manifest stays rejected until the
            # object is read again or deleted (as ``usher jobs`` shows it). A job that only
            # ran unadmitted was suspended and queued: its manifest is not at fault.
            rejected = (
                event
                if isinstance(event, WorkloadRejected) and not bypassed_queue(event.errors)
                else None
            )
        line = _line(item, key, previous, created_ms)
        if line is not None:
            lines.append(line)
            if isinstance(event, WorkloadObserved):
                previous = event
    if not lines:
        raise UnknownWorkload(key)
    attempts = _attempts(history, key)
    if rejected is not None:
        return Explanation(
            workload=key,
            state=JobState.REJECTED,
            requests=quantities(requests),
            reason=reasons.rejected(rejected.errors),
            history=lines,
            as_of_seq=as_of[0],
            as_of=to_datetime(as_of[1]),
        )
    engine = at_end()
    view = engine.job_state(key)
    pending = view is not None and view.state == JobState.PENDING
    reclaim = _reclaim(engine, key, now_ms) if pending else None
    estimate = _estimate(engine, intervals(), key, now_ms) if pending else None
    counted = engine.counted_requests(key)
    if counted is not None:
        requests = counted  # what its admission counts, whatever it asks since (R16)
    return Explanation(
        workload=key,
        state=view.state if view is not None else JobState.DELETED,
        queue=view.queue if view is not None else None,
        quota=view.quota if view is not None else None,
        position=view.position if view is not None else None,
        priority=view.priority if view is not None else 0,
        requests=quantities(requests),
        reason=engine.reason_now(key),
        reclaim=reclaim,
        history=lines,
        as_of_seq=as_of[0],
        as_of=to_datetime(as_of[1]),
        attempts=attempts,
        estimate=estimate,
        fair_share=_fair_share(engine, view.quota if view is not None else None),
    )


def _fair_share(engine: Engine, quota: QuotaPath | None) -> FairShareView | None:
    """The leaf's decayed usage, weight and key as the interleave uses them (F1)."""
    half_life = engine.config.half_life_ms
    if half_life is None or quota is None or quota not in engine.state.tree.nodes:
        return None
    usage = engine.decayed_usage(quota)
    return FairShareView(
        quota=quota,
        half_life_s=half_life / 1000,
        weight=engine.state.tree.fair_weights.get(quota, fairshare.DEFAULT_WEIGHT),
        decayed_usage={r: fairshare.format_usage({r: usage[r]}) for r in sorted(usage)},
        key=fairshare.format_key(engine.fair_key(engine.state.tree.nodes[quota], 1)),
    )


def _estimate(
    engine: Engine, intervals: list[Interval], key: WorkloadKey, now_ms: Millis
) -> Estimate | None:
    """When the pending ``key`` is likely to start, from a trial pass at ``now_ms``."""
    view = engine.job_state(key)
    if view is None:
        return None
    preview = engine.preview_pass(now_ms)
    found = estimate_pending(engine, now_ms, {key: view}, preview, intervals)
    return found.get(key)


def _attempts(history: History, key: WorkloadKey) -> list[AttemptLine]:
    """Every attempt of ``key``'s job (R12): each failed one with its ``Retried`` reason, the
    last one with how it ended so far. Only ``Retried`` decisions link attempts."""
    chain = [item.event for item in history.items if isinstance(item.event, Retried)]
    first = next((r.first for r in chain if r.job == key or r.workload == key), None)
    if first is None:
        return []
    mine = sorted((r for r in chain if r.first == first), key=lambda r: r.attempt)
    out = [
        AttemptLine(workload=r.workload, attempt=r.attempt, ended="failed", reason=r.reason)
        for r in mine
    ]
    follow = mine[-1]
    if follow.job is not None:
        ends = [
            item.event
            for item in history.items
            if isinstance(item.event, WorkloadFinished) and item.event.workload == follow.job
        ]
        ended = "not ended" if not ends else ("succeeded" if ends[-1].succeeded else "failed")
        out.append(AttemptLine(workload=follow.job, attempt=follow.attempt + 1, ended=ended))
    return out


def _reclaim(engine: Engine, key: WorkloadKey, now_ms: Millis) -> ReclaimView:
    why_not, victims = engine.reclaim_preview(key, now_ms)
    if why_not is not None:
        return ReclaimView(possible=False, detail=why_not, victims=[])
    names = ", ".join(f"{v.workload} ({v.quota})" for v in victims)
    return ReclaimView(possible=True, detail=f"a pass now would preempt {names}", victims=victims)


def _created_ms(history: History, key: WorkloadKey) -> Millis | None:
    """When the object was created, as the watcher read it (its first observation)."""
    for item in history.items:
        if isinstance(item.event, WorkloadObserved) and item.event.workload == key:
            return item.event.created_ms
    return None


def _line(
    item: LogEntry, key: WorkloadKey, previous: WorkloadObserved | None, created_ms: Millis | None
) -> HistoryLine | None:
    event = item.event
    what: str
    reason: Reason | None = None
    if isinstance(event, Preempted) and event.preemptor == key and event.workload != key:
        what, detail = "preempts", f"{event.workload} on {event.quota} to make room"
        reason = event.reason
    elif isinstance(event, Retried) and event.job == key:
        what, reason = "retry of", event.reason
        detail = f"{event.workload} (attempt {event.attempt + 1}, first {event.first})"
    elif getattr(event, "workload", None) != key:
        return None
    elif isinstance(event, WorkloadObserved):
        what, detail = "observed", _observed(event, previous)
    elif isinstance(event, WorkloadFinished):
        what, detail = "finished", "succeeded" if event.succeeded else "failed"
    elif isinstance(event, WorkloadDeleted):
        what, detail = "deleted", "the object is gone from the cluster"
    elif isinstance(event, WorkloadRejected) and bypassed_queue(event.errors):
        what = SUSPENDED_BY_USHER
        detail = suspended_by_usher(item.time_ms, previous, created_ms)
    elif isinstance(event, WorkloadRejected):
        errors = "; ".join(f"{e.path}: {e.message}" for e in event.errors)
        what, detail = "rejected", errors or "invalid manifest"
    elif isinstance(event, Admitted):
        what = "Admitted"
        detail = f"on {event.quota} (queue {event.queue}), {format_resources(event.requests)}"
        if event.topology is not None:  # its pods' domain (TP1), as `usher sim` words it
            detail += f", in {pin_text(event.topology)}"
    elif isinstance(event, Preempted):
        # Its own preemptor: a drain's (R15) or grown after admission (R16); nobody takes
        # its place.
        own = "for growing" if event.reason.code == "GrewAfterAdmission" else "by a drain"
        by = f"by {event.preemptor}" if event.preemptor != key else own
        what, detail, reason = "Preempted", f"{by} on {event.quota}", event.reason
    elif isinstance(event, Requeued):
        what, reason = "Requeued", event.reason
        detail = f"on {event.quota}, attempt {event.attempt} of {event.max_attempts}"
    elif isinstance(event, Retried):
        what, reason = "Retried", event.reason
        follow = f"next attempt {event.job}" if event.job is not None else "no next attempt"
        detail = f"attempt {event.attempt} of {event.limit + 1} failed ({event.cause}); {follow}"
    elif isinstance(event, WorkloadProgress):
        what = "progress"
        detail = f"{event.ready}/{event.total} pods ready"
        if event.succeeded or event.failed:
            detail += f", {event.succeeded} succeeded, {event.failed} failed"
    elif isinstance(event, Released):
        what = "Released"
        detail = f"{format_resources(event.requests)} on {event.quota} (cause {event.cause})"
    elif isinstance(event, Inadmissible | Unmapped | Pending):
        what, detail, reason = type(event).__name__, "", event.reason
        if isinstance(event, Pending):
            detail = f"position {event.position} in {event.queue}"
    else:
        return None
    return HistoryLine(
        seq=item.seq,
        time=item.envelope.time,
        source=item.envelope.source,
        what=what,
        detail=detail,
        reason=reason,
    )


def _observed(event: WorkloadObserved, previous: WorkloadObserved | None) -> str:
    status = "suspended" if event.suspended else "running (unsuspended)"
    if previous is not None and total_requests(previous) == total_requests(event):
        return status
    priority = (
        f"priority class {event.priority_class}"
        if event.priority_class
        else f"priority {event.priority or 0}"
    )
    declared = (
        f"; declares a maximum runtime of {event.max_runtime_seconds} s"  # RT1
        if event.max_runtime_seconds is not None
        else ""
    )
    return (
        f"{status}; {event.kind}; requests {format_resources(total_requests(event))}; {priority}; "
        f"zone {event.zone}{declared}"
    )


# ---------------------------------------------------------------------------- rendering


def render_explain_json(explanation: Explanation) -> str:
    """One JSON object in the words of ``usher jobs -o json``: ``job`` (never ``workload``)
    and quantities in Kubernetes notation (``"70"`` cpu, ``"16Gi"``), not canonical units."""
    data = _for_people(msgspec.to_builtins(explanation))
    if not explanation.attempts:
        del data["attempts"]  # a job without retries reads as it did before R12
    if explanation.estimate is None:
        del data["estimate"]  # only a pending job has one
    if explanation.fair_share is None:
        del data["fair_share"]  # only with fair share on (F1)
    return msgspec.json.format(msgspec.json.encode(data).decode(), indent=2) + "\n"


def people_json(result: object) -> str:
    """Any result (a Struct, or a list of them) for people as indented JSON, in the words
    ``render_explain_json`` uses."""
    data = _for_people(msgspec.to_builtins(result))
    return msgspec.json.format(msgspec.json.encode(data).decode(), indent=2) + "\n"


_AMOUNTS = ("used", "requested", "limit")
_RENAMED = {"workload": "job", "blocker": "blocking_job", "preemptor": "preempting_job"}


def _for_people(value: Any) -> Any:
    """``value`` (builtins) with job keys renamed and a reason's amounts as quantities."""
    if isinstance(value, list):
        return [_for_people(item) for item in value]
    if not isinstance(value, dict):
        return value
    resource = value.get("resource")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key in _AMOUNTS and isinstance(resource, str) and isinstance(item, int):
            out[key] = format_quantity(resource, item)
        else:
            out[_RENAMED.get(str(key), str(key))] = _for_people(item)
    return out


def _limit(reason: Reason) -> str | None:
    if reason.resource is None or reason.requested is None or reason.limit is None:
        return None
    r = reason.resource
    allowed = f"{format_quantity(r, reason.limit)} allowed"
    over = (
        requested_over(r, reason.requested, allowed)
        if reason.used is None
        else used_and_requested_over(r, reason.used, reason.requested, allowed)
    )
    where = f"{reason.node} " if reason.node else ""
    return f"{where}{r}: {over}"


def render_explain_table(explanation: Explanation) -> str:
    """A plain-text explanation for people."""
    e = explanation
    head = [e.workload, e.state]
    if e.queue:
        head.append(f"queue {e.queue}")
    if e.position is not None:
        head.append(f"position {e.position}")
    head.append(f"priority {e.priority}")
    lines = ["  ".join(head)]
    requests = ", ".join(f"{r} {q}" for r, q in e.requests.items()) or "-"
    lines.append(f"  requests: {requests}")
    if e.quota:
        lines.append(f"  quota:    {e.quota}")
    if e.reason is not None:
        lines.append(f"  why:      {e.reason.code}: {e.reason.message}")
        limit = _limit(e.reason)
        if limit is not None:
            lines.append(f"  limit:    {limit}")
    if e.reclaim is not None:
        answer = "yes" if e.reclaim.possible else "no"
        lines.append(f"  reclaim:  {answer}: {e.reclaim.detail}")
        for victim in e.reclaim.victims:
            lines.append(f"            {victim.workload}: {victim.reason.message}")
    if e.estimate is not None:
        lines.append(f"  start:    {describe(e.estimate)}")
        if e.estimate.known:
            lines.append(f"            {e.estimate.basis}")
    if e.fair_share is not None:
        f = e.fair_share
        usage = ", ".join(f.decayed_usage.values()) or "none"
        lines.append(
            f"  fair:     {f.quota} decayed usage {usage} (half-life {f.half_life_s:g}s), "
            f"weight {f.weight}, key {f.key} (F1: lower goes first beyond the guarantee)"
        )
    when = format_datetime(e.as_of) if e.as_of else "-"
    lines.append(f"  as of:    seq {e.as_of_seq} ({when})")
    if not e.attempts:
        lines += ["", "history:"]
    if e.attempts:
        lines += ["", "attempts:"]
        for attempt in e.attempts:
            why = f"  {attempt.reason.code}: {attempt.reason.message}" if attempt.reason else ""
            lines.append(f"  {attempt.attempt:>3}  {attempt.workload:<40} {attempt.ended}{why}")
        lines += ["", "history:"]
    for line in e.history:
        detail = f"  {line.detail}" if line.detail else ""
        lines.append(f"  seq {line.seq:<6} {format_datetime(line.time)}  {line.what:<12}{detail}")
        if line.reason is not None:
            lines.append(f"{'':<46}{line.reason.code}: {line.reason.message}")
    return "\n".join(lines) + "\n"


__all__ = [
    "AttemptLine",
    "Explanation",
    "FairShareView",
    "HistoryLine",
    "ReclaimView",
    "UnknownWorkload",
    "explain",
    "people_json",
    "render_explain_json",
    "render_explain_table",
    "total_requests",
]
