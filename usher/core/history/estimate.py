"""Estimated start of pending workloads, from the queue ahead and the runs the log records.

What it does: for each waiting workload (``Waiting``: its queue, its place in it, the node that
limits it, whether the next pass admits it, the gate that shuts it and a reservation ahead)
says when it is likely to start, as a time with a range (``Estimate``: p25, p50 and p75, worded
as people read it), or ``unknown`` with the reason. It says "now" only for a workload the
next pass admits. A workload an admission gate shuts waits for what that gate says opens it
(``usher.core.gates.view.Opening``, the gate's one answer): unknown until an event when only
an event opens it ("not before root/a is resumed"), no earlier than the instant it names
otherwise (a backoff's end, a budget's reset). The model: the
workloads that hold quota under the limiting node (its leaf when nothing else limits it) are
slots; each slot frees when its holder's run ends -- a running one's remaining time is taken
from the runs that lasted longer than it has run so far; one that has outrun every run on
record and declares no end still ahead frees it at no time anyone can say -- and is taken
again by the next workload of the queue for a typical run. The workload starts when the slot
it is given frees; a head passed over by later admissions is given the room it waits for
from when the starvation guard (N1) reserves it, at the latest.
Run lengths are the allocation intervals the log records (U1: ``Admitted`` to ``Released``,
``Preempted`` or ``Requeued``, in ``usher.core.history.usage``), of its own queue, or of every queue
when its own has fewer than ``MIN_RUNS``; a quantile is the nearest rank, so every answer is
an exact function of its inputs. A declared maximum runtime (RT1, ``Declared``) bounds a run
(docs/admission-rules.md E1): a running workload that declares one frees its slot at the latest
at its admission + the declaration, a queued one holds a slot at most that long; each quantile
is the smaller of the history's and the bound. With too few runs on the log, the declarations
alone give a latest start where they make room (what declares nothing counts as never ending).

What it must never do: read a clock (``now`` is passed in), perform I/O, use randomness, or
feed anything back into a decision (an estimate is advice for people, never an input of
admission).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec

from schemas import Admitted, Millis, QueueName, QuotaPath, WorkloadKey, WorkloadObserved
from usher.core.engine.facade import Engine, JobView, PassPreview
from usher.core.gates.view import Refusal
from usher.core.history.replay import History, format_time
from usher.core.history.replayer import Observer, replay_once
from usher.core.history.usage import Interval, UsageFold
from usher.core.model.config import EngineConfig
from usher.core.protocol.log import LogEntry
from usher.core.state.indexed import JobState
from usher.core.values.elapsed import age_text, start_words

MIN_RUNS = 3
"""Fewer ended runs than this (in its queue, then on the whole log) and the estimate is
unknown: a quantile of one or two runs says little."""

NOT_YET_EVALUATED = "NotYetEvaluated"
"""The code of "fits now; the next decision pass admits it"."""

QUANTILES = (25, 50, 75)
"""The range (p25-p75) and the middle (p50) every estimate gives."""

NEVER: Final = 2**62
"""A slot nothing says will ever free (ms from now): later than any real time, so a start at
or after it is no start at all."""

UNKNOWN: Final = "unknown: "
"""How the basis of an estimate without times begins."""


class Estimate(msgspec.Struct, frozen=True, kw_only=True):
    """When a pending workload is likely to start; the times are None when ``unknown``. From
    declared runtimes alone (E1) the three times are one: the latest start they give."""

    start_ms: Millis | None = None
    """The middle estimate (p50 run lengths), in ms since the epoch."""
    early_ms: Millis | None = None
    """With p25 run lengths."""
    late_ms: Millis | None = None
    """With p75 run lengths: the upper bound of the range."""
    basis: str
    """What it rests on, or why it is unknown, in words for people."""
    not_before_ms: Millis | None = None
    """No start before this: the earliest instant the admission gate that shuts it can open
    (a backoff's end, a budget window's reset); None when no gate holds it back by time."""
    made_ms: Millis
    """The instant it was made (the ``now`` it was estimated at)."""
    says: str
    """How ``usher jobs --start`` words it at ``made_ms`` (``now``, ``~12m (5m-20m)``,
    ``unknown``): ``words`` at that instant."""

    @property
    def known(self) -> bool:
        return self.start_ms is not None

    def words(self, now_ms: int, *, why: bool = False) -> str:
        """The one wording of this estimate at ``now_ms`` (``usher.core.values.elapsed``);
        with ``why`` an unknown one is given with its reason (``basis``)."""
        if why and not self.known:
            return self.basis
        return start_words(self.start_ms, self.early_ms, self.late_ms, now_ms)


def made(
    now: Millis,
    basis: str,
    times: tuple[int, int, int] | None = None,
    not_before: Millis | None = None,
) -> Estimate:
    """An estimate made at ``now``: ``times`` (p25, p50, p75 in ms since the epoch) or
    unknown, with its words."""
    early, start, late = (None, None, None) if times is None else (Millis(t) for t in times)
    return Estimate(
        start_ms=start,
        early_ms=early,
        late_ms=late,
        basis=basis,
        not_before_ms=not_before,
        made_ms=now,
        says=start_words(start, early, late, now),
    )


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
    shut: Refusal | None = None
    """The admission gate that keeps it from being offered now and what opens it
    (``shut_by``); None: none does."""
    reserved_from: Millis | None = None
    """A head passed over by later admissions: when the starvation guard (N1) starts
    reserving room for it (``Engine.reserved_from``); None: not passed over, or already."""


@dataclass(frozen=True)
class Declared:
    """The declared maximum runtimes (RT1) an estimate may use, in ms; empty: none declared."""

    running: Mapping[WorkloadKey, int] = field(default_factory=dict)
    """By admitted workload: it ends at the latest at its admission + this."""
    queued: Mapping[QueueName, Sequence[int | None]] = field(default_factory=dict)
    """By queue, its pending workloads' in queue order (index 0: position 1); None: that one
    declares nothing. A queue where none declares may be left out."""


NO_DECLARATIONS: Final = Declared()


def declared_of(engine: Engine, running: Iterable[Interval]) -> Declared:
    """What the engine's workloads declare (RT1): the admitted ones of ``running`` (the open
    allocation intervals), and every queue's pending ones in order."""
    jobs = engine.state.jobs
    admitted: dict[WorkloadKey, int] = {}
    for interval in running:
        job = jobs.get(interval.workload)
        if job is not None and job.max_runtime_ms is not None:
            admitted[interval.workload] = job.max_runtime_ms
    queued: dict[QueueName, list[int | None]] = {}
    for name, entries in engine.queues().items():
        runtimes = [jobs[entry.job].max_runtime_ms for entry in entries]
        if any(runtime is not None for runtime in runtimes):
            queued[name] = runtimes
    return Declared(running=admitted, queued=queued)


