"""Estimated start of pending workloads, from the queue ahead and the runs the log records.

What it does: for each waiting workload (``Waiting``: its queue, its place in it, the node that
limits it and whether the next pass admits it) says when it is likely to start, as a time with
a range (``Estimate``: p25, p50 and p75), or ``unknown`` with the reason. The model: the
workloads that hold quota under the limiting node (its leaf when nothing else limits it) are
slots; each slot frees when its holder's run ends -- a running one's remaining time is taken
from the runs that lasted longer than it has run so far -- and is taken again by the next
workload of the queue for a typical run. The workload starts when the slot it is given frees.
Run lengths are the allocation intervals the log records (U1: ``Admitted`` to ``Released``,
``Preempted`` or ``Requeued``, in ``usher.core.usage``), of its own queue, or of every queue
when its own has fewer than ``MIN_RUNS``; a quantile is the nearest rank, so every answer is
an exact function of its inputs.

What it must never do: read a clock (``now`` is passed in), perform I/O, use randomness, or
feed anything back into a decision (an estimate is advice for people, never an input of
admission).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right, insort
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import msgspec

from schemas import Admitted, Millis, QueueName, QuotaPath, WorkloadKey, WorkloadObserved
from usher.core.config import EngineConfig
from usher.core.engine import Engine, JobView, PassPreview
from usher.core.history import format_time
from usher.core.log import LogEntry
from usher.core.state import JobState
from usher.core.usage import Interval, UsageFold

MIN_RUNS = 3
"""Fewer ended runs than this (in its queue, then on the whole log) and the estimate is
unknown: a quantile of one or two runs says little."""

NOT_YET_EVALUATED = "NotYetEvaluated"
"""The code of "fits now; the next decision pass admits it"."""

QUANTILES = (25, 50, 75)
"""The range (p25-p75) and the middle (p50) every estimate gives."""


class Estimate(msgspec.Struct, frozen=True, kw_only=True):
    """When a pending workload is likely to start; the times are None when ``unknown``."""

    start_ms: Millis | None = None
    """The middle estimate (p50 run lengths), in ms since the epoch."""
    early_ms: Millis | None = None
    """With p25 run lengths."""
    late_ms: Millis | None = None
    """With p75 run lengths."""
    basis: str
    """What it rests on, or why it is unknown, in words for people."""

    @property
    def known(self) -> bool:
        return self.start_ms is not None


@dataclass(frozen=True)
class Waiting:
    """One pending workload, as the estimator needs it."""

    workload: WorkloadKey
    queue: QueueName
    leaf: QuotaPath
    position: int
    """1-based place in its queue."""
    node: QuotaPath | None = None
    """The node whose quota it waits for (the reason's node); None: its leaf."""
    admitted_next: bool = False
    """The next decision pass admits it."""


def waiting_of(views: dict[WorkloadKey, JobView], preview: PassPreview) -> list[Waiting]:
    """Every pending workload of ``views`` (the engine's, before the pass), with what the
    trial pass ``preview`` says of it: whether it admits it, else the node it waits for."""
    admitted = {d.workload for d in preview.decisions if isinstance(d, Admitted)}
    out: list[Waiting] = []
    for key, view in sorted(views.items()):
        if (
            view.state != JobState.PENDING
            or view.queue is None
            or view.quota is None
            or view.position is None
        ):
            continue
        after = preview.waiting.get(key)
        reason = after.reason if after is not None else view.reason
        out.append(
            Waiting(
                workload=key,
                queue=view.queue,
                leaf=view.quota,
                position=view.position,
                node=reason.node if reason is not None else None,
                admitted_next=key in admitted,
            )
        )
    return out


def estimates_on_arrival(
    items: Iterable[LogEntry], config: EngineConfig
) -> dict[WorkloadKey, tuple[Millis, Estimate]]:
    """The estimate each workload would have been given when it was first observed, and when
    that was: the log folded up to each arrival (what ``make bench`` compares with the wait
    that followed). Without a trial pass per arrival, the state's own answer
    (``Engine.reason_now``) says whether it fits and which node limits it."""
    engine = Engine(config)
    usage = UsageFold()
    by_queue: dict[QueueName, list[int]] = {}
    out: dict[WorkloadKey, tuple[Millis, Estimate]] = {}
    for item in items:
        event, at = item.event, item.time_ms
        usage.apply(event, at)
        for interval in usage.closed:  # what just ended: one more run length
            if interval.end_ms is not None:
                insort(by_queue.setdefault(interval.queue, []), interval.end_ms - interval.start_ms)
        usage.closed.clear()
        try:
            engine.apply(event, at)
        except Exception:  # the core refused it; a service parks such an entry and goes on
            continue
        if isinstance(event, WorkloadObserved) and event.workload not in out:
            found = _on_arrival(engine, event.workload, at, by_queue, usage)
            if found is not None:
                out[event.workload] = (at, found)
    return out


def _on_arrival(
    engine: Engine,
    key: WorkloadKey,
    now: Millis,
    by_queue: dict[QueueName, list[int]],
    usage: UsageFold,
) -> Estimate | None:
    view = engine.job_state(key)
    if view is None or view.state != JobState.PENDING or view.queue is None:
        return None
    if view.quota is None or view.position is None:
        return None
    reason = engine.reason_now(key)
    waiting = Waiting(
        workload=key,
        queue=view.queue,
        leaf=view.quota,
        position=view.position,
        node=reason.node if reason is not None else None,
        admitted_next=reason is None or reason.code == NOT_YET_EVALUATED,
    )
    return estimate_with(now, [waiting], by_queue, list(usage.open.values())).get(key)


def quantile(sorted_values: Sequence[int], q: int) -> int:
    """The nearest-rank ``q``-th percentile of a non-empty ascending sequence."""
    rank = max(1, -(-q * len(sorted_values) // 100))  # ceil(q * n / 100), at least 1
    return sorted_values[rank - 1]


def run_lengths(intervals: Iterable[Interval]) -> dict[QueueName, list[int]]:
    """The length in ms of every ended allocation interval, ascending, per queue."""
    out: dict[QueueName, list[int]] = {}
    for interval in intervals:
        if interval.end_ms is not None:
            out.setdefault(interval.queue, []).append(interval.end_ms - interval.start_ms)
    for lengths in out.values():
        lengths.sort()
    return out


def _under(node: QuotaPath, quota: QuotaPath) -> bool:
    return quota == node or quota.startswith(node + "/")


def remaining(lengths: Sequence[int], elapsed: int, q: int) -> int:
    """How much longer a run that has lasted ``elapsed`` ms goes on at quantile ``q``: from the
    runs that lasted longer (``lengths`` ascending); 0 (any moment now) when none did."""
    first = bisect_right(lengths, elapsed)
    longer = len(lengths) - first
    if longer == 0:
        return 0
    rank = max(1, -(-q * longer // 100))
    return lengths[first + rank - 1] - elapsed


def slot_starts(slots: Sequence[int], run: int, count: int) -> list[int]:
    """When each of the next ``count`` workloads of a queue starts (ms from now): the earliest
    free slot is taken, and frees again ``run`` ms later."""
    heap = list(slots)
    heapq.heapify(heap)
    starts: list[int] = []
    for _ in range(count):
        free = heapq.heappop(heap)
        starts.append(free)
        heapq.heappush(heap, free + run)
    return starts


def _lengths_for(
    queue: QueueName, by_queue: dict[QueueName, list[int]]
) -> tuple[list[int], str] | str:
    """The run lengths an estimate in ``queue`` rests on and their name, or why none do."""
    own = by_queue.get(queue, [])
    if len(own) >= MIN_RUNS:
        return own, f"{len(own)} runs of queue {queue}"
    every = sorted(length for lengths in by_queue.values() for length in lengths)
    if len(every) >= MIN_RUNS:
        return every, f"{len(every)} runs of every queue ({len(own)} of {queue})"
    ended = f"{len(every)} run has" if len(every) == 1 else f"{len(every)} runs have"
    return f"unknown: {ended} ended on the log, {MIN_RUNS} are needed"


def estimate_starts(
    now: Millis, waiting: Sequence[Waiting], intervals: Sequence[Interval]
) -> dict[WorkloadKey, Estimate]:
    """An estimate for each of ``waiting`` at ``now``, from the allocation ``intervals`` of the
    log so far (the ended ones give run lengths, the open ones are what runs now)."""
    running = [interval for interval in intervals if interval.end_ms is None]
    return estimate_with(now, waiting, run_lengths(intervals), running)


def estimate_with(
    now: Millis,
    waiting: Sequence[Waiting],
    by_queue: dict[QueueName, list[int]],
    running: Sequence[Interval],
) -> dict[WorkloadKey, Estimate]:
    """``estimate_starts`` from run lengths already gathered (``run_lengths``: ascending, per
    queue) and the intervals still open: for a caller that keeps both as the log grows."""
    groups: dict[tuple[QueueName, QuotaPath], list[Waiting]] = {}
    out: dict[WorkloadKey, Estimate] = {}
    for item in waiting:
        if item.admitted_next:
            out[item.workload] = Estimate(
                start_ms=now, early_ms=now, late_ms=now, basis="the next decision pass admits it"
            )
        else:
            groups.setdefault((item.queue, item.node or item.leaf), []).append(item)
    for (queue, node), members in sorted(groups.items()):
        out.update(_estimate_group(now, queue, node, members, by_queue, running))
    return out


def _estimate_group(
    now: Millis,
    queue: QueueName,
    node: QuotaPath,
    members: list[Waiting],
    by_queue: dict[QueueName, list[int]],
    running: Sequence[Interval],
) -> dict[WorkloadKey, Estimate]:
    """Estimates for the workloads of one queue waiting for the same node: one pass of the
    slot model per quantile gives every position at once."""
    found = _lengths_for(queue, by_queue)
    if isinstance(found, str):
        return {m.workload: Estimate(basis=found) for m in members}
    lengths, named = found
    elapsed = sorted(now - i.start_ms for i in running if _under(node, i.quota))
    if not elapsed:
        why = f"unknown: nothing runs under {node} whose end would make room"
        return {m.workload: Estimate(basis=why) for m in members}
    last = max(m.position for m in members)
    starts = {
        q: slot_starts([remaining(lengths, e, q) for e in elapsed], quantile(lengths, q), last)
        for q in QUANTILES
    }
    out: dict[WorkloadKey, Estimate] = {}
    for m in members:
        at = {q: Millis(now + starts[q][m.position - 1]) for q in QUANTILES}
        basis = (
            f"{m.position - 1} ahead in {queue}, {len(elapsed)} running under {node}; "
            f"{named}: p25 {_span(quantile(lengths, 25))}, p50 {_span(quantile(lengths, 50))}, "
            f"p75 {_span(quantile(lengths, 75))}"
        )
        out[m.workload] = Estimate(start_ms=at[50], early_ms=at[25], late_ms=at[75], basis=basis)
    return out


def _span(ms: int) -> str:
    """``45s``, ``12m``, ``3h05m``: a run length for people."""
    seconds = ms // 1000
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes}m"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def describe(estimate: Estimate | None) -> str:
    """One line for people: ``2026-01-01T10:05:00.000Z (p25 .. - p75 ..)`` or the reason."""
    if estimate is None:
        return "-"
    if estimate.start_ms is None or estimate.early_ms is None or estimate.late_ms is None:
        return estimate.basis
    if estimate.early_ms == estimate.late_ms:
        return format_time(estimate.start_ms)
    return (
        f"{format_time(estimate.start_ms)} (p25 {format_time(estimate.early_ms)}, "
        f"p75 {format_time(estimate.late_ms)})"
    )


__all__ = [
    "MIN_RUNS",
    "QUANTILES",
    "Estimate",
    "Waiting",
    "describe",
    "estimate_starts",
    "estimate_with",
    "estimates_on_arrival",
    "quantile",
    "remaining",
    "run_lengths",
    "slot_starts",
    "waiting_of",
]
