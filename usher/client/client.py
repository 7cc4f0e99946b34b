"""The Usher client: submit jobs through Kubernetes, read what Usher decided from its log.

What it does: ``AsyncClient`` (asyncio) and ``Client`` (blocking, safe in notebooks: it runs
its own event loop in a thread) offer what kube-queue's Jobctl offered to notebooks and a bit
more: ``submit`` (a suspended batch/v1 Job built from a few options), ``submit_manifest``,
``apply`` (files of manifests, create or update), ``list_jobs``, ``job``, ``queues``,
``queue``, ``quota``, ``usage`` (resource-hours over a window, U1) and ``wait`` (follow one
job until it is admitted or done). Writes go to the Kubernetes API (``usher.adapters.kube``),
as any user's would; states, positions, reasons and usage come from the log on NATS
(``usher.client.state``). Every failure is a typed
``ClientError`` with sentences for people.
What it must never do: decide anything, publish on the log, touch a live workload's suspend
flag, or print or raise anything that holds a password.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from schemas import (
    ClusterLost,
    Envelope,
    EventId,
    HoldAction,
    HoldReply,
    HoldRequest,
    LedgerError,
    Millis,
    NodeHeld,
    NodeResumed,
    RequestId,
    decode,
    encode,
)
from usher.adapters.kube import (
    AlreadyExists,
    Conflict,
    Invalid,
    JsonObj,
    KubeConfigError,
    KubeError,
    NotFound,
)
from usher.adapters.logs import redact_url
from usher.adapters.nats.log import publish_envelope
from usher.adapters.nats.permissions import ADMIN
from usher.adapters.nats.subjects import Subjects
from usher.client.errors import AlreadyExists as ObjectExists
from usher.client.errors import (
    BadInput,
    ClientError,
    GroupIncomplete,
    NotRunning,
    Refused,
    WaitTimeout,
)
from usher.client.errors import NotFound as UnknownObject
from usher.client.fanout import (
    GROUP_LABEL,
    GroupResult,
    checked_group,
    group_name,
    member_requests,
)
from usher.client.manifests import (
    JOB,
    KINDS,
    Document,
    JobRequest,
    Kind,
    apply_patch,
    documents_of,
    for_create,
    is_suspended,
    job_manifest,
    load_documents,
    observed_for_dry_run,
    suspended,
    workload_document,
)
from usher.client.readmodel import read_recent, starting_point
from usher.client.state import (
    JobInfo,
    PeopleProjection,
    QueueInfo,
    QuotaInfo,
    StateView,
    catch_up,
    now_ms,
)
from usher.client.target import Target, resolve_target
from usher.client.timing import REASON_EVERY_S, UNKNOWN_GRACE_S
from usher.core.history.dryrun import AlreadyKnown, DryRun, dry_run
from usher.core.history.usage import USAGE_BY, UsageBy, UsageReport, usage_report
from usher.core.intake.workload import QUOTA_LABEL, ZONE_LABEL
from usher.core.model.errors import ValueRefused
from usher.core.protocol.log import datetime_ms
from usher.core.protocol.subjects import OPERATOR_SOURCE
from usher.core.rules.budgets import BudgetReport, budget_report
from usher.core.rules.holds import check_order as check_hold_order
from usher.core.rules.holds import resolve_target as resolve_hold_target
from usher.core.state.indexed import JobState
from usher.core.values.clusters import cluster_name
from usher.core.values.fanout import FanOut

if TYPE_CHECKING:
    # Imported where it is used: kubernetes_asyncio is a quarter of a second that reading the
    # log (``usher jobs``, ``usher queues``) does not need.
    from usher.adapters.kube.client import KubeClient

T = TypeVar("T")
P = ParamSpec("P")


class Submitted(msgspec.Struct, frozen=True, kw_only=True):
    """A job the Kubernetes API accepted."""

    job: str
    """``namespace/name`` (the server's name when the manifest had ``generateName``)."""
    kind: str
    label: str
    """kubectl's name for it: ``job.batch/pi-8k5pn``."""


class SubmittedGroup(msgspec.Struct, frozen=True, kw_only=True):
    """A fan-out the Kubernetes API accepted whole: the group's name and its jobs in order."""

    group: str
    jobs: list[Submitted]


class Deleted(msgspec.Struct, frozen=True, kw_only=True):
    """A job the Kubernetes API deleted (Usher releases its quota when the log says so)."""

    job: str
    kind: str
    label: str


class Applied(msgspec.Struct, frozen=True, kw_only=True):
    """What ``apply`` did with one manifest: ``created``, ``configured`` or ``unchanged``."""

    label: str
    namespace: str | None
    name: str
    action: str
    warning: str | None = None
    """What will happen to a workload created unsuspended (issue 28), said before it does."""
    stored_suspended: bool = True
    """Whether the object as stored is suspended (the admission webhook suspends a workload
    created unsuspended in a namespace it serves)."""


async def _quiet(_exc: Exception) -> None:
    """NATS error callback: failures reach the caller as exceptions, not as log noise."""


def _kube_failure(exc: KubeError, what: str) -> ClientError:
    if exc.transient:
        return NotRunning(f"cannot reach the Kubernetes API ({what}): {exc.message}")
    if isinstance(exc, Invalid):
        lines = [f"{what}: {c.field}: {c.message}" for c in exc.causes] or [
            f"{what}: {exc.message}"
        ]
        return BadInput(lines[0], lines)
    if isinstance(exc, NotFound):
        return UnknownObject(f"{what}: {exc.message}")
    return Refused(f"{what}: the Kubernetes API refused it ({exc.reason}): {exc.message}")


class AsyncClient:
    """Usher for asyncio code. Use as ``async with AsyncClient() as usher: ...``."""

    def __init__(
        self,
        target: Target | None = None,
        *,
        home: Path | None = None,
        kubeconfig: str | Path | None = None,
        nats_url: str | None = None,
        prefix: str | None = None,
        timeout_s: float = 30.0,
        reconnect: bool = False,
    ) -> None:
        """``reconnect=True`` keeps the NATS connection through server restarts (a client
        that follows the log for long, like the live view); otherwise a lost server is an
        error at once."""
        self.target = target or resolve_target(
            home=home, kubeconfig=kubeconfig, nats_url=nats_url, prefix=prefix
        )
        self.subjects = Subjects(self.target.prefix)
        self.timeout_s = timeout_s
        self._reconnect = reconnect
        self._kube: KubeClient | None = None
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._kube is not None:
            await self._kube.close()
            self._kube = None
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.close()
            self._nc = None
            self._js = None

    # ------------------------------------------------------------------ connections

    async def kube(self) -> KubeClient:
        if self._kube is None:
            from usher.adapters.kube.client import KubeClient

            path = self.target.need_kubernetes()
            try:
                self._kube = await KubeClient.from_kubeconfig(
                    path,
                    context=self.target.kube_context,
                    request_timeout_s=min(self.timeout_s, 10.0),
                )
            except KubeConfigError as exc:
                raise NotRunning(str(exc)) from exc
        return self._kube

    async def jetstream(self) -> JetStreamContext:
        if self._js is None:
            url = self.target.need_nats()
            try:
                self._nc = await asyncio.wait_for(
                    nats.connect(
                        url,
                        connect_timeout=3,
                        allow_reconnect=self._reconnect,
                        # 0 would retry the first connect forever (nats-py); -1 (unlimited)
                        # too, which is why the first connect has its own deadline here.
                        max_reconnect_attempts=-1 if self._reconnect else 1,
                        reconnect_time_wait=0.5 if self._reconnect else 0.1,
                        error_cb=_quiet,
                        name="usher-client",
                    ),
                    timeout=self.timeout_s,
                )
            except (OSError, TimeoutError, nats.errors.Error) as exc:
                raise NotRunning(
                    f"cannot reach NATS at {redact_url(url)} ({type(exc).__name__}): "
                    "is `usher up` running?"
                ) from exc
            self._js = self._nc.jetstream()
            try:
                await self._js.stream_info(self.subjects.stream_name)
            except nats.js.errors.NotFoundError as exc:
                raise NotRunning(
                    f"no Usher log (stream {self.subjects.stream_name}) on NATS at "
                    f"{redact_url(url)}: wrong --prefix, or the system never started there"
                ) from exc
            except (nats.errors.Error, TimeoutError) as exc:
                raise NotRunning(f"NATS at {redact_url(url)} does not answer: {exc}") from exc
        return self._js

    # ------------------------------------------------------------------ reading state

    async def state(self) -> PeopleProjection:
        """The log folded for people (``PeopleProjection``): the newest read model plus the
        log's tail (``usher.client.readmodel``); use ``.view()`` for results."""
        js = await self.jetstream()
        try:
            recent = await read_recent(
                js, self.subjects, self.target.engine, timeout_s=self.timeout_s
            )
        except TimeoutError as exc:
            raise NotRunning(str(exc)) from exc
        except (nats.errors.Error, OSError) as exc:
            raise NotRunning(f"reading the log failed: {type(exc).__name__}: {exc}") from exc
        return recent.state

    async def view(self) -> StateView:
        return (await self.state()).view(now_ms())

    async def list_jobs(
        self,
        namespace: str | None = None,
        *,
        states: Iterable[str] | None = None,
        group: str | None = None,
    ) -> list[JobInfo]:
        """Every job Usher knows (optionally of one namespace, in some states, or of one
        ``group``: a fan-out's jobs, found by their label ``usher.io/group``)."""
        wanted = set(states) if states is not None else None
        members = None
        if group is not None:
            members = {m.job for m in await self.group_members(group, namespace)}
        return [
            job
            for job in (await self.view()).jobs
            if (namespace is None or job.namespace == namespace)
            and (wanted is None or job.state in wanted)
            and (members is None or job.job in members)
        ]

    async def job(self, job: str, namespace: str | None = None) -> JobInfo:
        """One job, by ``namespace/name`` (or ``name`` and ``namespace``); ``NotFound``."""
        key = _key(job, namespace)
        state = await self.state()
        pending = state.pending(now_ms(), state.engine.jobs())
        found = state.job(key, None, pending.reasons, pending.estimates)
        if found is None:
            raise UnknownObject(f"no job {key} is known to Usher")
        return found

    async def queues(self) -> list[QueueInfo]:
        return (await self.view()).queues

    async def queue(self, name: str) -> QueueInfo:
        queues = await self.queues()
        for queue in queues:
            if queue.name == name:
                return queue
        known = ", ".join(q.name for q in queues) or "none: no quota tree applied yet"
        raise UnknownObject(f"no queue {name!r} (queues: {known})")

    async def quota(self) -> list[QuotaInfo]:
        return (await self.view()).quota

    async def namespaces(self) -> dict[str, str]:
        """Namespace -> queue, for every namespace a leaf of the tree in force takes."""
        out: dict[str, str] = {}
        for queue in await self.queues():
            for namespace in queue.namespaces:
                out[namespace] = queue.name
        return out

    async def usage(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        by: str = "node",
    ) -> UsageReport:
        """Resource-hours per quota node, leaf queue or namespace over ``[since, until)`` (U1).

        ``by`` is ``node`` (every node on the path), ``queue`` or ``namespace``; ``until``
        None is now, and a workload still running accrues up to now. Naive datetimes are UTC.
        ``BadInput`` names ``by``, or ``since`` when it is after ``until``.
        """
        group, since_ms, until_ms = _usage_window(by, since, until)
        state = await self.state()
        return usage_report(
            state.usage.intervals(), since_ms=since_ms, until_ms=until_ms, now_ms=now_ms(), by=group
        )

    async def budget(self) -> BudgetReport:
        """Spent, left and reset of every budget of the quota tree in force (B1); the running
        work counts up to now. Amounts are exact (canonical units x ms) with hours for people.
        """
        state = await self.state()
        now = now_ms()
        return budget_report(state.engine.budget_statuses(now), now)

    # ------------------------------------------------------------------ writing

    async def order_hold(
        self,
        action: HoldAction,
        node: str,
        *,
        reason: str = "",
        grace_seconds: int | None = None,
    ) -> NodeHeld | NodeResumed:
        """Ask the ledger to hold, drain or resume ``node`` (R14/R15): a quota path, a node
        name or a leaf's queue name. Needs the admin identity (``$USHER_ADMIN_NATS_URL``, else
        the running stack's); the ledger records the order with that identity as who asked.
        ``BadInput`` names the refused field (``target``, ``grace_seconds``)."""
        state = await self.state()
        tree = state.tree
        path = resolve_hold_target(tree, node) or node
        if action == "Resume" and tree is not None:
            # A resume of a node no order holds would be recorded and change nothing: the
            # log's orders in force say so first (R14/R15's own check, with them known).
            _, refused = check_hold_order(tree, action, node, None, state.engine.state.holds)
            if refused:
                raise BadInput(f"{refused[0].path}: {refused[0].message}")
        url = self.target.admin_nats_url
        if not url:
            raise NotRunning(
                "no admin NATS URL: holds are the admin's (set $USHER_ADMIN_NATS_URL or run "
                "on the machine of `usher up`)"
            )
        request = HoldRequest(
            request_id=RequestId(f"cli-{time.time_ns()}"),
            action=action,
            target=path,
            reason=reason,
            grace_seconds=grace_seconds,
        )
        try:
            admin = await nats.connect(url, connect_timeout=3, max_reconnect_attempts=1)
        except (OSError, TimeoutError, nats.errors.Error) as exc:
            raise NotRunning(f"cannot reach NATS at {redact_url(url)}: {exc}") from exc
        try:
            raw = await admin.request(
                self.subjects.ledger_hold(ADMIN), encode(request), timeout=self.timeout_s
            )
        except (TimeoutError, nats.errors.Error) as exc:
            raise NotRunning(f"the ledger did not answer the {action.lower()}: {exc}") from exc
        finally:
            with contextlib.suppress(Exception):
                await admin.close()
        try:
            reply = decode(raw.data, HoldReply)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            failure = decode(raw.data, LedgerError)
            raise Refused(f"the ledger refused: {failure.message}") from exc
        if reply.recorded is None:
            raise BadInput(f"{reply.field}: {reply.message}")
        return reply.recorded

    async def declare_cluster_lost(self, cluster: str, *, by: str, reason: str = "") -> ClusterLost:
        """Declare ``cluster`` lost (M1): its workloads are released as if deleted and nothing
        is admitted there until its watcher connects again. Only the admin identity may
        (``$USHER_ADMIN_NATS_URL``, else the running stack's); ``BadInput`` for a name that is
        not a cluster the log knows, or a missing ``by``."""
        try:
            name = cluster_name(cluster, "cluster")
        except ValueRefused as refused:
            raise BadInput(f"{refused.path}: {refused.message}") from refused
        if not by.strip():
            raise BadInput("by: say who declares the cluster lost")
        known = (await self.state()).engine.state.clusters
        if name not in known:
            listed = ", ".join(known) or "none: no cluster ever connected"
            raise BadInput(f"cluster: no cluster {name} on the log (clusters: {listed})")
        url = self.target.admin_nats_url
        if not url:
            raise NotRunning(
                "no admin NATS URL: declaring a cluster lost is the admin's (set "
                "$USHER_ADMIN_NATS_URL or run on the machine of `usher up`)"
            )
        event = ClusterLost(cluster=name, by=by.strip(), reason=reason)
        envelope = Envelope(
            id=EventId(f"cluster-lost:{name}:{time.time_ns()}"),
            time=datetime.now(UTC),
            source=OPERATOR_SOURCE,
            event=event,
        )
        try:
            admin = await nats.connect(url, connect_timeout=3, max_reconnect_attempts=1)
        except (OSError, TimeoutError, nats.errors.Error) as exc:
            raise NotRunning(f"cannot reach NATS at {redact_url(url)}: {exc}") from exc
        try:
            await publish_envelope(admin.jetstream(), self.subjects.cluster_lost(name), envelope)
        except (TimeoutError, nats.errors.Error) as exc:
            raise NotRunning(f"the log did not take the declaration: {exc}") from exc
        finally:
            with contextlib.suppress(Exception):
                await admin.close()
        return event

    async def submit(
        self,
        name: str | None = None,
        *,
        namespace: str,
        image: str,
        cpu: str | int | float | None = None,
        memory: str | None = None,
        gpu: str | int | None = None,
        replicas: int = 1,
        priority_class: str | None = None,
        zone: str | None = None,
        duration: float | None = None,
        command: Iterable[str] = (),
        labels: dict[str, str] | None = None,
        check_namespace: bool = True,
        check_zone: bool = True,
    ) -> Submitted:
        """Create a suspended batch/v1 Job of ``replicas`` identical pods; Usher admits it.

        ``duration`` (seconds) sets ``usher.io/sim-duration`` for the emulator's kubelet.
        With ``check_namespace`` a namespace that no leaf of the quota tree takes is refused
        (``BadInput``) instead of waiting ``Unmapped``; with ``check_zone`` a ``zone`` no
        dequeuer serves is refused instead of waiting ``ZoneNotServed``.
        """
        request = JobRequest(
            namespace=namespace,
            image=image,
            name=name,
            cpu=None if cpu is None else str(cpu),
            memory=memory,
            gpu=None if gpu is None else str(gpu),
            replicas=replicas,
            priority_class=priority_class,
            zone=zone,
            duration_s=duration,
            command=tuple(command),
            labels=dict(labels or {}),
        )
        manifest = job_manifest(request)
        await self._check_target(
            namespace if check_namespace else None, zone if check_zone else None
        )
        return await self._create(manifest, JOB)

    async def submit_manifest(
        self,
        manifest: JsonObj,
        *,
        check_namespace: bool = True,
        check_zone: bool = True,
        source: str = "manifest",
        index: int = 1,
    ) -> Submitted:
        """Create one workload manifest, suspended (whatever it said), like ``kubectl create``.

        ``check_namespace`` and ``check_zone`` (its ``usher.io/zone`` label) as in ``submit``.
        """
        document = workload_document(manifest, source=source, index=index)
        kind = document.kind
        await self._check_target(
            (document.namespace or None) if check_namespace else None,
            _zone_label(manifest) if check_zone else None,
        )
        return await self._create(
            for_create(Document(source, index, suspended(manifest, kind), kind)), kind
        )

    async def dry_run(
        self, manifest: JsonObj, *, source: str = "manifest", index: int = 1
    ) -> DryRun:
        """What submitting ``manifest`` now would do, without creating anything: its queue and
        quota node, the position it would take, whether the next decision pass admits it (if
        not, the limiting node and numbers), whom that pass would preempt for it, and its
        estimated start (``usher.core.history.dryrun``). ``BadInput`` for a manifest Usher cannot
        read
        or a job that already exists."""
        document = workload_document(manifest, source=source, index=index)
        now = now_ms()
        observed = observed_for_dry_run(document, now)
        state = await self.state()
        try:
            return dry_run(state.engine, observed, now, state.usage.intervals(), state.applied_seq)
        except AlreadyKnown as exc:
            raise BadInput(str(exc)) from exc

    async def dry_run_job(
        self,
        name: str | None = None,
        *,
        namespace: str,
        image: str,
        cpu: str | int | float | None = None,
        memory: str | None = None,
        gpu: str | int | None = None,
        replicas: int = 1,
        priority_class: str | None = None,
        zone: str | None = None,
        duration: float | None = None,
        command: Iterable[str] = (),
        labels: dict[str, str] | None = None,
    ) -> DryRun:
        """``dry_run`` of the Job ``submit`` would build from the same arguments."""
        manifest = job_manifest(
            JobRequest(
                namespace=namespace,
                image=image,
                name=name,
                cpu=None if cpu is None else str(cpu),
                memory=memory,
                gpu=None if gpu is None else str(gpu),
                replicas=replicas,
                priority_class=priority_class,
                zone=zone,
                duration_s=duration,
                command=tuple(command),
                labels=dict(labels or {}),
            )
        )
        return await self.dry_run(manifest, source="options")

    async def _check_target(self, namespace: str | None, zone: str | None) -> None:
        """Refuse a namespace no queue takes, or a zone no dequeuer serves (None: unchecked)."""
        if self.target.nats_url is None or (namespace is None and zone is None):
            return  # no log to ask: the job will say Unmapped or ZoneNotServed
        state = await self.state()
        if namespace is not None:
            _check_namespace(state, namespace)
        if zone is not None:
            _check_zone(state, zone)

    async def _create(self, manifest: JsonObj, kind: Kind) -> Submitted:
        kube = await self.kube()
        meta = manifest.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        name = str(meta.get("name") or meta.get("generateName", "") + "*")
        what = f"{kind.label}/{name}"
        try:
            created = await kube.create(kind.resource, namespace, manifest)
        except AlreadyExists as exc:
            raise ObjectExists(
                f"{what} already exists in namespace {namespace}",
                kind=kind.resource.kind,
                namespace=str(namespace),
                name=name,
            ) from exc
        except KubeError as exc:
            raise _kube_failure(exc, what) from exc
        name = str(created["metadata"]["name"])
        return Submitted(
            job=f"{namespace}/{name}", kind=kind.resource.kind, label=f"{kind.label}/{name}"
        )

    async def apply(self, path: Path | str) -> list[Applied]:
        """Create or update every manifest of a (multi-document) YAML file, in file order.

        All documents are checked before the first is sent: a file with a mistake changes
        nothing. Manifests with ``generateName`` are always created (as ``kubectl create``).
        """
        return await self._apply_documents(load_documents(Path(path)))

    async def apply_manifests(self, manifests: list[JsonObj], source: str) -> list[Applied]:
        """``apply`` for manifests built in memory (``source`` names them in messages)."""
        return await self._apply_documents(documents_of(list(manifests), source))

    async def _apply_documents(self, documents: list[Document]) -> list[Applied]:
        kube = await self.kube()
        return [await self._apply_one(kube, document) for document in documents]

    async def _apply_one(self, kube: KubeClient, document: Document) -> Applied:
        kind, namespace = document.kind, document.namespace
        what = f"{kind.label}/{document.name or document.generate_name + '*'}"
        for _attempt in range(3):
            try:
                applied = await self._apply_attempt(kube, document, namespace)
            except Conflict:  # changed (or created) between our read and our write: again
                continue
            except KubeError as exc:
                raise _kube_failure(exc, f"{document.where} ({what})") from exc
            if applied.action != "created" or is_suspended(document.manifest, kind):
                return applied
            story = await self._unsuspended_story(document, applied)
            return msgspec.structs.replace(applied, warning=story)
        raise Refused(f"{document.where} ({what}): kept changing under us; try again")

    async def _unsuspended_story(self, document: Document, applied: Applied) -> str | None:
        """What happens to a workload created unsuspended, as it will happen: suspended by
        the admission webhook at creation (the stored object says so), else by the watcher
        once it sees it (its pods may start meanwhile) when a leaf of the tree takes it,
        else nothing: it runs outside Usher's queues. None for a kind with no suspend flag."""
        kind = document.kind
        if not kind.is_workload or kind.suspend_path is None:
            return None
        head = f"{document.where}: {kind.resource.kind} {applied.name} was created unsuspended"
        if applied.stored_suspended:
            return f"{head}: Usher's admission webhook suspended it; it is queued like any job"
        labels = document.manifest.get("metadata", {}).get("labels") or {}
        namespace = applied.namespace or ""
        if QUOTA_LABEL in labels or namespace in await self.namespaces():
            return (
                f"{head}: no admission webhook suspended it, so its pods may start until "
                "Usher's watcher suspends it and queues it like any job"
            )
        return (
            f"{head} in namespace {namespace}, which no leaf of the quota tree takes: it "
            "starts at once, outside Usher's queues"
        )

    async def _apply_attempt(
        self, kube: KubeClient, document: Document, namespace: str | None
    ) -> Applied:
        kind = document.kind
        if not document.name:
            created = await kube.create(kind.resource, namespace, for_create(document))
            return Applied(
                label=kind.label,
                namespace=namespace,
                name=str(created["metadata"]["name"]),
                action="created",
                stored_suspended=is_suspended(created, kind),
            )
        try:
            current = await kube.get(kind.resource, namespace, document.name)
        except NotFound:
            created = await kube.create(kind.resource, namespace, for_create(document))
            return Applied(
                label=kind.label,
                namespace=namespace,
                name=document.name,
                action="created",
                stored_suspended=is_suspended(created, kind),
            )
        patch = apply_patch(document, current)
        if patch is None:
            return Applied(
                label=kind.label, namespace=namespace, name=document.name, action="unchanged"
            )
        patch.setdefault("metadata", {})["resourceVersion"] = current["metadata"]["resourceVersion"]
        await kube.merge_patch(kind.resource, namespace, document.name, patch)
        return Applied(
            label=kind.label, namespace=namespace, name=document.name, action="configured"
        )

    async def delete(
        self, job: str, namespace: str | None = None, *, kind: str | None = None
    ) -> Deleted:
        """Delete one job of any kind Usher admits (``kubectl delete``); ``kind`` (``Job``,
        ``TFJob``... or kubectl's ``job.batch``) only when two kinds share the name.

        Raises ``NotFound`` when no job has that name, ``BadInput`` for an unknown ``kind``
        or a name two kinds share.
        """
        key = _key(job, namespace)
        ns, name = key.split("/", 1)
        if not ns or not name or "/" in name:
            raise BadInput(f"job {key!r}: expected NAMESPACE/NAME")
        kinds = _workload_kinds(kind)
        kube = await self.kube()
        found: list[Kind] = []
        for candidate in kinds:
            try:
                await kube.get(candidate.resource, ns, name)
            except NotFound:  # no such object, or the kind is not served by this API
                continue
            except KubeError as exc:
                raise _kube_failure(exc, f"{candidate.label}/{name}") from exc
            found.append(candidate)
        if not found:
            raise UnknownObject(f"no job {key} ({', '.join(k.resource.kind for k in kinds)})")
        if len(found) > 1:
            labels = ", ".join(f"{k.label}/{name}" for k in found)
            raise BadInput(f"{key} names {len(found)} jobs ({labels}): pass kind to say which")
        chosen = found[0]
        try:
            await kube.delete(chosen.resource, ns, name)
        except NotFound as exc:
            raise UnknownObject(f"no job {key}: it was deleted meanwhile") from exc
        except KubeError as exc:
            raise _kube_failure(exc, f"{chosen.label}/{name}") from exc
        return Deleted(job=key, kind=chosen.resource.kind, label=f"{chosen.label}/{name}")

    # ------------------------------------------------------------------ waiting

    async def wait(
        self,
        job: str,
        namespace: str | None = None,
        *,
        until: str = "done",
        timeout: float | None = None,  # noqa: ASYNC109 (the CLI's --timeout, by its name)
        on_change: Callable[[JobInfo], None] | None = None,
        grace: float = UNKNOWN_GRACE_S,
    ) -> JobInfo:
        """Follow one job on the log until it is done (``until="done"``: finished, rejected
        or inadmissible) or admitted (``until="admitted"``); returns its last state.

        ``on_change`` is called with every new state, position or reason. Raises
        ``WaitTimeout`` (carrying the last state) when ``timeout`` seconds pass first, and
        ``NotFound`` when the job is deleted meanwhile, or when Usher has still not seen it
        ``grace`` seconds after the wait began (a job just created reaches the log
        within that grace; a misspelt one never does).
        """
        key = _key(job, namespace)
        try:
            found = await self._follow(
                [key], until=until, timeout=timeout, on_change=on_change, grace=grace
            )
        except _TimedOut as late:
            latest = late.latest.get(key)
            raise WaitTimeout(
                f"job {key} is still {latest.state if latest else 'not seen by Usher'}"
                f" after {timeout:g}s",
                latest,
            ) from None
        return found[key]

    async def _follow(
        self,
        keys: list[str],
        *,
        until: str,
        timeout: float | None,  # noqa: ASYNC109 (the CLI's --timeout, by its name)
        on_change: Callable[[JobInfo], None] | None,
        grace: float,
        missing: list[str] | None = None,
    ) -> dict[str, JobInfo]:
        """Follow ``keys`` on the log until each is settled (done, or admitted with
        ``until="admitted"``); their last states. A job deleted meanwhile, or not seen within
        ``grace`` seconds, raises ``NotFound`` -- or, when ``missing`` is a list, is appended
        to it and no longer followed. Raises ``_TimedOut`` (the states so far) at ``timeout``.
        """
        if until not in ("done", "admitted"):
            raise BadInput(f"until must be 'done' or 'admitted', got {until!r}")
        js = await self.jetstream()
        try:
            state = await starting_point(js, self.subjects, self.target.engine)
            follower = await catch_up(state, js, self.subjects, timeout_s=self.timeout_s)
        except TimeoutError as exc:
            raise NotRunning(str(exc)) from exc
        deadline = None if timeout is None else time.monotonic() + timeout
        unknown_after = time.monotonic() + grace
        stop = asyncio.Event()
        watch = _Watch(state, on_change)
        open_keys = list(keys)
        try:
            batches = follower.batches(stop, idle_s=lambda: 0.5)
            while True:
                watch.reasons = None  # pending reasons: computed once per look, when needed
                for key in list(open_keys):
                    info = watch.look(key)
                    gone = None
                    if info is None and key in watch.latest:
                        gone = f"job {key} was deleted"
                    elif info is None and time.monotonic() >= unknown_after:
                        gone = f"no job {key} is known to Usher (not seen within {grace:g}s)"
                    if gone is not None:
                        if missing is None:
                            raise UnknownObject(gone)
                        missing.append(key)
                        watch.latest.pop(key, None)
                        open_keys.remove(key)
                    elif info is not None and (
                        info.done or (until == "admitted" and info.state == JobState.ADMITTED)
                    ):
                        open_keys.remove(key)
                if not open_keys:
                    return dict(watch.latest)
                if deadline is not None and time.monotonic() >= deadline:
                    raise _TimedOut(dict(watch.latest))
                batch = await anext(batches)
                for item in batch:
                    state.apply(item)
        finally:
            stop.set()
            await follower.stop()

    # ------------------------------------------------------------------ groups (fan-out)

    async def submit_each(
        self,
        fan_out: FanOut,
        request: JobRequest,
        *,
        group: str | None = None,
        check_namespace: bool = True,
        check_zone: bool = True,
        on_created: Callable[[Submitted], None] | None = None,
        parallel: int = 8,
    ) -> SubmittedGroup:
        """One suspended Job per value of ``fan_out`` (``for_each_day``, ``for_each``), all of
        one group (``group``, else the request's name, else generated): each named
        ``NAME-TAG``, labelled ``usher.io/group`` and ``usher.io/fan-out-value``, its value in
        the environment variable the fan-out names.

        Every job is built and checked before the first is sent (a bad value sends nothing).
        Up to ``parallel`` creates are in flight; ``on_created`` is called with each job the
        API accepted (progress). When one is refused, or the call is cancelled (Ctrl-C), no
        new create starts, those in flight finish, and ``GroupIncomplete`` says exactly which
        jobs were created and which were not.
        """
        name = group_name(group, request)
        members = member_requests(request, fan_out, name)
        manifests = [job_manifest(member) for member in members]
        await self._check_target(
            request.namespace if check_namespace else None,
            request.zone if check_zone else None,
        )
        created: dict[int, Submitted] = {}
        failures: list[ClientError] = []
        todo = iter(range(len(manifests)))
        stop = False

        async def worker() -> None:
            while not stop and not failures and (index := next(todo, None)) is not None:
                try:
                    created[index] = await self._create(manifests[index], JOB)
                except ClientError as exc:
                    failures.append(exc)
                    return
                if on_created is not None:
                    on_created(created[index])

        workers = [asyncio.ensure_future(worker()) for _ in range(max(1, parallel))]
        interrupted = False
        try:
            await asyncio.wait(workers)
        except asyncio.CancelledError:
            interrupted = stop = True
            await asyncio.wait(workers)  # the creates in flight finish: their outcome is known
        if interrupted or failures:
            keys = [f"{request.namespace}/{m.name}" for m in members]
            raise GroupIncomplete(
                name,
                [created[i].job for i in sorted(created)],
                [key for i, key in enumerate(keys) if i not in created],
                interrupted=interrupted,
                cause=failures[0] if failures else None,
            )
        return SubmittedGroup(group=name, jobs=[created[i] for i in range(len(manifests))])

    async def group_members(self, group: str, namespace: str | None = None) -> list[Submitted]:
        """The jobs of ``group`` the Kubernetes API has (label ``usher.io/group``), of every
        kind Usher admits, sorted by ``namespace/name``. ``BadInput`` for a ``group`` that is
        not a group name."""
        group = checked_group(group)
        kube = await self.kube()
        found: list[Submitted] = []
        for kind in _workload_kinds(None):
            try:
                listed = await kube.list(
                    kind.resource, namespace=namespace, label_selector=f"{GROUP_LABEL}={group}"
                )
            except NotFound:  # a kind this API does not serve
                continue
            except KubeError as exc:
                raise _kube_failure(exc, f"jobs of group {group}") from exc
            for item in listed.items:
                meta = item["metadata"]
                key = f"{meta.get('namespace', 'default')}/{meta['name']}"
                label = f"{kind.label}/{meta['name']}"
                found.append(Submitted(job=key, kind=kind.resource.kind, label=label))
        return sorted(found, key=lambda member: member.job)

    async def _member_keys(self, group: str, namespace: str | None) -> list[str]:
        members = await self.group_members(group, namespace)
        if not members:
            where = f" in namespace {namespace}" if namespace else ""
            raise UnknownObject(f"no job of group {group!r}{where} (label {GROUP_LABEL})")
        return [member.job for member in members]

    async def wait_group(
        self,
        group: str,
        namespace: str | None = None,
        *,
        until: str = "done",
        timeout: float | None = None,  # noqa: ASYNC109 (the CLI's --timeout, by its name)
        on_change: Callable[[JobInfo], None] | None = None,
        grace: float = UNKNOWN_GRACE_S,
    ) -> GroupResult:
        """``wait`` for every job of ``group`` at once; a ``GroupResult`` (its ``failed`` and
        ``missing`` say which did not succeed). ``NotFound`` when the group has no job;
        ``WaitTimeout`` (carrying the states so far) when ``timeout`` passes first."""
        keys = await self._member_keys(group, namespace)
        missing: list[str] = []
        try:
            found = await self._follow(
                keys,
                until=until,
                timeout=timeout,
                on_change=on_change,
                grace=grace,
                missing=missing,
            )
        except _TimedOut as late:
            done = sum(1 for j in late.latest.values() if j.done)
            raise WaitTimeout(
                f"group {group}: {len(keys) - done} of {len(keys)} jobs not done"
                f" after {timeout:g}s",
                GroupResult(group=group, jobs=list(late.latest.values()), missing=missing),
            ) from None
        return GroupResult(
            group=group, jobs=[found[k] for k in keys if k in found], missing=missing
        )

    async def delete_group(
        self,
        group: str,
        namespace: str | None = None,
        *,
        on_deleted: Callable[[Deleted], None] | None = None,
    ) -> list[Deleted]:
        """Delete every job of ``group`` (Usher releases their quota); ``on_deleted`` is
        called with each. ``NotFound`` when the group has no job."""
        members = await self.group_members(group, namespace)
        if not members:
            await self._member_keys(group, namespace)  # raises NotFound, worded once
        kube = await self.kube()
        deleted: list[Deleted] = []
        for member in members:
            ns, name = member.job.split("/", 1)
            kind = _workload_kinds(member.kind)[0]
            try:
                await kube.delete(kind.resource, ns, name)
            except NotFound:
                continue  # deleted meanwhile
            except KubeError as exc:
                raise _kube_failure(
                    exc,
                    f"{member.label} (deleted {len(deleted)} of {len(members)} of group {group})",
                ) from exc
            deleted.append(Deleted(job=member.job, kind=member.kind, label=member.label))
            if on_deleted is not None:
                on_deleted(deleted[-1])
        return deleted


class _TimedOut(Exception):
    """``_follow``'s timeout: the last states seen, for the caller's ``WaitTimeout``."""

    def __init__(self, latest: dict[str, JobInfo]) -> None:
        super().__init__("timed out")
        self.latest = latest


class _Watch:
    """What ``_follow`` has seen of each job, and telling ``on_change`` what is new."""

    def __init__(self, state: PeopleProjection, on_change: Callable[[JobInfo], None] | None):
        self.state = state
        self.on_change = on_change
        self.latest: dict[str, JobInfo] = {}
        self.signatures: dict[str, tuple[object, ...]] = {}
        self.reasons_at: dict[str, float] = {}
        self.reasons: Any = None

    def look(self, key: str) -> JobInfo | None:
        """The job now (a pending one's reason refreshed every ``REASON_EVERY_S`` or when it
        moved), ``on_change`` called when its state, position, reason or queue changed."""
        state = self.state
        info = state.job(key)
        latest = self.latest.get(key)
        if info is not None and info.state == JobState.PENDING:
            if (
                time.monotonic() - self.reasons_at.get(key, 0.0) >= REASON_EVERY_S
                or latest is None
                or (latest.state != JobState.PENDING or latest.position != info.position)
            ):
                self.reasons_at[key] = time.monotonic()
                if self.reasons is None:
                    self.reasons = state.pending_reasons(now_ms())
                info = state.job(key, None, self.reasons)
            else:
                info = msgspec.structs.replace(
                    info, reason=latest.reason, reason_code=latest.reason_code
                )
        if info is not None:
            self.latest[key] = info
            signature = (info.state, info.position, info.reason, info.queue)
            if signature != self.signatures.get(key):
                self.signatures[key] = signature
                if self.on_change is not None:
                    self.on_change(info)
        return info


def _workload_kinds(kind: str | None) -> list[Kind]:
    """The job kinds Usher admits (one per stored resource), or the one ``kind`` names."""
    kinds: dict[tuple[str, str], Kind] = {}
    for candidate in KINDS.values():
        if candidate.is_workload:
            kinds.setdefault(candidate.resource.storage, candidate)
    if kind is None:
        return list(kinds.values())
    wanted = kind.lower()
    chosen = [
        k
        for k in kinds.values()
        if wanted
        in (
            k.resource.kind.lower(),
            k.label,
            k.resource.plural,
            f"{k.resource.plural}.{k.resource.group}",
        )
    ]
    if not chosen:
        known = ", ".join(k.resource.kind for k in kinds.values())
        raise BadInput(f"kind {kind!r} is not a job kind Usher admits (kinds: {known})")
    return chosen


def _check_namespace(state: PeopleProjection, namespace: str) -> None:
    if state.tree is None:
        return
    taken = {ns for q in state.view(now_ms(), reasons_too=False).queues for ns in q.namespaces}
    if namespace not in taken:
        known = ", ".join(sorted(taken)) or "none"
        raise BadInput(
            f"namespace {namespace!r} belongs to no leaf of the quota tree, so no queue "
            f"takes its jobs (namespaces with a queue: {known})"
        )


def _check_zone(state: PeopleProjection, zone: str) -> None:
    served = state.engine.served_zones()
    # None served on the log at all: a log older than ZoneServed, nothing to check against.
    if served and zone not in served:
        raise BadInput(
            f"zone {zone!r} has no dequeuer, so nothing would ever admit the job "
            f"(served zones: {', '.join(served)})"
        )


def _zone_label(manifest: JsonObj) -> str | None:
    meta = manifest.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    zone = labels.get(ZONE_LABEL) if isinstance(labels, dict) else None
    return zone if isinstance(zone, str) else None


def _usage_window(
    by: str, since: datetime | None, until: datetime | None
) -> tuple[UsageBy, Millis | None, Millis | None]:
    """``usage``'s arguments checked: the grouping and the window in ms (naive means UTC)."""
    if by not in USAGE_BY:
        raise BadInput(f"by: {by!r} is not one of {', '.join(USAGE_BY)}")
    since_ms, until_ms = (
        datetime_ms(t if t.tzinfo is not None else t.replace(tzinfo=UTC)) if t else None
        for t in (since, until)
    )
    if since_ms is not None and until_ms is not None and since_ms > until_ms:
        raise BadInput(f"since: {since} is after until {until}")
    return UsageBy(by), since_ms, until_ms


def _key(job: str, namespace: str | None) -> str:
    if "/" in job:
        return job
    return f"{namespace or 'default'}/{job}"


# --------------------------------------------------------------------------- blocking client

SEE_ASYNC = "See ``AsyncClient.{name}``."
"""The docstring of a blocking twin unless it says more."""


def _blocking(
    method: Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]],
    doc: str | None = SEE_ASYNC,
) -> Callable[Concatenate[Client, P], T]:
    """The blocking twin of the ``AsyncClient`` coroutine ``method``: a ``Client`` method
    taking exactly its parameters (``P``: mypy checks every call against the async list, so
    the two cannot drift) that runs it on the client's own loop. ``help()`` and IDEs read the
    same parameters from its ``__signature__``; ``doc`` is its docstring (``{name}``: the
    method's name; None: none)."""

    def blocking(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(method(self._client, *args, **kwargs))

    name = method.__name__
    blocking.__name__ = name
    blocking.__qualname__ = f"Client.{name}"
    blocking.__doc__ = doc.format(name=name) if doc is not None else None
    blocking.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    return blocking


class Client:
    """Usher for blocking code and notebooks: the ``AsyncClient`` on a private event loop.

    ``with Client() as usher: usher.submit(...)``. Safe to use where an event loop already
    runs (Jupyter): calls go to the client's own loop in a background thread.
    """

    def __init__(
        self,
        target: Target | None = None,
        *,
        home: Path | None = None,
        kubeconfig: str | Path | None = None,
        nats_url: str | None = None,
        prefix: str | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        """Arguments as ``AsyncClient``'s: which installation, and how long a request may take."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="usher-client", daemon=True
        )
        self._thread.start()
        try:
            self._client = AsyncClient(
                target,
                home=home,
                kubeconfig=kubeconfig,
                nats_url=nats_url,
                prefix=prefix,
                timeout_s=timeout_s,
            )
        except BaseException:
            self._shutdown()
            raise

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the client's loop. On Ctrl-C (``KeyboardInterrupt`` in the
        caller's thread) it is cancelled and given time to wind down, and what it raises then
        (``GroupIncomplete``: what a fan-out created) is raised instead of the interrupt."""
        outcome: concurrent.futures.Future[T] = concurrent.futures.Future()

        async def settle() -> None:
            try:
                outcome.set_result(await coroutine)
            except BaseException as exc:
                outcome.set_exception(exc)

        running = asyncio.run_coroutine_threadsafe(settle(), self._loop)
        try:
            return outcome.result()
        except KeyboardInterrupt:
            running.cancel()
            try:
                outcome.result(timeout=self._client.timeout_s)
            except ClientError as exc:
                raise exc from None
            except BaseException:
                pass
            raise

    def _shutdown(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        self._loop.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._client.close())
        self._shutdown()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def target(self) -> Target:
        return self._client.target

    # Each verb is its ``AsyncClient`` twin run on the client's loop: one argument list, kept
    # by ``_blocking`` (for mypy through ``P``, for ``help()`` and IDEs through its signature).
    submit = _blocking(AsyncClient.submit)
    submit_manifest = _blocking(AsyncClient.submit_manifest)
    dry_run = _blocking(AsyncClient.dry_run)
    dry_run_job = _blocking(AsyncClient.dry_run_job)
    apply = _blocking(AsyncClient.apply, doc=None)
    apply_manifests = _blocking(AsyncClient.apply_manifests)
    delete = _blocking(AsyncClient.delete)
    list_jobs = _blocking(AsyncClient.list_jobs, doc=None)
    job = _blocking(AsyncClient.job, doc=None)
    queues = _blocking(AsyncClient.queues, doc=None)
    queue = _blocking(AsyncClient.queue, doc=None)
    quota = _blocking(AsyncClient.quota, doc=None)
    view = _blocking(AsyncClient.view, doc=None)
    usage = _blocking(AsyncClient.usage)
    budget = _blocking(AsyncClient.budget)
    order_hold = _blocking(AsyncClient.order_hold)
    wait = _blocking(
        AsyncClient.wait, doc="See ``AsyncClient.wait``; ``on_change`` runs on the client's thread."
    )
    submit_each = _blocking(
        AsyncClient.submit_each,
        doc="See ``AsyncClient.submit_each``; Ctrl-C raises ``GroupIncomplete`` (what was made).",
    )
    group_members = _blocking(AsyncClient.group_members)
    wait_group = _blocking(AsyncClient.wait_group)
    delete_group = _blocking(AsyncClient.delete_group)