def shut_by(shut: Refusal | None) -> Refusal | None:
    """The refusal an estimate reads (``shut``: the first admission gate that shuts it,
    ``Engine.refusal_of``): a standing one (a victim about to stop, R7) is left to the model,
    since a pass offers it as it does any workload that does not fit."""
    return None if shut is None or shut.stands else shut


def waiting_of(
    views: dict[WorkloadKey, JobView],
    preview: PassPreview,
    shut: Mapping[WorkloadKey, Refusal] | None = None,
    reserved: Mapping[WorkloadKey, Millis] | None = None,
) -> list[Waiting]:
    """Every pending workload of ``views`` (the engine's, before the pass), with what the
    trial pass ``preview`` says of it: whether it admits it, else the node it waits for;
    ``shut``: what keeps some of them from being offered (``shut_by``); ``reserved``: when
    the starvation guard reserves room for the heads passed over."""
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
                shut=None if shut is None else shut.get(key),
                reserved_from=None if reserved is None else reserved.get(key),
            )
        )
    return out


def estimate_pending(
    engine: Engine,
    now: Millis,
    views: dict[WorkloadKey, JobView],
    preview: PassPreview,
    intervals: Sequence[Interval],
) -> dict[WorkloadKey, Estimate]:
    """The estimate of every pending workload of ``views`` (``waiting_of``) from the log's
    allocation ``intervals`` and what ``engine``'s workloads declare (``declared_of``)."""
    running = [interval for interval in intervals if interval.end_ms is None]
    declared = declared_of(engine, running)
    shut = {key: found for key in views if (found := shut_by(engine.refusal_of(key)))}
    reserved = {key: at for key in views if (at := engine.reserved_from(key)) is not None}
    waiting = waiting_of(views, preview, shut, reserved)
    return estimate_starts(now, waiting, intervals, declared)


