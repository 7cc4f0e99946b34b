"""What the watcher reads about waiting jobs off its fold of the log, and tells.

What it does: ``WaitWatch.run`` starts once the log is replayed and asks the projection's
engine (the one fold of the log every reader uses) two things about the pending workloads:

- Which ones wait because a budget on their path is spent (B1): the first admission gate that
  shuts them, ``Engine.refusal_of``, is the budget gate, as of the latest entry on the log
  (``budget_waits``, every ``status_interval_s``). Each wait -- the job's incarnation (uid), the
  budget and its window's start -- is told once: a ``BudgetExhausted`` Warning Event on the job
  (``services.watcher.notify``, as a ``Pending`` decision with the budget's reason) and, with
  ``USHER_NOTIFY_URL``, its CloudEvent. The waits the log already shows when the replay ends
  were told by the watcher that ran before (a restart sends nothing again); what the log shows
  after it is told once every job kind is listed (``may_tell``). The Event's name is
  the wait's, so a second watcher (a rolling upgrade) gets AlreadyExists and sends no
  CloudEvent either.
- Per queue, how many have waited past the upper bound (``late_ms``) of the first estimate
  this watcher could give them (E1: ``usher.core.history.estimate.estimate_pending`` on a trial
  pass, what ``usher jobs --start`` and ``usher explain`` show): the gauge
  ``usher_queue_pending_past_estimate_workloads`` (every ``estimate_interval_s``). An estimate
  is worked out again at every look and never lies in the past, so the first known one is the
  promise kept; an unknown one (too few runs, a gate no run's end opens) promises nothing.

What it must never do: decide or publish anything, compute a budget or an estimate itself (the
core does), hold up the carrying out of decisions (Events are best effort, recorded beside it),
or tell one wait twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from schemas import Millis, Pending, QueueName, WorkloadKey, object_name
from services.common.metrics import Metrics
from services.common.pacing import period_after
from services.common.runtime import ServiceContext, wait_or_stop, wall_ms
from services.watcher.deliveries import WebhookDeliveries
from services.watcher.kinds import EVENTS
from services.watcher.notify import cloud_event, decision_event
from services.watcher.observe import ClusterView
from services.watcher.options import WatcherOptions
from services.watcher.projection import WatcherProjection
from usher.adapters.kube import AlreadyExists, KubeClient, KubeError
from usher.core.engine.facade import Engine
from usher.core.gates import budget
from usher.core.history.estimate import estimate_pending
from usher.core.tree.budget_spec import BudgetKey

RECORDING = 16
"""Events being recorded at once at most (a queue held by a budget may hold thousands)."""

WaitKey = tuple[WorkloadKey, str, BudgetKey, int]
"""One wait for a spent budget: the workload, its uid, the budget and its window's start (ms)."""


@dataclass(frozen=True)
class BudgetWait:
    """A pending workload the budget gate (B1) shuts, as the fold of the log says now."""

    key: WaitKey
    decision: Pending
    """What is told: its queue, place and the budget's reason (``BudgetExhausted``)."""

    @property
    def event_name(self) -> str:
        """The Event's name: the job's, and a digest of the wait (one Event per wait)."""
        workload, uid, (node, resource, days), start = self.key
        digest = hashlib.blake2b(
            f"{uid}|{node}|{resource}|{days}|{start}".encode(), digest_size=5
        ).hexdigest()
        return f"{workload.partition('/')[2]}.budget-{digest}"


