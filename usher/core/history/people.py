"""What Usher says about every job, queue and quota node, folded from the log: the people
projection, pure.

What it does: ``PeopleProjection`` applies log entries in order to a pure-core ``Engine`` (the same
projection every service keeps) and records what the engine does not keep for people: each
workload's kind, zone, requests and creation time, manifests the watcher rejected (with the
field errors), whether a finished job succeeded, how often it was preempted, the tree in force
or the last rejected one, the latest decisions and the allocation intervals usage accounting
sums (U1). ``view(now)`` turns that into typed results
(``JobInfo``, ``QueueInfo``, ``QuotaInfo``, ``DecisionInfo``), with every budget as ``usher
budget`` reports it (B1) and each leaf's fair share as ``usher explain`` shows it (F1). A
pending job's reason is what the next decision pass would say: the pass runs on a copy of the
engine, so the projection itself never decides anything. The client (``usher.client.state``)
reads the log into it; the preemptor keeps one and saves it as the people read model
(``usher.core.history.people_snapshot``).
What it must never do: read a clock or the log, publish anything, or let a decision of its own
(the reason pass) leak into the projection.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import msgspec

from schemas import (
    Admitted,
    Inadmissible,
    Millis,
    Preempted,
    QuotaNode,
    QuotaPath,
    QuotaTreeApplied,
    QuotaTreeDeleted,
    QuotaTreeRejected,
    Reason,
    Released,
    Requeued,
    Retried,
    TopologyPin,
    Unmapped,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    WorkloadRejected,
)
from usher.core.engine import queries as engine_queries
from usher.core.engine.facade import Engine, JobView
from usher.core.history.estimate import Estimate, estimate_pending
from usher.core.history.explain import FairShareView
from usher.core.history.explain import (
    _fair_share as fair_share_of,  # explain's own view of a leaf (F1)
)
from usher.core.history.fold import fold_believed, forged
from usher.core.history.usage import UsageFold
from usher.core.intake.workload import bypassed_queue, suspended_by_usher
from usher.core.model import reasons
from usher.core.model.config import EngineConfig
from usher.core.model.quantity import format_quantity
from usher.core.protocol.log import BadEntry, LogEntry
from usher.core.rules.budgets import (
    BudgetReport,
    BudgetStatus,
    budget_report,
    nearest_stop,
    render_budget_table,
)
from usher.core.rules.holds import hold_over
from usher.core.state.indexed import JobState
from usher.core.tree.budget_spec import BudgetKey
from usher.core.tree.quota_tree import iter_nodes, leaf_queue_name

FEED_SUSPENDED = "suspend"
"""The feed's label of a job the watcher found running unadmitted and suspended and queued
(``usher.core.intake.workload.bypassed_queue``): not a rejection."""
MAX_DECISIONS = 200


# --------------------------------------------------------------------------- results


class JobInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One job as Usher sees it now."""

    job: str
    """``namespace/name``."""
    namespace: str
    name: str
    state: JobState
    """One of the engine's states, or ``Rejected``."""
    queue: str | None = None
    quota: str | None = None
    """Leaf path, e.g. ``root/Department-a``."""
    zone: str | None = None
    position: int | None = None
    """1-based place in its queue while pending."""
    priority: int = 0
    reason: str | None = None
    reason_code: str | None = None
    succeeded: bool | None = None
    """For a finished job: whether it succeeded."""
    preemptions: int = 0
    kind: str | None = None
    requests: dict[str, str] = msgspec.field(default_factory=dict)
    """Total over all pods, in Kubernetes notation."""
    created: datetime | None = None
    estimate: Estimate | None = None
    """While pending: when it likely starts, with a range, or why that is unknown."""
    topology: TopologyPin | None = None
    """While admitted: the domain all its pods are pinned to (TP1); None: anywhere."""

    @property
    def done(self) -> bool:
        """Finished, or never going to run as it is (rejected or inadmissible)."""
        return self.state in (JobState.FINISHED, JobState.REJECTED, JobState.INADMISSIBLE)


class QueuedJob(msgspec.Struct, frozen=True, kw_only=True):
    job: str
    position: int
    priority: int
    reason: str | None = None
    reason_code: str | None = None


class QueueInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One queue (one per leaf of the quota tree) with its pending jobs in order."""

    name: str
    quota: str
    policy: str
    namespaces: list[str]
    pending: list[QueuedJob]
    admitted: list[str]
    hold: str | None = None
    """Held or drained (R14/R15): the node, who, when and why; None when it admits."""
    budget: str | None = None
    """A spent budget on its path (B1): its action and the numbers; None when none is."""
    fair_share: FairShareView | None = None
    """Its leaf's decayed usage, weight and key as ``usher explain`` shows them, when fair
    share is on (F1); else None."""

    def fair_words(self) -> str | None:
        """``fair share: decayed usage 12.5 CPU-hours (half-life 3600s), weight 2, key 0.06
        root-hours`` (explain's words, F1), or None with fair share off."""
        f = self.fair_share
        if f is None:
            return None
        usage = ", ".join(f.decayed_usage.values()) or "none"
        return (
            f"fair share: decayed usage {usage} (half-life {f.half_life_s:g}s), "
            f"weight {f.weight}, key {f.key}"
        )


class QuotaInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One node of the quota tree: used / min / max per resource, in Kubernetes notation."""

    path: str
    depth: int
    leaf: bool
    queue: str | None
    namespaces: list[str]
    used: dict[str, str]
    min: dict[str, str]
    max: dict[str, str]
    used_units: dict[str, int]
    min_units: dict[str, int]
    max_units: dict[str, int]
    hold: str | None = None
    """Held or drained here or above (R14/R15): the node, who, when and why."""


class DecisionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One decision from the log, for people."""

    seq: int
    time: datetime
    action: str
    """``admit``, ``preempt``, ``requeue`` (R10), ``release``, ``inadmissible``, ``unmapped``,
    ``suspend`` (a job found running unadmitted, suspended and queued) or ``reject``."""
    job: str
    quota: str | None = None
    reason: str | None = None
    preemptor: str | None = None


class TreeDeletion(msgspec.Struct, frozen=True, kw_only=True):
    """The ElasticQuotaTree object was deleted after the tree in force was applied."""

    tree: str
    """``namespace/name``; empty when the watcher found it gone after a restart."""
    at: datetime
    """When the watcher saw it gone."""

    def describe(self) -> str:
        """One line for people: what happened and what it means."""
        stamp = self.at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        return (
            f"ElasticQuotaTree {self.tree or '(name unknown)'} deleted at {stamp}: the last tree "
            "stays in force and admissions go on under it; apply a tree to change it"
        )


class SkippedHead(msgspec.Struct, frozen=True, kw_only=True):
    """A job at the head of its queue that later jobs were admitted past (Round skips a job
    that does not fit; a large one can wait there long)."""

    job: str
    queue: str
    requests: dict[str, str]
    """Total over all pods, in Kubernetes notation."""
    skipped: int
    """Jobs of its queue admitted past it while it was at the head."""
    waited_s: float
    """Seconds since it was first passed over at the head."""

    def describe(self) -> str:
        size = ", ".join(f"{v} {k}" for k, v in self.requests.items())
        return (
            f"{self.job} ({size}) has waited {_duration(self.waited_s)} at the head of "
            f"{self.queue}: {self.skipped} later job{'s' if self.skipped != 1 else ''} "
            "admitted past it (Round skips a job that does not fit)"
        )


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class TreeRejection(msgspec.Struct, frozen=True, kw_only=True):
    """The last ElasticQuotaTree applied was invalid (after the tree in force, if any)."""

    tree: str
    """``namespace/name``; empty for log entries written before the name was recorded."""
    at: datetime
    errors: list[str]
    """``path: message [code]`` of every problem."""
    kept: bool
    """Whether a previous tree stays in force (else none is)."""

    def describe(self) -> str:
        """One line for people: which tree, when, why, and what is in force instead."""
        stamp = self.at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        instead = "the previous tree stays in force" if self.kept else "no tree is in force"
        return (
            f"ElasticQuotaTree {self.tree or '(name unknown)'} rejected at {stamp} ({instead}): "
            + "; ".join(self.errors)
        )


class StateView(msgspec.Struct, frozen=True, kw_only=True):
    """Everything at one log sequence."""

    seq: int
    jobs: list[JobInfo]
    queues: list[QueueInfo]
    quota: list[QuotaInfo]
    decisions: list[DecisionInfo]
    tree_rejected: list[str] = msgspec.field(default_factory=list)
    """Field errors of the last rejected tree, if it came after the one in force."""
    tree_deleted: TreeDeletion | None = None
    """Set when the tree object was deleted after the tree in force was applied."""
    tree_rejection: TreeRejection | None = None
    """Set when the last tree applied was rejected (``tree_rejected`` are its errors)."""
    policy: str = "Round"
    skipped_heads: list[SkippedHead] = msgspec.field(default_factory=list)
    """Heads of queues passed over for at least ``LONG_AT_HEAD_S`` (``track_skips`` only)."""
    budgets: BudgetReport | None = None
    """Every budget of the tree in force at the view's ``now`` (B1), as ``usher budget``
    reports it; None when no node carries one."""

    def budget_lines(self) -> list[tuple[str, bool]]:
        """``usher budget``'s table, line by line (its one formatting place), each with
        whether the line is a spent budget's; empty when no node carries a budget."""
        if self.budgets is None:
            return []
        header, *rows = render_budget_table(self.budgets).rstrip("\n").split("\n")
        return [(header, False)] + [
            (line, row.exhausted) for line, row in zip(rows, self.budgets.rows, strict=True)
        ]

    def tree_notes(self) -> list[str]:
        """What people must know about the tree beyond the tree in force (one line each)."""
        events = (self.tree_rejection, self.tree_deleted)
        return [event.describe() for event in events if event is not None]


class PendingView(msgspec.Struct, frozen=True, kw_only=True):
    """What one trial pass says of every pending job: why it waits, when it likely starts."""

    reasons: dict[WorkloadKey, Reason]
    estimates: dict[WorkloadKey, Estimate]


# --------------------------------------------------------------------------- the fold

LONG_AT_HEAD_S = 60.0
"""How long a passed-over head of a queue waits before the live view names it."""


@dataclass
class _Skips:
    first_ms: int
    count: int = 0


def _budget(found: Mapping[BudgetKey, BudgetStatus], leaf: str, now: Millis) -> str | None:
    """``hold: 503.2 of 500 GPU-hours ...`` for the spent budget governing ``leaf`` (B1)."""
    status = nearest_stop(found, QuotaPath(leaf)) if found else None
    if status is None:
        return None
    return f"{status.budget.action.value}: {status.pending_reason(now).message}"


def _total(observed: WorkloadObserved) -> dict[str, int]:
    """What all the pods of a workload request together, in canonical units."""
    totals: dict[str, int] = {}
    for pod_set in observed.pod_sets:
        for resource, amount in pod_set.requests.items():
            totals[resource] = totals.get(resource, 0) + amount * pod_set.count
    return totals


def _quantities(amounts: dict[str, int]) -> dict[str, str]:
    return {r: format_quantity(r, a) for r, a in sorted(amounts.items())}


def _reason_text(reason: Reason | None) -> tuple[str | None, str | None]:
    if reason is None:
        return None, None
    return reason.message, reason.code


@dataclass
class PeopleProjection:
    """The projection of the log for people: the engine plus what it does not keep (kinds,
    outcomes, rejections, decisions); see the module docstring."""

    config: EngineConfig = field(default_factory=EngineConfig)
    engine: Engine = field(init=False)
    applied_seq: int = 0
    observed: dict[WorkloadKey, WorkloadObserved] = field(default_factory=dict)
    rejected: dict[WorkloadKey, WorkloadRejected] = field(default_factory=dict)
    outcome: dict[WorkloadKey, bool] = field(default_factory=dict)
    preemptions: dict[WorkloadKey, int] = field(default_factory=dict)
    decisions: deque[DecisionInfo] = field(default_factory=lambda: deque(maxlen=MAX_DECISIONS))
    tree: QuotaNode | None = None
    tree_rejected: list[str] = field(default_factory=list)
    tree_rejection: TreeRejection | None = None
    tree_deleted: TreeDeletion | None = None
    unreadable: int = 0
    """Entries that did not decode or that the core refused (skipped, as services park them)."""
    forged: int = 0
    """Decisions not made by their owner (``usher.core.history.fold``): skipped, as services do."""
    track_skips: bool = False
    """Count admissions past the head of each queue (the live view); off for one-off reads."""
    skips: dict[WorkloadKey, _Skips] = field(default_factory=dict)
    suspending: dict[WorkloadKey, tuple[int, Millis]] = field(default_factory=dict)
    """Jobs the watcher suspended before it first observed them (created unsuspended): the seq
    and time of that decision, whose story gains how long the pods ran once the creation
    time is known."""
    usage: UsageFold = field(default_factory=UsageFold)
    """Every allocation interval the log records (U1), for ``usher usage`` and the client."""
    last_believed: tuple[int, int] | None = None
    """Sequence and time (ms) of the last entry its owner made (``usher explain``'s "as of")."""

    def __post_init__(self) -> None:
        self.engine = Engine(self.config)

    def apply(self, item: LogEntry | BadEntry) -> None:
        """Fold one log entry in (entries at or below ``applied_seq`` are ignored)."""
        if item.seq <= self.applied_seq:
            return
        self.applied_seq = item.seq
        if isinstance(item, BadEntry):
            self.unreadable += 1
            return
        event = item.envelope.event
        if forged(item) is not None:
            self.forged += 1  # not its owner's: the services park it, nobody believes it
            return
        self.last_believed = (item.seq, item.time_ms)
        if self.track_skips and isinstance(event, Admitted):
            self._note_skip(event.workload, item.time_ms)
        # Every entry its owner made opens or closes an interval, folded or not: the rule of
        # ``usage.intervals_of``, which explain, the audit and ``usher usage --file`` use.
        self.usage.apply(event, item.time_ms)
        if not fold_believed(self.engine, item).folded:
            self.unreadable += 1  # the core refused it; services park such entries, go on
            return
        self._record(item, event)

    def _note_skip(self, admitted: WorkloadKey, at_ms: int) -> None:
        """``admitted`` is about to leave its queue: if it was not first, the head was passed."""
        view = self.engine.job_state(admitted)
        if (
            view is None
            or view.state != JobState.PENDING
            or view.queue is None
            or (view.position or 1) <= 1
        ):
            return
        entries = self.engine.queues().get(view.queue)
        if not entries:
            return
        skips = self.skips.setdefault(entries[0].job, _Skips(first_ms=at_ms))
        skips.count += 1

    def _skipped_heads(self, queues: list[QueueInfo], now: Millis) -> list[SkippedHead]:
        out: list[SkippedHead] = []
        for queue in queues:
            head = queue.pending[0].job if queue.pending else None
            skips = self.skips.get(WorkloadKey(head)) if head else None
            if head is None or skips is None or now - skips.first_ms < LONG_AT_HEAD_S * 1000:
                continue
            observed = self.observed.get(WorkloadKey(head))
            requests = _quantities(_total(observed)) if observed is not None else {}
            waited = (now - skips.first_ms) / 1000
            out.append(
                SkippedHead(
                    job=head,
                    queue=queue.name,
                    requests=requests,
                    skipped=skips.count,
                    waited_s=waited,
                )
            )
        return out

    def _record(self, item: LogEntry, event: object) -> None:
        at = item.envelope.time
        if isinstance(event, Admitted | WorkloadDeleted | WorkloadFinished):
            self.skips.pop(event.workload, None)  # no longer waiting: nothing to tell
        match event:
            case WorkloadObserved():
                self._created(event)
                self.observed[event.workload] = event
                self.rejected.pop(event.workload, None)
                self.outcome.pop(event.workload, None)
            case WorkloadRejected() if bypassed_queue(event.errors):
                # Not a rejection: the watcher suspended a job that ran unadmitted and queued
                # it; told as explain tells it (one story, ``suspended_by_usher``).
                self.rejected[event.workload] = event
                previous = self.observed.get(event.workload)
                story = suspended_by_usher(item.time_ms, previous, None)
                self._decision(item.seq, at, FEED_SUSPENDED, event.workload, reason=story)
                if previous is None:
                    self.suspending[event.workload] = (item.seq, item.time_ms)
            case WorkloadRejected():
                self.rejected[event.workload] = event
                text = "; ".join(f"{e.path}: {e.message}" for e in event.errors)
                self._decision(item.seq, at, "reject", event.workload, reason=text)
            case WorkloadFinished():
                self.outcome[event.workload] = event.succeeded
            case WorkloadDeleted():
                for table in (self.observed, self.rejected, self.outcome, self.preemptions):
                    table.pop(event.workload, None)
                self.suspending.pop(event.workload, None)
            case QuotaTreeApplied():
                self.tree = event.root
                self.tree_rejected = []
                self.tree_rejection = None
                self.tree_deleted = None
            case QuotaTreeDeleted() if self.tree is not None:
                name = f"{event.namespace}/{event.name}" if event.name else ""
                self.tree_deleted = TreeDeletion(tree=name, at=at)
            case QuotaTreeRejected():
                self.tree_rejected = [f"{e.path}: {e.message} [{e.code}]" for e in event.errors]
                name = f"{event.namespace}/{event.name}" if event.name else ""
                self.tree_rejection = TreeRejection(
                    tree=name, at=at, errors=self.tree_rejected, kept=self.tree is not None
                )
            case Admitted():
                # Its reason, when it has one, says why (a fallback zone, Z2/Z3; a partial
                # admission, R11).
                reason = event.reason.message if event.reason is not None else None
                self._decision(
                    item.seq, at, "admit", event.workload, quota=event.quota, reason=reason
                )
            case Preempted():
                self.preemptions[event.workload] = self.preemptions.get(event.workload, 0) + 1
                self._decision(
                    item.seq,
                    at,
                    "preempt",
                    event.workload,
                    quota=event.quota,
                    reason=event.reason.message,
                    preemptor=event.preemptor,
                )
            case Requeued():
                self._decision(
                    item.seq,
                    at,
                    "requeue",
                    event.workload,
                    quota=event.quota,
                    reason=f"{event.reason.code}: {event.reason.message}",
                )
            case Retried():
                # A failed attempt and what follows it (R12): the next attempt, or why none.
                self._decision(
                    item.seq,
                    at,
                    "retry",
                    event.workload,
                    quota=event.quota,
                    reason=f"{event.reason.code}: {event.reason.message}",
                )
            case Released():
                self._decision(
                    item.seq, at, "release", event.workload, quota=event.quota, reason=event.cause
                )
            case Inadmissible():
                self._decision(
                    item.seq,
                    at,
                    "inadmissible",
                    event.workload,
                    quota=event.quota,
                    reason=event.reason.message,
                )
            case Unmapped():
                self._decision(
                    item.seq, at, "unmapped", event.workload, reason=event.reason.message
                )

    def _created(self, event: WorkloadObserved) -> None:
        """The first observation of a job suspended before it: its feed line says how long
        its pods could run, now that its creation time is known."""
        found = self.suspending.pop(event.workload, None)
        if found is None:
            return
        seq, at_ms = found
        for index, decision in enumerate(self.decisions):
            if decision.seq == seq:
                story = suspended_by_usher(at_ms, None, event.created_ms)
                self.decisions[index] = msgspec.structs.replace(decision, reason=story)

    def _decision(
        self,
        seq: int,
        at: datetime,
        action: str,
        job: str,
        *,
        quota: str | None = None,
        reason: str | None = None,
        preemptor: str | None = None,
    ) -> None:
        self.decisions.append(
            DecisionInfo(
                seq=seq,
                time=at,
                action=action,
                job=job,
                quota=quota,
                reason=reason,
                preemptor=preemptor,
            )
        )

    # ------------------------------------------------------------------ views

    def pending_reasons(self, now: Millis) -> dict[WorkloadKey, Reason]:
        """Why each pending job waits: what a decision pass now would say (a preview: the
        engine decides nothing)."""
        return self.pending(now, self.engine.jobs()).reasons

    def pending(self, now: Millis, views: dict[WorkloadKey, JobView]) -> PendingView:
        """Why each pending job of ``views`` (the engine's) waits and when it likely starts,
        from one trial pass at ``now``."""
        waiting = [k for k, v in views.items() if v.state == JobState.PENDING]
        if not waiting:
            return PendingView(reasons={}, estimates={})
        preview = self.engine.preview_pass(now)
        out: dict[WorkloadKey, Reason] = {}
        for key in waiting:
            after = preview.waiting.get(key)
            if after is not None and after.state == JobState.PENDING and after.reason is not None:
                out[key] = after.reason
            else:
                out[key] = reasons.not_yet_evaluated("fits now; the next decision pass admits it")
        estimates = estimate_pending(self.engine, now, views, preview, self.usage.intervals())
        return PendingView(reasons=out, estimates=estimates)

    def job(
        self,
        key: str,
        views: dict[WorkloadKey, JobView] | None = None,
        why: dict[WorkloadKey, Reason] | None = None,
        estimates: dict[WorkloadKey, Estimate] | None = None,
    ) -> JobInfo | None:
        """One job by ``namespace/name`` (None when Usher has never seen it, or it is gone)."""
        wkey = WorkloadKey(key)
        if wkey in self.rejected:
            rejected = self.rejected[wkey]
            namespace, _, name = key.partition("/")
            rejection = reasons.rejected(rejected.errors)
            return JobInfo(
                job=key,
                namespace=namespace,
                name=name,
                state=JobState.REJECTED,
                reason=rejection.message,
                reason_code=rejection.code,
                kind=rejected.kind or None,
            )
        view = views.get(wkey) if views is not None else self.engine.job_state(wkey)
        if view is None:
            return None
        observed = self.observed.get(wkey)
        reason = view.reason
        if view.state == JobState.PENDING and why is not None and wkey in why:
            reason = why[wkey]
        message, code = _reason_text(reason)
        namespace, _, name = key.partition("/")
        totals = _total(observed) if observed is not None else {}
        created = None
        if observed is not None:
            created = datetime.fromtimestamp(observed.created_ms / 1000, tz=UTC)
        return JobInfo(
            job=key,
            namespace=namespace,
            name=name,
            state=view.state,
            queue=view.queue,
            quota=view.quota,
            zone=self.engine.zone_of(wkey) or (observed.zone if observed else None),
            position=view.position,
            priority=view.priority,
            reason=message,
            reason_code=code,
            succeeded=self.outcome.get(wkey) if view.state == JobState.FINISHED else None,
            preemptions=self.preemptions.get(wkey, 0),
            kind=observed.kind if observed else None,
            requests=_quantities(totals),
            created=created,
            estimate=(estimates or {}).get(wkey) if view.state == JobState.PENDING else None,
            topology=engine_queries.topology_pin(self.engine, wkey),
        )

    def view(self, now: Millis, *, reasons_too: bool = True) -> StateView:
        """Jobs, queues, quota and recent decisions as of ``applied_seq``."""
        views = self.engine.jobs()
        pending = self.pending(now, views) if reasons_too else None
        why = pending.reasons if pending is not None else {}
        estimates = pending.estimates if pending is not None else {}
        jobs = [info for key in views if (info := self.job(key, views, why, estimates)) is not None]
        jobs.extend(
            info
            for key in sorted(self.rejected)
            if key not in views and (info := self.job(key)) is not None
        )
        jobs.sort(key=lambda j: j.job)
        queues = self._queues(views, why, now)
        spent = self.engine.budget_statuses(now)
        return StateView(
            seq=self.applied_seq,
            jobs=jobs,
            queues=queues,
            quota=self._quota(),
            decisions=list(self.decisions),
            tree_rejected=list(self.tree_rejected),
            tree_deleted=self.tree_deleted,
            tree_rejection=self.tree_rejection,
            policy=self.config.policy,
            skipped_heads=self._skipped_heads(queues, now),
            budgets=budget_report(spent, now) if spent else None,
        )

    def _queues(
        self, views: dict[WorkloadKey, JobView], why: dict[WorkloadKey, Reason], now: Millis
    ) -> list[QueueInfo]:
        if self.tree is None:
            return []
        entries = self.engine.queues()
        spent = self.engine.budget_statuses(now)
        admitted: dict[str, list[str]] = {}
        for key, view in views.items():
            if view.state == JobState.ADMITTED and view.queue is not None:
                admitted.setdefault(view.queue, []).append(key)
        out: list[QueueInfo] = []
        for path, node, _ in iter_nodes(self.tree):
            if node.children:
                continue
            name = leaf_queue_name(path, node)
            pending = []
            for entry in entries.get(name, []):
                message, code = _reason_text(why.get(entry.job) or self.engine.reason(entry.job))
                pending.append(
                    QueuedJob(
                        job=entry.job,
                        position=entry.position,
                        priority=entry.priority,
                        reason=message,
                        reason_code=code,
                    )
                )
            out.append(
                QueueInfo(
                    name=name,
                    quota=path,
                    policy=self.config.policy,
                    namespaces=list(node.namespaces),
                    pending=pending,
                    admitted=sorted(admitted.get(name, [])),
                    hold=self._hold(path),
                    budget=_budget(spent, path, now),
                    fair_share=fair_share_of(self.engine, QuotaPath(path)),
                )
            )
        return out

    def _hold(self, path: str) -> str | None:
        record = hold_over(self.engine.holds_in_force(), QuotaPath(path))
        return None if record is None else record.pending_reason().message

    def _quota(self) -> list[QuotaInfo]:
        if self.tree is None:
            return []
        used = self.engine.quota_used()
        out: list[QuotaInfo] = []
        for path, node, _ in iter_nodes(self.tree):
            amounts = used.get(path, {})
            out.append(
                QuotaInfo(
                    path=path,
                    depth=path.count("/"),
                    leaf=not node.children,
                    queue=leaf_queue_name(path, node) if not node.children else None,
                    namespaces=list(node.namespaces),
                    used=_quantities(amounts),
                    min=_quantities(dict(node.min)),
                    max=_quantities(dict(node.max)),
                    used_units=dict(amounts),
                    min_units=dict(node.min),
                    max_units=dict(node.max),
                    hold=self._hold(path),
                )
            )
        return out