def estimates_on_arrival(
    items: Iterable[LogEntry], config: EngineConfig
) -> dict[WorkloadKey, tuple[Millis, Estimate]]:
    """The estimate each workload would have been given when it was first observed, and when
    that was: the log folded up to each arrival (what ``make bench`` compares with the wait
    that followed). The state's own answer (``Engine.reason_now``) says which node limits
    it; only for the head of its queue that fits by itself is a trial pass run, whose answer
    alone says "now" (other queues' heads may take the room first); one behind others of its
    queue is never "now" on arrival."""
    arrivals = _Arrivals()
    replay_once(History(items=list(items), bad=[]), Engine(config), [arrivals])
    return arrivals.found


@dataclass
class _Arrivals(Observer):
    """``estimates_on_arrival`` as an observer of the replay (``replay_once``): each run that
    ends adds its length, each first observation is estimated on the state it found."""

    usage: UsageFold = field(default_factory=UsageFold)
    by_queue: dict[QueueName, list[int]] = field(default_factory=dict)
    found: dict[WorkloadKey, tuple[Millis, Estimate]] = field(default_factory=dict)
    declares: bool = False
    """Until a workload declares a runtime, there is nothing to look up."""

    def folded(self, engine: Engine, item: LogEntry) -> None:
        event, at = item.event, item.time_ms
        self.usage.apply(event, at)
        for interval in self.usage.closed:  # what just ended: one more run length
            if interval.end_ms is not None:
                insort(
                    self.by_queue.setdefault(interval.queue, []),
                    interval.end_ms - interval.start_ms,
                )
        self.usage.closed.clear()
        if isinstance(event, WorkloadObserved):
            self.declares = self.declares or event.max_runtime_seconds is not None
            if event.workload not in self.found:
                estimate = _on_arrival(
                    engine, event.workload, at, self.by_queue, self.usage, self.declares
                )
                if estimate is not None:
                    self.found[event.workload] = (at, estimate)


def _on_arrival(
    engine: Engine,
    key: WorkloadKey,
    now: Millis,
    by_queue: dict[QueueName, list[int]],
    usage: UsageFold,
    declares: bool,
) -> Estimate | None:
    view = engine.job_state(key)
    if view is None or view.state != JobState.PENDING or view.queue is None:
        return None
    if view.quota is None or view.position is None:
        return None
    shut = engine.refusal_of(key)
    reason = engine.reason_now(key)
    fits = shut is None and (reason is None or reason.code == NOT_YET_EVALUATED)
    if fits and view.position == 1:
        # The head of its queue fits by itself: whether the next pass admits it (what "now"
        # means) is the trial pass's answer, as everywhere else -- other queues' heads may
        # take the room first. One behind others of its own queue is never "now" here (the
        # pass tries those first): the model says when, and no trial pass is paid for it.
        preview = engine.preview_pass(now)
        after = preview.waiting.get(key)
        admitted = any(isinstance(d, Admitted) and d.workload == key for d in preview.decisions)
        reason = after.reason if after is not None else reason
    else:
        admitted = False
    waiting = Waiting(
        workload=key,
        queue=view.queue,
        leaf=view.quota,
        position=view.position,
        node=reason.node if reason is not None else None,
        admitted_next=admitted,
        shut=shut_by(shut),
        reserved_from=engine.reserved_from(key),
    )
    running = list(usage.open.values())
    declared = declared_of(engine, running) if declares else NO_DECLARATIONS
    return estimate_with(now, [waiting], by_queue, running, declared).get(key)


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