def budget_waits(engine: Engine, uids: dict[WorkloadKey, str]) -> list[BudgetWait]:
    """Every pending workload the budget gate shuts first (``Engine.refusal_of``), in queue
    order; ``uids``: each workload's uid (its incarnation), as the log said it."""
    found: list[BudgetWait] = []
    engine.refresh_budgets()  # which leaves a spent budget stops, as of the latest entry
    if not any(status.exhausted for status in engine.budget_statuses().values()):
        return found  # no budget spent (or none at all): no job to look at
    for queue, entries in sorted(engine.queues().items()):
        for entry in entries:
            view = engine.job_state(entry.job)
            if view is None or view.quota is None:
                continue
            status = engine.spent_budget_over(view.quota)
            if status is None:
                continue  # no spent budget over its leaf: nothing to ask (the common case)
            refusal = engine.refusal_of(entry.job)
            if refusal is None or refusal.gate != budget.GATE.name:
                continue
            decision = Pending(
                workload=entry.job,
                queue=queue,
                quota=view.quota,
                position=entry.position,
                reason=refusal.reason,
            )
            key = (entry.job, uids.get(entry.job, ""), status.budget.key, status.window.start_ms)
            found.append(BudgetWait(key=key, decision=decision))
    return found


ESTIMATE_SHARE: Final = 0.02
"""At most this share of the watcher's time goes to estimating: the estimate runs on its event
loop (it reads the engine the fold writes), and a large backlog makes one cost more."""


def estimate_period(interval_s: float, took_s: float) -> float:
    """Seconds until the next estimate: ``interval_s``, or longer when the last one took
    ``took_s`` (a backlog of 15,000 pending takes about 0.5 s: the next comes 25 s later)."""
    return period_after(interval_s, took_s, ESTIMATE_SHARE)


def past_estimate(
    first_late: dict[WorkloadKey, tuple[QueueName, int]], now: Millis
) -> dict[QueueName, int]:
    """Per queue, how many of ``first_late`` (workload -> its queue and the upper bound of
    its first known estimate) are still waiting at ``now`` past that bound."""
    counts: dict[QueueName, int] = {}
    for queue, late in first_late.values():
        counts[queue] = counts.get(queue, 0) + (1 if now > late else 0)
    return counts


