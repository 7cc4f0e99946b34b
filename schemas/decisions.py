"""Decision events: what Usher decided about a workload, and why.

What it does: one frozen, tagged, versioned Struct per decision (D1, docs/admission-rules.md). Other
systems subscribe to these; they are published as JSON with CloudEvents-style headers.
What it must never do: hold logic; change a tag once published.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from schemas.common import Reason, Resources, TopologyPin
from schemas.ids import Millis, QueueName, QuotaPath, WorkloadKey, Zone


class _Decision(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every decision; the ``type`` tag selects the concrete struct."""


class Admitted(_Decision, frozen=True, kw_only=True, tag="decision.admitted.v1"):
    """The workload may start: unsuspend it in its zone."""

    workload: WorkloadKey
    queue: QueueName
    quota: QuotaPath
    zone: Zone
    requests: Resources
    priority: int = 0
    """Its Kubernetes priority (a 32-bit integer; higher is more important)."""
    pod_counts: dict[str, int] | None = None
    """Pods admitted per pod set when fewer than observed were (partial admission, R11):
    ``requests`` counts exactly these; the watcher scales the workload down to them."""
    reason: Reason | None = None
    """Why it was admitted as it was (``PartialAdmission``); None for a plain admission."""
    topology: TopologyPin | None = None
    """The topology domain all its pods are pinned to (TP1); None: anywhere in its zone."""


class Pending(_Decision, frozen=True, kw_only=True, tag="decision.pending.v1"):
    """The workload waits in its queue at ``position`` (1-based) for the stated reason."""

    workload: WorkloadKey
    queue: QueueName
    quota: QuotaPath
    position: int
    """Its place in its queue, 1-based (1: the head)."""
    reason: Reason


class Inadmissible(_Decision, frozen=True, kw_only=True, tag="decision.inadmissible.v1"):
    """The workload can never fit as things stand; it is skipped and never blocks its queue."""

    workload: WorkloadKey
    queue: QueueName | None = None
    quota: QuotaPath | None = None
    reason: Reason


class Unmapped(_Decision, frozen=True, kw_only=True, tag="decision.unmapped.v1"):
    """No leaf of the quota tree takes this workload; re-evaluated when the tree changes."""

    workload: WorkloadKey
    zone: Zone
    reason: Reason


class Preempted(_Decision, frozen=True, kw_only=True, tag="decision.preempted.v1"):
    """The workload is suspended again so that ``preemptor`` can run; it keeps its place."""

    workload: WorkloadKey
    queue: QueueName
    quota: QuotaPath
    preemptor: WorkloadKey
    reason: Reason


class Requeued(_Decision, frozen=True, kw_only=True, tag="decision.requeued.v1"):
    """An admitted workload did not become ready within its ready timeout (R10).

    It is suspended again; its quota counts until its pods are seen stopped and the ledger's
    ``Released`` is on the log (R7), like a preempted victim's. It keeps its place in its queue
    and is not offered again before ``retry_after_ms``; ``retry_after_ms`` None means that was
    its last attempt and it is inadmissible from now on.
    """

    workload: WorkloadKey
    queue: QueueName
    quota: QuotaPath
    zone: Zone
    requests: Resources
    ready: int
    """Pods that were ready when the timeout ran out (a count of pods)."""
    total: int
    """Pods the admitted workload should have had (a count of pods)."""
    attempt: int
    """Which admission timed out (1 = the first)."""
    max_attempts: int
    """Admissions it may time out in before it is inadmissible (a count, R10)."""
    retry_after_ms: Millis | None
    reason: Reason


RetryCause = Literal["OOMKilled", "Failed"]
"""Why an attempt ended (R12): a container was OOMKilled, or it failed otherwise."""


class MemoryResize(msgspec.Struct, frozen=True, kw_only=True):
    """One container's memory, this attempt's and the next's (R13); None where unset."""

    pod_set: str
    container: str
    request: int | None
    """This attempt's memory request, in bytes."""
    new_request: int | None
    """The next attempt's memory request, in bytes."""
    limit: int | None
    """This attempt's memory limit, in bytes."""
    new_limit: int | None
    """The next attempt's memory limit, in bytes."""


class Retried(_Decision, frozen=True, kw_only=True, tag="decision.retried.v1"):
    """A failed attempt of a job with retries (R12): what follows it, and why.

    ``job`` names the next attempt, which the watcher creates (suspended, its memory resized
    by ``resized`` after an ``OOMKilled``, R13); it waits at the first attempt's place in its
    queue. ``job`` None: no further attempt (the limit or the memory cap was reached); the
    reason says which, with the numbers. Decided by the dequeuer of ``zone``; it moves no quota
    (the failed attempt's was released as it finished; the next is admitted like anyone).
    """

    workload: WorkloadKey
    """The attempt that failed."""
    queue: QueueName
    quota: QuotaPath
    zone: Zone
    first: WorkloadKey
    """The job's first attempt (``workload`` itself when that one failed)."""
    attempt: int
    """Which attempt failed (1 = the first)."""
    limit: int
    """Retries allowed after the first attempt."""
    job: WorkloadKey | None
    cause: RetryCause
    resized: list[MemoryResize] = []
    reason: Reason


ReleaseCause = Literal["Finished", "Deleted", "Preempted", "Failed", "Requeued"]
"""Why the quota was freed; ``Requeued``: its pods stopped after a ``Requeued`` for readiness
(R10), where a preempted victim's say ``Preempted``."""


class Released(_Decision, frozen=True, kw_only=True, tag="decision.released.v1"):
    """The quota held by the workload is free again."""

    workload: WorkloadKey
    quota: QuotaPath
    requests: Resources
    cause: ReleaseCause


Decision = Admitted | Pending | Inadmissible | Unmapped | Preempted | Released | Requeued | Retried

DECISION_TYPES: tuple[type[_Decision], ...] = (
    Admitted,
    Pending,
    Inadmissible,
    Unmapped,
    Preempted,
    Released,
    Requeued,
    Retried,
)

DECISION_ACTIONS: Final[dict[type[_Decision], str]] = {
    Admitted: "admitted",
    Pending: "pending",
    Inadmissible: "inadmissible",
    Unmapped: "unmapped",
    Preempted: "preempted",
    Released: "released",
    Requeued: "requeued",
    Retried: "retried",
}
"""The ``<action>`` token of each decision type in ``<p>.decision.<zone>.<action>.<ns>.<name>``:
the one mapping between subjects and decision types (subjects, outbox, audit and the watcher)."""

LEDGER_DECISION_TYPES: Final = (Admitted, Preempted, Released, Requeued)
"""Decisions only the ledger may make (through its outbox): they move quota."""

LEDGER_SOURCE: Final = "usher/ledger"
"""The envelope ``source`` of the ledger's decisions; a ledger decision from any other source
is forged and must never be carried out."""

DEQUEUER_SOURCE: Final = "usher/dequeuer"
"""The envelope ``source`` prefix of a dequeuer's decisions: ``usher/dequeuer/<zone>``. A
``Retried`` (R12) from any other source than its zone's dequeuer is forged."""