def remaining(lengths: Sequence[int], elapsed: int, q: int) -> int | None:
    """How much longer a run that has lasted ``elapsed`` ms goes on at quantile ``q``: from the
    runs that lasted longer (``lengths`` ascending); None when none did (it has outrun the
    history: nothing on record says when it ends)."""
    first = bisect_right(lengths, elapsed)
    longer = len(lengths) - first
    if longer == 0:
        return None
    rank = max(1, -(-q * longer // 100))
    return lengths[first + rank - 1] - elapsed


def slot_starts(slots: Sequence[int], run: int, count: int) -> list[int]:
    """When each of the next ``count`` workloads of a queue starts (ms from now): the earliest
    free slot is taken, and frees again ``run`` ms later."""
    return starts_in_turn(slots, [run] * count)


def starts_in_turn(slots: Sequence[int], runs: Sequence[int]) -> list[int]:
    """When each of the next workloads of a queue starts (ms from now), the i-th running for
    ``runs[i]``: each takes the earliest free slot, which frees again when its run ends."""
    heap = list(slots)
    heapq.heapify(heap)
    starts: list[int] = []
    for run in runs:
        free = heapq.heappop(heap)
        starts.append(free)
        heapq.heappush(heap, free + run)
    return starts


def _lengths_for(
    queue: QueueName, by_queue: dict[QueueName, list[int]]
) -> tuple[list[int], str] | str:
    """The run lengths an estimate in ``queue`` rests on and their name, or (without
    ``UNKNOWN``) why there are too few."""
    own = by_queue.get(queue, [])
    if len(own) >= MIN_RUNS:
        return own, f"{len(own)} runs of queue {queue}"
    every = sorted(length for lengths in by_queue.values() for length in lengths)
    if len(every) >= MIN_RUNS:
        return every, f"{len(every)} runs of every queue ({len(own)} of {queue})"
    ended = f"{len(every)} run has" if len(every) == 1 else f"{len(every)} runs have"
    return f"{ended} ended on the log, {MIN_RUNS} are needed"


def estimate_starts(
    now: Millis,
    waiting: Sequence[Waiting],
    intervals: Sequence[Interval],
    declared: Declared = NO_DECLARATIONS,
) -> dict[WorkloadKey, Estimate]:
    """An estimate for each of ``waiting`` at ``now``, from the allocation ``intervals`` of the
    log so far (the ended ones give run lengths, the open ones are what runs now) and what the
    workloads declare (``declared_of``)."""
    running = [interval for interval in intervals if interval.end_ms is None]
    return estimate_with(now, waiting, run_lengths(intervals), running, declared)


def estimate_with(
    now: Millis,
    waiting: Sequence[Waiting],
    by_queue: dict[QueueName, list[int]],
    running: Sequence[Interval],
    declared: Declared = NO_DECLARATIONS,
) -> dict[WorkloadKey, Estimate]:
    """``estimate_starts`` from run lengths already gathered (``run_lengths``: ascending, per
    queue) and the intervals still open: for a caller that keeps both as the log grows."""
    groups: dict[tuple[QueueName, QuotaPath], list[Waiting]] = {}
    out: dict[WorkloadKey, Estimate] = {}
    for item in waiting:
        if item.shut is not None and item.shut.until is None:
            basis = f"{UNKNOWN}{item.shut.says}: not before {item.shut.opens.on}"
            out[item.workload] = made(now, basis)
        elif item.admitted_next and item.shut is None:
            out[item.workload] = made(now, "the next decision pass admits it", (now, now, now))
        else:
            groups.setdefault((item.queue, item.node or item.leaf), []).append(item)
    for (queue, node), members in sorted(groups.items()):
        found = _estimate_group(now, queue, node, members, by_queue, running, declared)
        for m in members:
            out[m.workload] = _held_back(now, m, found[m.workload])
    return out


def _held_back(now: Millis, item: Waiting, estimate: Estimate) -> Estimate:
    """``estimate`` no earlier than the instant the gate that shuts ``item`` can open, and
    for a head passed over, shifted to when the starvation guard reserves room for it."""
    basis, times = estimate.basis, _times(estimate)
    not_before: Millis | None = None
    reserve = item.reserved_from
    if reserve is not None and reserve > now and times is not None:
        early, start, late = times
        # Until the reservation, later workloads may take the room as it frees (they did):
        # from it on, the room is kept for this one, and frees as it would from now.
        times = (early, max(start, reserve + start - now), max(late, reserve + late - now))
        basis += (
            "; passed over by later admissions: the starvation guard (N1) keeps room for it "
            f"from {format_time(reserve)}"
        )
    if item.shut is not None and item.shut.until is not None:
        not_before = item.shut.until
        if times is not None:
            early, start, late = times
            times = (max(early, not_before), max(start, not_before), max(late, not_before))
        basis += f"; not before {format_time(not_before)}, when {item.shut.opens.on}"
    if basis == estimate.basis:
        return estimate
    return made(now, basis, times, not_before)


def _times(estimate: Estimate) -> tuple[int, int, int] | None:
    if estimate.early_ms is None or estimate.start_ms is None or estimate.late_ms is None:
        return None
    return (estimate.early_ms, estimate.start_ms, estimate.late_ms)


@dataclass(frozen=True)
class _Holder:
    """A workload holding quota under the node waited for."""

    elapsed: int
    """How long it has run, ms."""
    left: int | None
    """At most how much longer it runs by its declaration (0: past its declared end, which
    then says nothing more); None: it declares nothing."""


def _holders(
    now: Millis, node: QuotaPath, running: Sequence[Interval], declared: Declared
) -> list[_Holder]:
    """What runs under ``node`` now, each with the bound its declaration puts on it."""
    out: list[_Holder] = []
    for interval in running:
        if not _under(node, interval.quota):
            continue
        runtime = declared.running.get(interval.workload)
        left = None if runtime is None else max(0, interval.start_ms + runtime - now)
        out.append(_Holder(elapsed=now - interval.start_ms, left=left))
    return out


def _end(holder: _Holder, lengths: Sequence[int] | None, q: int) -> int:
    """When ``holder``'s slot frees at quantile ``q``, ms from now: its remaining time among
    the runs on record that lasted longer (``lengths``; None: too few runs), no later than
    its declared end while that is ahead; ``NEVER`` when neither says (it has outrun every
    run on record and declares no end still ahead)."""
    history = None if lengths is None else remaining(lengths, holder.elapsed, q)
    bound = holder.left or None  # a declared end already passed bounds nothing
    if history is None:
        return NEVER if bound is None else bound
    return history if bound is None else min(history, bound)


def _endless(holders: Sequence[_Holder], named: str | None) -> str:
    """Why no start can be given: every running workload under the node has outrun the
    history (``named``; None: too few runs) and declares no end still ahead."""
    passed = sum(1 for h in holders if h.left is not None)
    count = f"{len(holders)} running job{'s' if len(holders) != 1 else ''}"
    ends = "no declared end" if not passed else "no declared end ahead"
    oldest = age_text(max(h.elapsed for h in holders) // 1000)
    why = f"{UNKNOWN}waits on {count} with {ends} (oldest {oldest})"
    if named is not None:
        why += f", longer than any of the {named}"
    return why


def _bounded(typical: int, bound: int | None) -> int:
    """A run length from history, no longer than a declaration allows."""
    return typical if bound is None else min(typical, bound)


def _queued(declared: Declared, queue: QueueName, count: int) -> list[int | None]:
    """The declared runtimes of the first ``count`` workloads of ``queue`` (None: none)."""
    found = list(declared.queued.get(queue, ()))[:count]
    return found + [None] * (count - len(found))


def _estimate_group(
    now: Millis,
    queue: QueueName,
    node: QuotaPath,
    members: list[Waiting],
    by_queue: dict[QueueName, list[int]],
    running: Sequence[Interval],
    declared: Declared,
) -> dict[WorkloadKey, Estimate]:
    """Estimates for the workloads of one queue waiting for the same node: one pass of the
    slot model per quantile gives every position at once."""
    found = _lengths_for(queue, by_queue)
    holders = _holders(now, node, running, declared)
    if isinstance(found, str) and not holders:  # too few runs is said first, as ever
        return {m.workload: made(now, f"{UNKNOWN}{found}") for m in members}
    if not holders:
        why = f"{UNKNOWN}nothing runs under {node} whose end would make room"
        return {m.workload: made(now, why) for m in members}
    queued = _queued(declared, queue, max(m.position for m in members))
    if isinstance(found, str):
        return _by_declarations(now, queue, node, members, holders, queued, found)
    lengths, named = found
    starts = {
        q: starts_in_turn(
            [_end(h, lengths, q) for h in holders],
            [_bounded(quantile(lengths, q), runtime) for runtime in queued],
        )
        for q in QUANTILES
    }
    out: dict[WorkloadKey, Estimate] = {}
    for m in members:
        if starts[50][m.position - 1] >= NEVER:  # every slot's end is unknown
            out[m.workload] = made(now, _endless(holders, named))
            continue
        at = tuple(now + starts[q][m.position - 1] for q in QUANTILES)
        basis = (
            f"{m.position - 1} ahead in {queue}, {len(holders)} running under {node}; "
            f"{named}: p25 {span(quantile(lengths, 25))}, p50 {span(quantile(lengths, 50))}, "
            f"p75 {span(quantile(lengths, 75))}"
        )
        note = _declarations_used(holders, queued[: m.position - 1])
        if note is not None:
            basis = f"{basis}; bounded by {note}"
        out[m.workload] = made(now, basis, (at[0], at[1], at[2]))
    return out


def _by_declarations(
    now: Millis,
    queue: QueueName,
    node: QuotaPath,
    members: list[Waiting],
    holders: list[_Holder],
    queued: list[int | None],
    too_few: str,
) -> dict[WorkloadKey, Estimate]:
    """With too few runs on the log: the latest start the declarations alone give, where they
    make room (a holder that declares no end still ahead, or a workload ahead that declares
    nothing, never frees its slot, as far as anything says); p25, p50 and p75 are that one
    bound, since nothing says how much earlier the declared work ends. Unknown otherwise,
    saying what was missing."""
    starts = starts_in_turn(
        [_end(h, None, 50) for h in holders],
        [NEVER if runtime is None else runtime for runtime in queued],
    )
    out: dict[WorkloadKey, Estimate] = {}
    for m in members:
        note = _declarations_used(holders, queued[: m.position - 1])
        start = starts[m.position - 1]
        if note is None:  # nothing declared: as without declarations at all
            out[m.workload] = made(now, f"{UNKNOWN}{too_few}")
        elif start >= NEVER:
            basis = f"{UNKNOWN}{too_few}, and {note} do not make room"
            out[m.workload] = made(now, basis)
        else:
            at = now + start
            basis = (
                f"at the latest: {m.position - 1} ahead in {queue}, {len(holders)} running "
                f"under {node}; by {note}, which may end earlier; {too_few} for a range"
            )
            out[m.workload] = made(now, basis, (at, at, at))
    return out


def _declarations_used(holders: Sequence[_Holder], ahead: Sequence[int | None]) -> str | None:
    """Which of the running work and the workloads ahead declare a maximum runtime (RT1), for
    the basis; None when none does."""
    running = sum(1 for h in holders if h.left)  # a declared end passed bounds nothing
    queued = sum(1 for runtime in ahead if runtime is not None)
    if running == 0 and queued == 0:
        return None
    return (
        f"the declared maximum runtimes of {running} of {len(holders)} running and "
        f"{queued} of {len(ahead)} ahead"
    )


def span(ms: int) -> str:
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
    "NO_DECLARATIONS",
    "QUANTILES",
    "Declared",
    "Estimate",
    "Waiting",
    "declared_of",
    "describe",
    "estimate_pending",
    "estimate_starts",
    "estimate_with",
    "estimates_on_arrival",
    "made",
    "quantile",
    "remaining",
    "run_lengths",
    "slot_starts",
    "starts_in_turn",
    "waiting_of",
]