class WaitWatch:
    """The watcher's task that tells budget waits and counts jobs past their estimate."""

    def __init__(
        self,
        ctx: ServiceContext,
        kube: KubeClient,
        view: WatcherProjection,
        cluster: ClusterView,
        options: WatcherOptions,
        deliveries: WebhookDeliveries | None = None,
    ) -> None:
        self.ctx = ctx
        self.kube = kube
        self.view = view
        self.cluster = cluster
        self.options = options
        self.deliveries = deliveries
        self.metrics: Metrics = ctx.metrics
        self.told: set[WaitKey] = set()
        """The waits told (or standing when the replay ended), of workloads still known."""
        self.first_late: dict[WorkloadKey, tuple[QueueName, int]] = {}
        """Each pending workload's queue and the upper bound of its first known estimate."""
        self._queues: set[QueueName] = set()
        self._telling: set[asyncio.Task[None]] = set()
        self._recording = asyncio.Semaphore(RECORDING)
        self._estimated_at = 0.0
        self._estimate_every_s = options.estimate_interval_s
        """The period of the estimates: the option's, longer when one costs much (see
        ``estimate_period``)."""
        self._looked_at = -1
        self.may_tell = asyncio.Event()
        """Set by the watcher once every job kind is listed."""

    async def run(self) -> None:
        """Look every ``status_interval_s`` until the service stops: first when the replay
        ends (what stands then was told before a restart), then, once ``may_tell`` is set
        (every job kind listed: each job's object is known), telling what is new."""
        await self.view.synced.wait()
        self.look(tell=False)
        loop = asyncio.get_running_loop()
        try:
            while not await wait_or_stop(self.ctx.stop, self.ctx.settings.status_interval_s):
                if not self.may_tell.is_set():
                    continue
                with self._logged("budget waits not looked at"):
                    self.look(tell=True)
                if loop.time() - self._estimated_at >= self._estimate_every_s:
                    self._estimated_at = loop.time()
                    with self._logged("pending workloads not estimated"):
                        self.count_past_estimate(Millis(wall_ms()))
                    self._estimate_every_s = estimate_period(
                        self.options.estimate_interval_s, loop.time() - self._estimated_at
                    )
        finally:
            for task in self._telling:
                task.cancel()

    @contextlib.contextmanager
    def _logged(self, what: str) -> Iterator[None]:
        """A failure of one look is logged, and the next look tries again: telling and
        counting never take the watcher down."""
        try:
            yield
        except Exception as exc:
            self.ctx.log.warning(what, error=type(exc).__name__, detail=str(exc)[:200])

    def look(self, *, tell: bool) -> list[BudgetWait]:
        """The budget waits not told yet (told now when ``tell``; else only remembered). The
        answer moves only with the log (budgets are as of its latest entry): a look at the same
        place finds nothing new."""
        if self.view.projection.applied_seq == self._looked_at:
            return []
        self._looked_at = self.view.projection.applied_seq
        engine = self.view.projection.engine
        uids = {key: said.uid for key, said in self.view.workloads.items()}
        new = [wait for wait in budget_waits(engine, uids) if wait.key not in self.told]
        for wait in new:
            self.told.add(wait.key)
            if tell:
                self._tell(wait)
        # Bounded by what exists: a deleted job (or a new incarnation) forgets its waits.
        self.told = {key for key in self.told if uids.get(key[0]) == key[1]}
        return new

    def _tell(self, wait: BudgetWait) -> None:
        task = asyncio.create_task(self._record(wait))
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)

    async def _record(self, wait: BudgetWait) -> None:
        async with self._recording:
            await self._record_one(wait)

    async def _record_one(self, wait: BudgetWait) -> None:
        workload = wait.decision.workload
        resource = self.cluster.workloads.get(workload)
        if resource is None:
            return
        namespace, name = object_name(workload)
        try:
            obj = await self.kube.get(resource, namespace, name)
        except KubeError:
            return  # gone meanwhile, or the API is away: a best-effort Event is not retried
        event = decision_event(wait.decision, obj, datetime.now(UTC), wait.event_name)
        try:
            await self.kube.create(EVENTS, namespace, event)
        except AlreadyExists:
            return  # told by another watcher: nothing to send again
        except KubeError as exc:
            self.ctx.log.warning(
                "event not recorded", workload=workload, error=type(exc).__name__,
                detail=exc.message,
            )  # fmt: skip
        self.ctx.log.info("budget wait told", workload=workload, event_name=wait.event_name)
        if self.deliveries is not None:
            event_id = f"{self.ctx.subjects.prefix}-{wait.event_name}"
            self.deliveries.offer(cloud_event(event, wait.decision, event_id))

    def count_past_estimate(self, now: Millis) -> dict[QueueName, int]:
        """Estimate the pending workloads on a trial pass (nothing is decided), keep each one's
        first known upper bound, and set the gauge per queue."""
        engine = self.view.projection.engine
        queues = {queue for queue, (pending, _) in engine.queue_counts().items() if pending}
        if not queues:
            self.first_late.clear()
            self._set_gauges(queues, {})
            return {}
        views = engine.jobs()
        preview = engine.preview_pass(now)
        intervals = self.view.usage.intervals()
        estimates = estimate_pending(engine, now, views, preview, intervals)
        for key, estimate in estimates.items():
            view = views[key]
            if key not in self.first_late and estimate.late_ms is not None and view.queue:
                self.first_late[key] = (view.queue, estimate.late_ms)
        self.first_late = {k: v for k, v in self.first_late.items() if k in estimates}
        counts = past_estimate(self.first_late, now)
        self._set_gauges(queues, counts)
        return counts

    def _set_gauges(self, queues: set[QueueName], counts: dict[QueueName, int]) -> None:
        """One series per queue with pending work; the series of the others are removed."""
        for queue in queues:
            self.metrics.pending_past_estimate.labels(queue).set(counts.get(queue, 0))
        for gone in self._queues - queues:
            with contextlib.suppress(KeyError):
                self.metrics.pending_past_estimate.remove(gone)
        self._queues = queues
