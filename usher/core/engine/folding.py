"""Folding events into state: workloads observed, finished, deleted, and decisions applied.

What it does: folds each cluster event and each decision made elsewhere (admitted, preempted,
released, requeued, retried) into the state and its indexes; installs a new quota tree;
reverts a refused admission or preemption.
What it must never do: run a pass or read a clock (time comes in as ``now``).
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections.abc import Sequence

from schemas import (
    Admitted,
    ClusterConnected,
    ClusterDisconnected,
    ClusterLost,
    Decision,
    Millis,
    Preempted,
    QueueName,
    QuotaPath,
    QuotaTreeApplied,
    Reason,
    ReleaseCause,
    Released,
    Requeued,
    Retried,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    WorkloadProgress,
    Zone,
)
from usher.core.engine.offers import Offers
from usher.core.gates import admission
from usher.core.intake.workload import observed_errors
from usher.core.kinds.frozen import grew
from usher.core.model import reasons
from usher.core.rules import clusters, holds, readiness, retry
from usher.core.rules.retry import RetryLink, RetryPolicy
from usher.core.state.indexed import (
    ADMITTED,
    FINISHED,
    INADMISSIBLE,
    PENDING,
    UNMAPPED,
    Job,
    Placement,
    Queue,
    Shape,
    TreeIndex,
    shape_of,
    shape_with,
    total_requests,
)
from usher.core.tree.quota_tree import validate_tree


class Folding(Offers):
    """Folding events into state: workloads observed, finished, deleted, and decisions applied."""

    def fold_observed(self, event: WorkloadObserved) -> None:
        if observed_errors(event):
            return  # forged: no manifest gives such values (the watcher refuses them)
        job = self.state.jobs.get(event.workload)
        if job is None:
            job = Job(event.workload, self.intern_name(event.namespace), event.name)
            job.arrived_pass = self.state.passes
            if event.admission_gates:  # as created (G1)
                self.state.gated[job.key] = tuple(event.admission_gates)
            self.state.jobs[job.key] = job
            self._fill(job, event)
            self.classify(job)
            return
        if job.state == PENDING or job.state in (UNMAPPED, INADMISSIBLE):
            # Re-observation of a waiting workload: take it out, update, put it back at the
            # place its (possibly new) priority gives it.
            self.unplace(job)
            self._fill(job, event)
            self.classify(job)
        else:
            # Admitted or finished: its usage stays as recorded; only metadata follows. An
            # admitted one keeps the size it was admitted with, which is what counts (R16).
            if job.state == ADMITTED and job.used_path is not None:
                self.forget_admitted(job)
                old_zone = job.zone
                # Sized only if never observed before (admitted from the log first).
                self._fill(job, event, sized=job.pod_count == 0)
                self._note_growth(job, event)
                if old_zone in job.zones:
                    job.zone = old_zone  # admitted into an accepted zone: it runs there (Z2)
                if job.zone != old_zone:
                    # Its pods run where they were admitted; usage follows the zone label so
                    # that the release later subtracts from the zone it was added to.
                    self.move_zone_usage(job.used_shape, old_zone, job.zone)
                    self.account_zone_quota(job.used_path, job.used_shape, old_zone, -1)
                    self.account_zone_quota(job.used_path, job.used_shape, job.zone)
                job.refresh_victim_key()
                insort(self.leaf_admitted.setdefault(job.used_path, []), job.victim_key)
            else:
                self._fill(job, event)

    def _note_growth(self, job: Job, event: WorkloadObserved) -> None:
        """An admitted job seen running while asking more than its admission counts: the
        next pass of its zone stops it (R16). Asking as much or less changes nothing (its
        admission keeps counting what it was admitted with); a suspended one is not running
        (or not yet unsuspended by its admission: a partial one's count is patched then)."""
        counted = dict(job.used_shape)
        observed = total_requests(event)
        grown = [] if event.suspended else grew(counted, observed)
        if grown:
            job.grown = reasons.grew_after_admission(grown, counted, observed)
            self.grown[job.key] = None
        else:
            job.grown = None
            self.grown.pop(job.key, None)

    def _fill(self, job: Job, event: WorkloadObserved, *, sized: bool = True) -> None:
        if job.priority_class is not None:
            self.class_users.get(job.priority_class, {}).pop(job.key, None)
        job.zone = Zone(self.intern_name(event.zone))
        listed = tuple(Zone(self.intern_name(zone)) for zone in event.zones)
        if not (job.state == ADMITTED and not job.listed and not listed):
            job.zones = listed  # else it keeps the tree's list it was admitted under (Z3)
        job.listed = listed
        job.priority_class = (
            None if event.priority_class is None else self.intern_name(event.priority_class)
        )
        job.spec_priority = event.priority
        job.created_ms = event.created_ms
        job.quota_name = None if event.quota_name is None else self.intern_name(event.quota_name)
        job.retry_ask = event.retry
        seconds = event.max_runtime_seconds
        job.max_runtime_ms = None if seconds is None else seconds * 1000
        job.topology = event.topology
        admission.observe(self.state.gated, job.key, event.admission_gates)
        link = self.state.retries.get(job.key)
        if link is not None:
            # A retry keeps its job's place: the first attempt's creation (R12).
            job.created_ms = Millis(link.first_created_ms)
        if sized:
            self._size(job, event)
        if job.priority_class is not None:
            self.class_users.setdefault(job.priority_class, {})[job.key] = None
        job.priority = self._resolve_priority(job)
        job.refresh_sort_key()

    def _size(self, job: Job, event: WorkloadObserved) -> None:
        """Its request, pods and partial-admission bounds (R11), as the event says."""
        pods: list[Shape] = []
        for pod_set in event.pod_sets:
            if pod_set.count > 0:
                pods.append(self.intern(shape_of(pod_set.requests)))
        job.shape = self.intern(shape_of(total_requests(event)))
        pod_list = tuple(sorted(set(pods)))
        job.pods = self.pod_lists.setdefault(pod_list, pod_list)
        job.pod_count = sum(p.count for p in event.pod_sets if p.count > 0)
        job.scalable = None
        for pod_set in event.pod_sets:
            least = pod_set.min_count
            if least is not None and 0 < least < pod_set.count:
                pod = self.intern(shape_of(pod_set.requests))
                job.scalable = (pod_set.name, pod, pod_set.count, least)
        job.fit_shape = (
            job.shape
            if job.scalable is None
            else self.intern(shape_with(job.shape, job.scalable, job.scalable[3]))
        )

    def _resolve_priority(self, job: Job) -> int:
        if job.priority_class is not None and job.priority_class in self.state.priority_values:
            return self.state.priority_values[job.priority_class]
        return job.spec_priority if job.spec_priority is not None else 0

    def set_priority_class(self, name: str, value: int | None) -> None:
        if value is None:
            self.state.priority_values.pop(name, None)
        else:
            self.state.priority_values[name] = value
        for key in list(self.class_users.get(name, {})):
            job = self.state.jobs[key]
            priority = self._resolve_priority(job)
            if priority == job.priority:
                continue
            if job.state == PENDING and job.leaf is not None:
                queue = self.leaf_queues[job.leaf]
                self.note_shapes(job.leaf, queue.remove(job))
                job.priority = priority
                job.refresh_sort_key()
                self.note_shapes(job.leaf, queue.add(job))
            elif job.state == ADMITTED and job.used_path is not None:
                self.reprioritise_admitted(job, priority)
            else:
                job.priority = priority
                job.refresh_sort_key()
        self.state.version += 1

    def fold_finished(self, event: WorkloadFinished) -> list[Decision]:
        job = self.state.jobs.get(event.workload)
        if job is None or job.state == FINISHED:
            return []
        quota = job.used_path if job.state == ADMITTED else None
        ran_on = (quota, job.zone) if quota is not None else self.stopping_on(job.key)
        if not event.succeeded and ran_on is not None:
            self._note_failure(job, *ran_on, event)
        released = self._release(job, "Finished" if event.succeeded else "Failed")
        if not released:
            self.unplace(job)
        if quota is not None:
            job.leaf = quota  # a finished workload is shown in the queue it ran from
        job.state = FINISHED
        return released

    def _note_failure(
        self, job: Job, quota: QuotaPath, zone: Zone, event: WorkloadFinished
    ) -> None:
        """A failed admitted attempt of a job with retries waits for its ``Retried`` (R12)."""
        info = self.state.tree.nodes.get(quota)
        policy = info.retry if info is not None else RetryPolicy()
        queue = info.queue if info is not None and info.queue is not None else QueueName("")
        failure = retry.failure_of(
            self.state.retries.get(job.key),
            job.key,
            job.created_ms,
            (zone, queue, quota),
            policy,
            job.retry_ask,
            event.terminations,
        )
        if failure is not None:
            self.state.failures[job.key] = failure

    def retry_failed(self, decisions: list[Decision]) -> None:
        """Decide what follows every failed attempt of this engine's zones (R12, R13)."""
        for key, failure in list(self.state.failures.items()):
            if not self.decides(failure.zone):
                continue
            decision = retry.retried(key, failure)
            self.apply_retried(decision)
            decisions.append(decision)

    def apply_retried(self, decision: Retried) -> None:
        """The attempt ``decision.workload`` is answered; the next one it names is linked to
        its job's first attempt and keeps its place (R12). Only a ``Retried`` links: a job that
        merely carries the annotations gets no place of another."""
        failure = self.state.failures.pop(decision.workload, None)
        if decision.job is None or decision.job in self.state.retries:
            return
        # The failure before it (on the log before it) knows the first attempt's creation,
        # even if the failed job was deleted since.
        first_created = failure.first_created_ms if failure is not None else self.state.now
        self.state.retries[decision.job] = RetryLink(
            decision.first, first_created, decision.attempt + 1
        )
        self.state.version += 1

    def fold_deleted(self, key: WorkloadKey) -> list[Decision]:
        job = self.state.jobs.get(key)
        if job is None:
            return []
        released = self._release(job, "Deleted")
        if not released and job.state != FINISHED:
            self.unplace(job)
        if job.priority_class is not None:
            self.class_users.get(job.priority_class, {}).pop(key, None)
        self.state.announce.pop(key, None)
        # A job created again under this name later is a new job: it gets no old place (R12).
        self.state.retries.pop(key, None)
        self.state.gated.pop(key, None)
        del self.state.jobs[key]
        return released

    def fold_cluster(
        self, event: ClusterConnected | ClusterDisconnected | ClusterLost
    ) -> list[Decision]:
        """A cluster connected, disconnected or was declared lost (M1). A lost cluster's
        workloads are folded as deleted (their ``Released``, as for a deletion); the
        cluster's waiting workloads are looked at again at the next pass."""
        self.state.clusters[event.cluster] = clusters.fold_link(
            self.state.clusters, event, self.state.now
        )
        self.state.version += 1
        self.dirty.update(self.state.tree.leaves)
        if not isinstance(event, ClusterLost):
            return []
        released: list[Decision] = []
        for key in clusters.lost_workloads(list(self.state.jobs), event.cluster):
            released.extend(self.fold_deleted(key))
        return released

    def _release(self, job: Job, cause: ReleaseCause) -> list[Decision]:
        """Free what an admitted (or held) workload uses; the ``Released`` decision if any.

        In a running system the usage lingers until the ledger's ``Released`` is on the log
        (R7): the ledger frees it only once it has read the same event, and every engine must
        count what the ledger counts, or it judges borrowing and room on other numbers.
        """
        if job.held:
            if self.config.instant_release:
                self.drop_hold(job)
            else:
                self.linger(job)
        if job.state != ADMITTED or job.used_path is None:
            return []
        quota, shape = job.used_path, job.used_shape
        if self.config.instant_release:
            self.unadmit(job)
        else:
            self.linger(job)
        return [Released(workload=job.key, quota=quota, requests=dict(shape), cause=cause)]

    def fold_progress(self, event: WorkloadProgress) -> None:
        """Pod counts of an admitted workload; its deadline stops once all are ready."""
        job = self.state.jobs.get(event.workload)
        if job is None or job.state != ADMITTED or job.readiness is None:
            return
        job.readiness = readiness.progressed(job.readiness, event.ready, event.total)
        if not job.readiness.deadline_ms:
            self.unready.pop(job.key, None)

    def requeue_unready(self, decisions: list[Decision]) -> None:
        """Requeue every admitted workload of this engine's zones past its ready deadline."""
        now = self.state.now
        due = sorted((end, key) for key, end in self.unready.items() if end <= now)
        for _, key in due:
            job = self.state.jobs[key]
            if not self.decides(job.zone):
                continue
            decision = self._requeue_decision(job)
            self.apply_requeued(decision)
            decisions.append(decision)

    def drain_due(self, decisions: list[Decision]) -> None:
        """Preempt the admitted workloads of this engine's zones below every drain whose grace
        has run out (R15): each is its own preemptor, nobody is admitted in its stead."""
        due = holds.drains_due(self.holds, self.state.now)
        if not due:
            return
        for path in sorted(self.leaf_admitted):
            record = holds.hold_over(self.holds, path)
            if record is None or record.drain_at_ms is None or record.drain_at_ms > self.state.now:
                continue
            for victim_key in list(self.leaf_admitted.get(path, ())):
                job = self.state.jobs[victim_key[3]]
                if not self.decides(job.zone):
                    continue
                info = self.state.tree.nodes.get(path)
                queue = info.queue if info is not None and info.queue is not None else None
                decision = Preempted(
                    workload=job.key,
                    queue=queue or QueueName(""),
                    quota=path,
                    preemptor=job.key,
                    reason=record.drain_reason(),
                )
                self._apply_drained(decision)
                decisions.append(decision)

    def stop_grown(self, decisions: list[Decision]) -> None:
        """Stop each admitted workload of this engine's zones that grew after its admission
        (R16): like a drain's preemption (R15) it is its own preemptor, counted until its
        pods are seen stopped, then it waits again at the size it now asks for."""
        for key in sorted(self.grown):
            job = self.state.jobs[key]
            if not self.decides(job.zone) or job.used_path is None or job.grown is None:
                continue
            info = self.state.tree.nodes.get(job.used_path)
            queue = info.queue if info is not None and info.queue is not None else None
            decision = Preempted(
                workload=job.key,
                queue=queue or QueueName(""),
                quota=job.used_path,
                preemptor=job.key,
                reason=job.grown,
            )
            self._apply_drained(decision)
            decisions.append(decision)

    def _requeue_decision(self, job: Job) -> Requeued:
        """The requeue of ``job`` now: which attempt it was and when it may be tried again."""
        assert job.used_path is not None and job.readiness is not None
        policy = self.readiness_of(job.used_path)
        record = job.readiness
        attempt = record.requeues + 1
        final = attempt >= policy.max_attempts
        wait = None if final else policy.backoff_ms(attempt)
        now = self.state.now
        info = self.state.tree.nodes.get(job.used_path)
        queue = info.queue if info is not None and info.queue is not None else QueueName("")
        return Requeued(
            workload=job.key,
            queue=queue,
            quota=job.used_path,
            zone=job.zone,
            requests=dict(job.used_shape),
            ready=record.ready,
            total=record.total,
            attempt=attempt,
            max_attempts=policy.max_attempts,
            retry_after_ms=None if wait is None else Millis(now + wait),
            reason=reasons.pods_not_ready(
                record.ready,
                record.total,
                now - record.started_ms,
                attempt,
                policy.max_attempts,
                wait,
            ),
        )

    def apply_requeued(self, decision: Requeued) -> None:
        """Evict an admitted workload for readiness: it waits at its place again (R10).

        Its usage leaves at once in scenarios; in a running system it stops like a preempted
        victim that is its own preemptor (a stop group with no hold, R7) -- as the ledger
        holds it: counted, not claimed -- until the ledger's ``Released``, and the workload
        is not offered before that either.
        """
        job = self.state.jobs.get(decision.workload)
        if job is None or job.state != ADMITTED or job.used_path is None:
            return
        placement: Placement = (job.used_path, job.used_shape, job.zone)
        self.unadmit(job)
        self.begin_stop(job.key, job.key, placement)
        record = job.readiness if job.readiness is not None else readiness.Readiness()
        job.readiness = readiness.requeued(
            record, decision.attempt, decision.retry_after_ms, decision.reason
        )
        self.classify(job)
        if job.state == INADMISSIBLE and decision.retry_after_ms is None:
            # The last Requeued says it (and reaches the log through the ledger): a separate
            # Inadmissible from the dequeuer could reach the log before it.
            self.state.announce.pop(job.key, None)
        if job.state == PENDING and decision.retry_after_ms is not None:
            heapq.heappush(self.state.wakeups, (decision.retry_after_ms, 0, job.key))
        self.state.version += 1

    def apply_admitted(self, decision: Admitted) -> None:
        if decision.workload in self.state.lingering:
            # This engine admitted it and saw it end before the ledger's grant came back: the
            # lingering usage is that very allocation (one live allocation per workload, R8).
            return
        job = self.state.jobs.get(decision.workload)
        if job is None:
            namespace, _, name = decision.workload.partition("/")
            job = Job(decision.workload, namespace, name)
            job.zone = decision.zone
            job.priority = decision.priority
            job.created_ms = self.state.now
            job.shape = self.intern(shape_of(decision.requests))
            job.fit_shape = job.shape
            job.refresh_sort_key()
            job.arrived_pass = self.state.passes
            job.state = UNMAPPED  # placeholder: not in any queue yet
            self.state.jobs[job.key] = job
        elif job.state in (ADMITTED, FINISHED):
            if job.state == ADMITTED and job.readiness is not None:
                self._restart_ready_deadline(job)
            return
        else:
            self.unplace(job)
        if job.held:
            self.drop_hold(job)
        if decision.zone in job.zones:
            job.zone = decision.zone  # a fallback admission counts where it runs (Z2)
        shape = self.intern(shape_of(decision.requests))
        pods = self._admitted_pods(job, decision)
        self.admit(job, decision.quota, shape, pods=pods, pin=decision.topology)

    def _admitted_pods(self, job: Job, decision: Admitted) -> int | None:
        """Pods of a partial admission (R11), for the readiness count; None: all of them."""
        if decision.pod_counts is None or job.scalable is None:
            return None
        name, _, count, _ = job.scalable
        pods = decision.pod_counts.get(name)
        return None if pods is None else job.pod_count - (count - pods)

    def _restart_ready_deadline(self, job: Job) -> None:
        """The ledger's grant of an admission this engine made: the ready deadline runs from
        it, as every engine replaying the log (and the audit) counts it (R10). A preemptor's
        grant comes once its last victim stopped."""
        record = job.readiness
        assert job.used_path is not None and record is not None
        timeout = self.readiness_of(job.used_path).timeout_ms
        if timeout <= 0 or (record.total and record.ready >= record.total):
            return
        deadline = self.state.now + timeout
        if job.key in self.unready and deadline <= record.deadline_ms:
            return
        job.readiness = readiness.restarted(record, self.state.now, timeout)
        self.unready[job.key] = deadline
        heapq.heappush(self.state.wakeups, (deadline, -job.admit_seq, job.key))

    def apply_preempted(self, decision: Preempted) -> None:
        if decision.preemptor == decision.workload:
            self._apply_drained(decision)
            return
        if self.stopping.get(decision.workload) == decision.workload:
            # Requeued here, preempted by the ledger before it read that (R10): its usage
            # now counts as the preemptor's group's, as in the ledger.
            stopping = self.state.stops[decision.workload].victims[decision.workload]
            self.end_stop(decision.workload)
            self.hold_for(decision.preemptor)
            self.begin_stop(decision.preemptor, decision.workload, stopping)
            return
        lingering = self.state.lingering.pop(decision.workload, None)
        if lingering is not None:
            # It finished (or was deleted) before the ledger read that: the ledger preempted
            # what it still held. Its usage now counts as the group's, as in the ledger.
            self.unaccount(*lingering)
            self.hold_for(decision.preemptor)
            self.begin_stop(decision.preemptor, decision.workload, lingering)
            return
        job = self.state.jobs.get(decision.workload)
        if job is None or job.state != ADMITTED:
            return
        assert job.used_path is not None
        placement: Placement = (job.used_path, job.used_shape, job.zone)
        self.unadmit(job)
        self.classify(job)
        self.set_note(job, decision.reason)
        self.hold_for(decision.preemptor)
        self.begin_stop(decision.preemptor, job.key, placement)

    def _apply_drained(self, decision: Preempted) -> None:
        """Preempt an admitted workload for a drain (R15): it waits at its place again.

        Nobody is admitted in its stead, so it is its own preemptor: it stops like a workload
        requeued for readiness (a stop group with no hold, R7), counted until the ledger's
        ``Released``; its queue admits nothing before the drain is lifted anyway (R14).
        """
        job = self.state.jobs.get(decision.workload)
        if job is None or job.state != ADMITTED or job.used_path is None:
            return
        placement: Placement = (job.used_path, job.used_shape, job.zone)
        self.unadmit(job)
        self.classify(job)
        self.set_note(job, decision.reason)
        self.begin_stop(job.key, job.key, placement)
        self.state.version += 1

    def apply_released(self, decision: Released) -> None:
        # The ledger freed it (R7): a victim seen stopped, or a finished, deleted or
        # preempted workload whose usage lingered until now; a preemptor gone for good.
        requeued = self.stopping.get(decision.workload) == decision.workload
        self.end_stop(decision.workload)
        self.preemptor_gone(decision.workload)
        if requeued and decision.cause == "Deleted":
            # Requeued here (R10) and deleted: this very workload is gone. It is still known
            # only when the ledger's Admitted reached the log after its deletion (applied
            # again until this Released, R8): that admission ends, nothing waits in a queue.
            self.end_linger(decision.workload)
            job = self.state.jobs.get(decision.workload)
            if job is not None:
                if job.state == ADMITTED:
                    self.unadmit(job)
                self.fold_deleted(job.key)
            return
        if self.end_linger(decision.workload):
            return  # a workload of the same name may exist again: it is not this one
        job = self.state.jobs.get(decision.workload)
        if job is None or job.state != ADMITTED:
            return
        self.unadmit(job)
        if decision.cause == "Deleted":
            self.fold_deleted(job.key)
        elif decision.cause in ("Preempted", "Requeued"):
            self.classify(job)
        else:
            job.state = FINISHED

    def revert_admission(self, key: WorkloadKey, reason: Reason) -> None:
        """The ledger refused a reservation this engine made: the workload waits again.

        It keeps its place (its order key never changed). A preemptor keeps the capacity its
        victims freed as a hold until it is admitted, so nobody else takes it.
        """
        job = self.state.jobs.get(key)
        if job is None or job.state != ADMITTED:
            return
        if key in self.state.preemptors:
            self.state.preemptors.pop(key)
            self.forget_admitted(job)
            job.state = PENDING
            job.held = True
            self.state.held[key] = None
            self.place_pending_again(job)
        else:
            self.unadmit(job, held=False)
            self.classify(job)
        self.set_note(job, reason)

    def revert_preemption(
        self, preemptor: WorkloadKey, victims: Sequence[Preempted], reason: Reason
    ) -> None:
        """The preemptor or the ledger refused a reclaim this engine made: undo it.

        The victims are admitted again where they were (keeping their admission time, so the
        reclaim order and min-runtime stay as they were) and the preemptor waits again, with
        no hold: the reclaim did not happen. Exact because a pass never offers as a victim a
        workload it admitted itself (ADMISSION-RULES R6): every victim was admitted before it.
        """
        group = self.state.stops.get(preemptor)
        # What each victim was admitted with (a partial admission holds less than it asks).
        placed = {v: where[1] for v, where in group.victims.items()} if group else {}
        for decision in victims:
            self.end_stop(decision.workload)
        for decision in victims:
            victim = self.state.jobs.get(decision.workload)
            if victim is None or victim.state == ADMITTED or victim.state == FINISHED:
                continue
            if victim.held:
                self.drop_hold(victim)
            self.unplace(victim)
            admitted_ms, admit_seq = victim.admitted_ms, victim.admit_seq
            record = victim.readiness
            self.admit(victim, decision.quota, placed.get(victim.key, victim.shape))
            self.forget_admitted(victim)
            victim.admitted_ms, victim.admit_seq = admitted_ms, admit_seq
            # Admitted again as it was: its readiness deadline and counts too (R10).
            victim.readiness = record
            self.unready.pop(victim.key, None)
            if record is not None and record.deadline_ms:
                self.unready[victim.key] = record.deadline_ms
            victim.refresh_victim_key()
            insort(self.leaf_admitted.setdefault(decision.quota, []), victim.victim_key)
            victim.note = None
        job = self.state.jobs.get(preemptor)
        if job is None or job.state != ADMITTED:
            return
        self.unadmit(job)
        self.classify(job)
        self.set_note(job, reason)

    def check_drain(self, key: WorkloadKey, now: Millis) -> Reason | None:
        """Whether preempting ``key`` for a drain is justified at ``now`` (R15): it is
        admitted below a drained node whose grace has run out, or it grew after its
        admission (R16). None when it is."""
        job = self.state.jobs.get(key)
        if job is None or job.state != ADMITTED or job.used_path is None:
            state = "unknown" if job is None else job.state
            return reasons.stale_view(key, f"{key} is {state}, not admitted")
        if job.grown is not None:
            return None
        record = holds.hold_over(self.holds, job.used_path)
        if record is None or record.drain_at_ms is None:
            return reasons.stale_view(key, f"no drain is in force over {job.used_path}")
        if record.drain_at_ms > now:
            until = reasons.format_moment(record.drain_at_ms)
            return reasons.stale_view(key, f"the drain of {record.node} has grace until {until}")
        return None

    def install_tree(self, event: QuotaTreeApplied) -> None:
        """A new valid tree: never evicts; waiting workloads are mapped again. A tree that T1
        refuses (published on the log without the watcher's validation) changes nothing: the
        tree in force stays, on every replica alike."""
        if validate_tree(event.root):
            return
        self.state.tree = TreeIndex(event.root, self.config)
        self.leaf_queues = {
            leaf: Queue(self.state.tree.nodes[leaf].queue or QueueName(leaf), leaf)
            for leaf in self.state.tree.leaves
        }
        self.share_cache = {}
        self.reset_pruning()
        self.state.tree_holds = holds.tree_holds(event.root, self.state.tree_holds, self.state.now)
        self.refresh_holds()
        for job in self.state.jobs.values():
            if job.used_path is not None:
                # Admitted (or held) usage keeps counting on the nodes of its recorded path
                # that still exist.
                self.account_quota(job.used_path, job.used_shape)
        for path, shape, _ in self.state.lingering.values():
            self.account_quota(path, shape)
        self.recount_zone_quota()
        for group in self.state.stops.values():
            # Stopping victims keep counting on the nodes of their paths that still exist.
            group.residual = {}
            self.account_residual(group, self.node_residual(group), group.zone_residual)
        for job in list(self.state.jobs.values()):
            if job.state in (PENDING, UNMAPPED, INADMISSIBLE):
                job.state = UNMAPPED
                self.outside.pop(job.key, None)
                self.classify(job)
                if job.held and job.state != PENDING:
                    self.drop_hold(job)
        self.state.version += 1
