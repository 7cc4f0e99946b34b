"""A log written by hand in memory (``Log``: envelopes as the services would record them) and
the walkthrough's scenarios recorded that way. Pure values; never touches a server or the clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from schemas import (
    Admitted,
    Envelope,
    EventId,
    LogEvent,
    Millis,
    PodSet,
    Preempted,
    QueueName,
    QuotaNode,
    QuotaPath,
    QuotaTreeApplied,
    Reason,
    ReleaseCause,
    Released,
    Requeued,
    TopologyAsk,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    WorkloadProgress,
    Zone,
)
from tests.builders.trees import departments_tree
from usher.core.history import replay as history
from usher.core.protocol.subjects import Subjects

BASE = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
BASE_MS = int(BASE.timestamp() * 1000)
CPU = 1000  # one cpu in millicores
A = QuotaPath("root/Department-a")
B = QuotaPath("root/Department-b")
QA = QueueName("root-department-a-user-a")
QB = QueueName("root-department-b-user-c")
SUBJECTS = Subjects("usher")


class Log:
    """A log written by hand: every entry at ``at`` seconds after BASE."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, Envelope]] = []
        self.allocations: dict[WorkloadKey, int] = {}
        self._ids = 0

    def add(
        self,
        at: float,
        event: LogEvent,
        *,
        id: str | None = None,
        source: str | None = None,
        subject: str | None = None,
    ) -> Log:
        """``event`` as its owner records it (its subject and source: ``Subjects.owner``)
        unless ``source``/``subject`` say otherwise (a forged entry)."""
        self._ids += 1
        home, owner = SUBJECTS.owner(event, Zone("default"))
        envelope = Envelope(
            id=EventId(id or f"e{self._ids}"),
            time=BASE + timedelta(seconds=at),
            source=owner if source is None else source,
            event=event,
        )
        self.entries.append((home if subject is None else subject, envelope))
        return self

    def tree(self, at: float = 0, root: QuotaNode | None = None) -> Log:
        return self.add(at, QuotaTreeApplied(root=root or departments_tree()))

    def job(
        self,
        at: float,
        key: str,
        cpu: int,
        *,
        priority: int = 0,
        suspended: bool = True,
        pods: int = 1,
        max_runtime_s: int | None = None,
        zone: str = "default",
        pod_requests: dict[str, int] | None = None,
        topology: TopologyAsk | None = None,
    ) -> Log:
        """A job of ``cpu`` cores in ``pods`` pods (or ``pod_requests`` per pod); a key
        ``ns/name@cluster`` names a job outside the default cluster (M1)."""
        namespace, name = key.partition("@")[0].split("/")
        requests = pod_requests if pod_requests is not None else {"cpu": cpu * CPU // pods}
        return self.add(
            at,
            WorkloadObserved(
                workload=WorkloadKey(key),
                namespace=namespace,
                name=name,
                kind="batch/v1/Job",
                zone=Zone(zone),
                priority=priority,
                created_ms=Millis(BASE_MS + int(at * 1000)),
                pod_sets=[PodSet(name="main", count=pods, requests=requests)],
                suspended=suspended,
                max_runtime_seconds=max_runtime_s,
                topology=topology,
            ),
        )

    def admitted(
        self, at: float, key: str, cpu: int, quota: QuotaPath = A, *, priority: int = 0
    ) -> Log:
        workload = WorkloadKey(key)
        number = self.allocations.setdefault(workload, len(self.allocations) + 1)
        queue = QA if quota == A else QB
        return self.add(
            at,
            Admitted(
                workload=workload,
                queue=queue,
                quota=quota,
                zone=Zone("default"),
                requests={"cpu": cpu * CPU},
                priority=priority,
            ),
            id=f"ledger:admitted:{key}:{number}",
        )

    def preempted(self, at: float, key: str, by: str, quota: QuotaPath = A) -> Log:
        workload = WorkloadKey(key)
        reason = Reason(code="Reclaim", message=f"{by} reclaims", blocker=WorkloadKey(by))
        return self.add(
            at,
            Preempted(
                workload=workload,
                queue=QA if quota == A else QB,
                quota=quota,
                preemptor=WorkloadKey(by),
                reason=reason,
            ),
            id=f"ledger:preempted:{key}:{self.allocations.get(workload, 0)}",
        )

    def released(
        self, at: float, key: str, cpu: int, cause: ReleaseCause, quota: QuotaPath = A
    ) -> Log:
        workload = WorkloadKey(key)
        return self.add(
            at,
            Released(workload=workload, quota=quota, requests={"cpu": cpu * CPU}, cause=cause),
            id=f"ledger:released:{key}:{self.allocations.get(workload, 0)}",
        )

    def requeued(
        self, at: float, key: str, cpu: int, quota: QuotaPath = A, *, retry_after: float = 600
    ) -> Log:
        """The ledger's ``Requeued`` (R10) of ``key``: not ready in time, first attempt."""
        workload = WorkloadKey(key)
        reason = Reason(code="PodsNotReady", message="0/4 pods ready, attempt 1 of 5")
        return self.add(
            at,
            Requeued(
                workload=workload,
                queue=QA if quota == A else QB,
                quota=quota,
                zone=Zone("default"),
                requests={"cpu": cpu * CPU},
                ready=0,
                total=4,
                attempt=1,
                max_attempts=5,
                retry_after_ms=Millis(BASE_MS + int(retry_after * 1000)),
                reason=reason,
            ),
            id=f"ledger:requeued:{key}:{self.allocations.get(workload, 0)}",
        )

    def progress(self, at: float, key: str, ready: int, total: int) -> Log:
        return self.add(at, WorkloadProgress(workload=WorkloadKey(key), ready=ready, total=total))

    def finished(self, at: float, key: str, *, succeeded: bool = True) -> Log:
        return self.add(at, WorkloadFinished(workload=WorkloadKey(key), succeeded=succeeded))

    def history(self) -> history.History:
        return history.history_of(self.entries)


def walkthrough_round() -> Log:
    """Walkthrough scenario 1 as the services record it: one 60-cpu job admitted, one waits."""
    return (
        Log()
        .tree(0)
        .job(1, "user-a/first", 60)
        .admitted(1.1, "user-a/first", 60)
        .job(1.2, "user-a/first", 60, suspended=False)
        .job(2, "user-a/second", 60)
    )


def walkthrough_reclaim() -> Log:
    """Walkthrough scenario 3 as recorded: borrow is preempted for urgent, then released."""
    return (
        Log()
        .tree(0)
        .job(1, "user-a/big", 60)
        .admitted(1.1, "user-a/big", 60)
        .job(2, "user-b/borrow", 40)
        .admitted(2.1, "user-b/borrow", 40)
        .job(2.2, "user-b/borrow", 40, suspended=False)
        .job(3, "user-c/urgent", 10, priority=3)
        .preempted(3.1, "user-b/borrow", "user-c/urgent")
        .job(3.2, "user-b/borrow", 40, suspended=True)
        .released(3.3, "user-b/borrow", 40, "Preempted")
        .admitted(3.3, "user-c/urgent", 10, B, priority=3)
    )


def waiting_behind_a_run(now: float) -> Log:
    """Seconds after BASE: runs of 10, 20 and 30 minutes ended long before ``now``;
    user-a/running (90 cpu of Department-a's 100) started 90 s before ``now``, and user-a/next
    (50 cpu) waits for it. Its estimated start at ``now`` is when the runs longer than 90 s
    end, less 90 s: p25 8m30s, p50 18m30s, p75 28m30s (half a minute from a minute's edge, so
    the words ``~18m (8m-28m)`` hold for a test that takes some seconds)."""
    log = Log().tree(now - 7200)
    for number, minutes in enumerate((10, 20, 30)):
        key = f"user-a/r{number}"
        began = now - 7000 + number
        log.job(began, key, 10).admitted(began + 0.1, key, 10)
        log.released(began + 0.1 + minutes * 60, key, 10, "Finished")
    return (
        log.job(now - 91, "user-a/running", 90)
        .admitted(now - 90, "user-a/running", 90)
        .job(now - 30, "user-a/next", 50)
    )
