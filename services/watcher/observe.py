"""Observe the cluster: list + watch each resource type and publish what changed on the log.

What it does: one ``Observer`` task per resource type (every supported job kind, the job kinds
Usher rejects as unsupported, Node, PriorityClass, ElasticQuotaTree, LimitRange). Each lists
(finding which served version to use), publishes an event per object that says something new,
publishes the deletion of objects the log holds live but the list no longer has (deleted while the
watcher was down, or during a watch gap), then watches from the list's resourceVersion, resuming
from the last version seen after each watch ends, listing again after 410 Gone, and reconnecting
with capped, jittered exponential backoff after any failure. Publishing retries until NATS takes
the event; it is pipelined (``Publisher``: many in flight, each object's events in order).
It also keeps the ``ClusterView`` (which resource each live workload is, the quota tree
objects, each namespace's LimitRange defaults, each live job's last object) that carrying
out decisions, writing status and
reading jobs need. A job reads with its namespace's LimitRange defaults for the containers that
declare nothing; one that still requests nothing is rejected unless its branch of the tree says
``usher.io/allow-zero-requests: "true"``. Second line behind the admission webhook: a managed job
(its namespace or quota label is mapped by the tree in force) found running without a live ledger
admission is suspended and rejected with ``not-admitted``. An admitted job's pod counts (its
kind's ``PodReader``) are published as ``WorkloadProgress`` when they change and a ready
timeout (R10) is in force where it runs (nothing else decides on them, and an entry per
admitted job costs every consumer); a failed job's
pods are listed once (by its label) for its containers' terminations; a job that succeeded by
its ``usher.io/min-success`` is suspended, which stops its remaining pods.
What it must never do: publish an event the log already says (a status write of our own must
not become an event), drop an event because NATS is down, stop watching a kind because of
one bad object, or let a job run that the ledger did not admit.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from nats.js.api import PubAck

from schemas import (
    ClusterEvent,
    ContainerTermination,
    Envelope,
    FieldError,
    Millis,
    NodeObserved,
    NodeRemoved,
    PriorityClassDeleted,
    PriorityClassObserved,
    QuotaNode,
    QuotaTreeDeleted,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    WorkloadProgress,
    WorkloadRejected,
    Zone,
    ZoneServed,
)
from services.common.runtime import ServiceContext
from services.common.tasks import cancel_tasks
from services.watcher.fleet import object_of, ours, zone_here
from services.watcher.kinds import (
    LIMIT_RANGES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    QUOTA_TREES,
    JobFamily,
    container_defaults,
    controlled_by_workload,
    family_of_kind,
    suspend_flag,
    suspend_patch,
)
from services.watcher.objects import LastSeen
from services.watcher.options import WatcherOptions, retrying
from services.watcher.projection import WatcherProjection
from services.watcher.translate import (
    Identity,
    Outgoing,
    container_terminations,
    event_tag,
    identity,
    node_observed,
    node_removed,
    priority_class_deleted,
    priority_class_observed,
    priority_class_problems,
    tree_deleted,
    tree_event,
    workload_deleted,
    workload_event,
    workload_gone,
    workload_progress,
    workload_unadmitted,
)
from usher.adapters.kube import (
    Conflict,
    JsonObj,
    KubeClient,
    KubeError,
    ListResult,
    NotFound,
    Permanent,
    Resource,
    WatchExpired,
)
from usher.adapters.nats.log import publish_envelope
from usher.core.intake.workload import QUOTA_LABEL, ZONE_LABEL, with_container_defaults
from usher.core.protocol.subjects import WATCHER_SOURCE
from usher.core.tree.quota_tree import (
    ALLOW_ZERO_REQUESTS_ATTRIBUTE,
    inherited_attribute,
    mapped_branch,
)

SOURCE = WATCHER_SOURCE
HEALTHY_WATCH_S = 1.0
"""A watch that lasted this long (or delivered anything) proves the connection healthy."""


# --------------------------------------------------------------------------- shared views


@dataclass
class TreeObject:
    """An ElasticQuotaTree as last seen in the cluster."""

    namespace: str
    name: str
    root: QuotaNode | None
    """None when the tree is invalid."""
    status: JsonObj
    uid: str = ""
    generation: int = 0
    """``metadata.generation``: what ``status.conditions[].observedGeneration`` refers to."""
    errors: list[FieldError] = field(default_factory=list)
    """Why the tree is invalid (empty when it is valid)."""


@dataclass
class ClusterView:
    """What the observers last saw, for the decision runner and the status writer."""

    workloads: dict[WorkloadKey, Resource] = field(default_factory=dict)
    trees: dict[tuple[str, str], TreeObject] = field(default_factory=dict)
    limit_ranges: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    """Container defaults of each LimitRange, by (namespace, name)."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    objects: LastSeen = field(default_factory=LastSeen)
    """Each live, unfinished workload's last object: decisions patch it without a GET."""

    def forget_workload(self, key: WorkloadKey, resource: Resource) -> None:
        """The workload (of ``resource``) is gone from the cluster: forget all about it."""
        known = self.workloads.get(key)
        if known is not None and known.storage == resource.storage:
            del self.workloads[key]
            self.objects.drop(key)

    def container_defaults(self, namespace: str) -> dict[str, str]:
        """The namespace's LimitRange defaults (several: the first by name wins a resource)."""
        merged: dict[str, str] = {}
        for (ns, _), defaults in sorted(self.limit_ranges.items()):
            if ns == namespace:
                merged = {**defaults, **merged}
        return merged


# --------------------------------------------------------------------------- publishing


class Publisher:
    """Publishes cluster events the log does not say yet, and records them as said.

    Pipelined: ``publish`` sends and returns; the ack is awaited beside the caller, so many
    publishes are in flight at once and nats-py writes them to the socket together (one
    awaited publish each made its flusher write one packet per event). What the protocol
    needs of the order is kept: the events about one object (a workload, a node, a class,
    the tree) are published one after the other, the next sent only once the log holds the
    one before (a publish retried through a NATS restart can then never land behind a later
    one), and ``settle`` waits for everything in flight (a relist is complete only once the
    log says all of it). Each event keeps its ``Nats-Msg-Id``: a publish retried after its
    ack was lost is dropped by the server, never doubled. At most
    ``options.publishes_in_flight`` events are unacknowledged at once.
    """

    def __init__(
        self, ctx: ServiceContext, view: WatcherProjection, options: WatcherOptions
    ) -> None:
        self._ctx = ctx
        self._view = view
        self._options = options
        self._in_flight: dict[tuple[str, str], asyncio.Task[None]] = {}
        """The last publish of each object (``_about``) not acknowledged yet."""
        self._room = asyncio.Semaphore(options.publishes_in_flight)

    async def publish(
        self, out: Outgoing, log: Any, when: Callable[[ClusterEvent], bool] | None = None
    ) -> bool:
        """Publish ``out`` unless the log already says it (or ``when`` says no, asked once
        the log holds what was published before about the same object); True when it is
        being published."""
        about = _about(out.event)
        earlier = self._in_flight.get(about)
        if earlier is not None:
            await asyncio.wait([earlier])
        if (when is not None and not when(out.event)) or not self._view.is_news(out.event):
            return False
        envelope = Envelope(id=out.id, time=datetime.now(UTC), source=SOURCE, event=out.event)
        await self._room.acquire()
        task = asyncio.create_task(self._publish(out, envelope, log), name=f"publish {out.id}")
        self._in_flight[about] = task
        task.add_done_callback(functools.partial(self._landed, about))
        return True

    @property
    def unacknowledged(self) -> int:
        """How many objects have a publish on its way (sent, not acknowledged yet)."""
        return len(self._in_flight)

    async def settle(self) -> None:
        """Wait until the log holds everything published so far."""
        while self._in_flight:
            await asyncio.wait(list(self._in_flight.values()))

    async def close(self) -> None:
        """Stop waiting for acks (the service stops: what was not acknowledged is published
        again after the restart's relist, since the log does not say it)."""
        await cancel_tasks(list(self._in_flight.values()))

    async def _publish(self, out: Outgoing, envelope: Envelope, log: Any) -> None:
        async def publish() -> PubAck:
            return await publish_envelope(self._ctx.js, out.subject, envelope)

        # Never drop an observation: the log is the only record of it.
        ack = await retrying(publish, f"publishing {out.id}", log, self._options)
        self._view.record(out.event)
        log.debug("published", type=event_tag(out.event), id=out.id, duplicate=ack.duplicate)

    def _landed(self, about: tuple[str, str], task: asyncio.Task[None]) -> None:
        self._room.release()
        if self._in_flight.get(about) is task:
            del self._in_flight[about]
        if not task.cancelled() and task.exception() is not None:
            # As a handler's bug (``Observer._guarded``): one object's trouble is logged and
            # stops nothing else.
            self._ctx.log.error(
                "observation not published", about=about, error=repr(task.exception())
            )


def _about(event: ClusterEvent) -> tuple[str, str]:
    """The object ``event`` is about: events about one object keep their order on the log."""
    match event:
        case (
            WorkloadObserved()
            | WorkloadFinished()
            | WorkloadProgress()
            | WorkloadDeleted()
            | WorkloadRejected()
        ):
            return "workload", event.workload
        case NodeObserved() | NodeRemoved():
            return "node", event.node
        case PriorityClassObserved() | PriorityClassDeleted():
            return "priority-class", event.name
        case ZoneServed():
            return "zone", event.zone
    return "quota-tree", ""


# --------------------------------------------------------------------------- the loop


class NotServed(Exception):
    """None of the versions of a resource is served (its CRD is not installed)."""


class Observer(ABC):
    """List, then watch, one resource type; publish what it says about the cluster."""

    def __init__(
        self,
        ctx: ServiceContext,
        kube: KubeClient,
        publisher: Publisher,
        view: WatcherProjection,
        cluster: ClusterView,
        options: WatcherOptions,
    ) -> None:
        self.ctx = ctx
        self.kube = kube
        self.publisher = publisher
        self.view = view
        self.cluster = cluster
        self.options = options
        self.resource: Resource | None = None
        self.settled = asyncio.Event()
        """Set after the first successful list, or once the kind turned out not served."""
        self.attempted = asyncio.Event()
        """Set after the first list attempt, whatever its outcome."""
        self.log = ctx.log.bind(resource=self.name)

    @property
    @abstractmethod
    def candidates(self) -> list[Resource]:
        """Versions to try, preferred first."""

    @property
    def name(self) -> str:
        first = self.candidates[0]
        return f"{first.plural}.{first.group}" if first.group else first.plural

    async def run(self) -> None:
        """Observe until cancelled."""
        # The series exists from the start at 0, so that its first reconnects count in
        # Prometheus' increase() (a counter first seen at 3 has increased by nothing).
        self.ctx.metrics.watch_reconnects.labels(self.name)
        backoff = self.options.backoff()
        version: str | None = None
        while True:
            try:
                if version is None:
                    version = await self._first_or_next_list()
                started = asyncio.get_running_loop().time()
                version, delivered = await self._watch(version)
                lasted = asyncio.get_running_loop().time() - started
                if delivered or lasted >= HEALTHY_WATCH_S:
                    backoff.reset()
                else:
                    # A watch that ends at once with nothing in it (a proxy cutting streams):
                    # do not hammer the server with new ones.
                    self.ctx.metrics.watch_reconnects.labels(self.name).inc()
                    await asyncio.sleep(backoff.next_delay())
            except WatchExpired as exc:
                self.log.info("watch expired, listing again", detail=exc.message)
                version = None
            except NotServed:
                self._report_not_served()
                await asyncio.sleep(self.options.not_served_retry_s)
            except KubeError as exc:
                self.ctx.metrics.watch_reconnects.labels(self.name).inc()
                delay = backoff.next_delay()
                self.log.warning(
                    "list/watch failed, reconnecting", error=type(exc).__name__,
                    code=exc.code, detail=exc.message, retry_in_s=round(delay, 2),
                )  # fmt: skip
                if isinstance(exc, NotFound):
                    self.resource = None  # the resource went away: find a served version again
                    version = None
                elif isinstance(exc, Permanent) and version is None:
                    # Not allowed to list this kind (RBAC?): keep trying, but do not hold up
                    # decisions for every other kind on it.
                    self.settled.set()
                await asyncio.sleep(delay)

    async def _first_or_next_list(self) -> str:
        try:
            return await self._relist()
        finally:
            self.attempted.set()

    def _report_not_served(self) -> None:
        # Settled: nothing of this kind can exist, so nothing to wait for.
        if not self.settled.is_set():
            self.log.info("not served by the API server; looking again now and then")
        self.settled.set()

    async def _relist(self) -> str:
        resource, result = await self._list()
        present: set[tuple[str, str]] = set()
        for obj in result.items:
            who = identity(obj)
            present.add((who.namespace, who.name))
            await self._guarded(self.on_present, resource, obj)
        # What is gone is judged against a log that holds everything the list said.
        await self.publisher.settle()
        await self.after_relist(resource, present)
        await self.publisher.settle()
        self.settled.set()
        self.log.info("listed", count=len(result.items), version=result.resource_version)
        return result.resource_version

    async def _list(self) -> tuple[Resource, ListResult]:
        candidates = [self.resource] if self.resource is not None else self.candidates
        for resource in candidates:
            try:
                result = await self.kube.list(resource)
            except NotFound:
                continue
            self.resource = resource
            return resource, result
        self.resource = None
        raise NotServed()

    async def _watch(self, version: str) -> tuple[str, int]:
        """Follow one watch to its end: the last version seen and how many events came."""
        resource = self.resource
        assert resource is not None
        events = self.kube.watch(
            resource, resource_version=version, timeout_s=self.options.watch_timeout_s
        )
        delivered = 0
        async with contextlib.aclosing(events) as stream:
            async for event in stream:
                delivered += 1
                if event.type == "DELETED":
                    await self._guarded(self.on_deleted, resource, event.object)
                elif event.type != "BOOKMARK":
                    await self._guarded(self.on_present, resource, event.object)
                version = event.resource_version or version
        return version, delivered

    async def _guarded(self, handler: Any, resource: Resource, obj: JsonObj) -> None:
        """One object's trouble must not stop the watch of all the others."""
        try:
            await handler(resource, obj)
        except KubeError:
            raise
        except Exception as exc:
            who = identity(obj)
            self.log.error(
                "object not handled", namespace=who.namespace, name=who.name, error=repr(exc)
            )

    @abstractmethod
    async def on_present(self, resource: Resource, obj: JsonObj) -> None:
        """An object exists (listed, added or modified)."""

    @abstractmethod
    async def on_deleted(self, resource: Resource, obj: JsonObj) -> None:
        """An object was deleted (seen by the watch)."""

    @abstractmethod
    async def after_relist(self, resource: Resource, present: set[tuple[str, str]]) -> None:
        """After a complete list (``present``: namespace, name): account for what is gone."""


# --------------------------------------------------------------------------- kinds


class WorkloadObserver(Observer):
    """One job kind (batch Job, TFJob, ...). A kind Usher does not admit (XGBoostJob, ...) is
    published as rejected and deleted like any other, but never offered to carry out
    decisions: it stays out of ``ClusterView.workloads``."""

    def __init__(self, family: JobFamily, *args: Any) -> None:
        self.family = family
        super().__init__(*args)

    @property
    def candidates(self) -> list[Resource]:
        return self.family.candidates

    async def on_present(self, resource: Resource, obj: JsonObj) -> None:
        who = identity(obj)
        if controlled_by_workload(obj):
            # Part of a bigger workload (a JobSet's Jobs): its owner is what Usher admits.
            self.cluster.forget_workload(who.key, resource)
            return
        if self.family.supported:
            self.cluster.workloads[who.key] = resource
            if self.family.outcome(obj) is None:
                self.cluster.objects.put(who.key, resource, obj)
            else:
                self.cluster.objects.drop(who.key)  # finished: no decision patches it
        log = self.log.bind(workload=who.key)
        branch = self._branch(obj, who)
        if self.family.supported and branch is not None and self._runs_unadmitted(obj, who):
            await self._stop_unadmitted(resource, obj, log)
            return
        allowed = branch is not None and (
            inherited_attribute(branch, ALLOW_ZERO_REQUESTS_ATTRIBUTE) == "true"
        )
        effective = with_container_defaults(obj, self.cluster.container_defaults(who.namespace))
        assert isinstance(effective, dict)
        out = workload_event(
            resource, self.family, effective, self.ctx.subjects, zero_requests_allowed=allowed
        )
        if _failed(out) and self.view.is_news(out.event):
            terminations = await self._terminations(obj)
            out = workload_event(
                resource, self.family, effective, self.ctx.subjects,
                zero_requests_allowed=allowed, terminations=terminations,
            )  # fmt: skip
        if await self.publisher.publish(out, log) and isinstance(out.event, WorkloadRejected):
            log.warning(
                "workload rejected", errors=[f"{e.path}: {e.message}" for e in out.problems]
            )
        if isinstance(out.event, WorkloadFinished) and out.event.min_success is not None:
            await self._stop_the_rest(resource, obj, out.event.min_success, log)
        elif (
            isinstance(out.event, WorkloadObserved)
            and self.view.admitted(who.key)
            and self.view.watches_readiness(who.key)
        ):
            await self._report_progress(resource, obj, log)

    async def _terminations(self, obj: JsonObj) -> list[ContainerTermination]:
        """How the failed job's containers ended, from its pods (one list, by its pods' label).
        A transient failure is retried with the watch (the finish is not said yet); none when
        its kind's pods are not known or reading them is refused for good (RBAC): the finish
        itself must not wait for them."""
        reader = self.family.pods
        selector = reader.selector(obj) if reader is not None else None
        if selector is None:
            return []
        who = identity(obj)
        try:
            pods = await self.kube.list(PODS, namespace=who.namespace, label_selector=selector)
        except KubeError as exc:
            if exc.transient:
                raise
            self.log.warning("pods not read", workload=who.key, error=type(exc).__name__,
                             detail=exc.message)  # fmt: skip
            return []
        return container_terminations(self.family, obj, pods.items)

    async def _report_progress(self, resource: Resource, obj: JsonObj, log: Any) -> None:
        """Publish the admitted job's pod counts when they changed; nothing before the first
        pod got anywhere (a new admission starts from zero anyway)."""
        now = Millis(int(datetime.now(UTC).timestamp() * 1000))
        out = workload_progress(resource, self.family, obj, self.ctx.subjects, now)
        if out is None or not isinstance(out.event, WorkloadProgress):
            return
        await self.publisher.publish(out, log, when=self._progress_worth_saying)

    def _progress_worth_saying(self, event: ClusterEvent) -> bool:
        assert isinstance(event, WorkloadProgress)
        nothing_yet = event.ready == event.succeeded == event.failed == 0
        return not nothing_yet or self.view.progress_started(event.workload)

    async def _stop_the_rest(
        self, resource: Resource, obj: JsonObj, min_success: int, log: Any
    ) -> None:
        """A job that succeeded by its minSuccess: stop the pods still running.

        Suspending is how a cluster operator stops a Job's remaining pods and keeps the rest:
        its controller removes the running pods, the succeeded ones stay with their logs, and
        the object stays for whoever reads its results. Deleting pods would not do (the Job
        controller replaces them), deleting the Job would lose what it did, and its status
        (``Complete``) belongs to its controller. (A Job's own ``spec.successPolicy`` needs
        none of this: the Job controller completes it and removes the rest itself.)"""
        if suspend_flag(self.family, obj) or not self.family.active(obj):
            return
        patch = suspend_patch(self.family, obj)
        if patch is None:
            return
        who = identity(obj)
        try:
            await self.kube.merge_patch(resource, who.namespace, who.name, patch)
        except (Conflict, NotFound):
            return  # changed or gone meanwhile: the next watch event looks again
        log.info("succeeded by its minSuccess: remaining pods stopped", min_success=min_success)

    def _branch(self, obj: JsonObj, who: Identity) -> list[QuotaNode] | None:
        """The tree's nodes root..leaf that take this job; None when it is not managed."""
        if self.view.tree is None:
            return None
        labels = _mapping(_mapping(obj.get("metadata")).get("labels"))
        quota = labels.get(QUOTA_LABEL)
        quota_name = quota if isinstance(quota, str) and quota else None
        return mapped_branch(self.view.tree, who.namespace, quota_name)

    def _runs_unadmitted(self, obj: JsonObj, who: Identity) -> bool:
        running = not suspend_flag(self.family, obj) and self.family.outcome(obj) is None
        return running and not self.view.admitted(who.key)

    async def _stop_unadmitted(self, resource: Resource, obj: JsonObj, log: Any) -> None:
        """Suspend a job that bypassed the queue and say why on the log. A conflict or a job
        gone meanwhile needs nothing: the next watch event looks at it again."""
        patch = suspend_patch(self.family, obj)
        who = identity(obj)
        if patch is not None:
            try:
                await self.kube.merge_patch(resource, who.namespace, who.name, patch)
            except (Conflict, NotFound):
                return
        out = workload_unadmitted(resource, self.family, obj, self.ctx.subjects)
        if await self.publisher.publish(out, log):
            log.warning("running without admission: suspended", reason=out.problems[0].code)

    async def on_deleted(self, resource: Resource, obj: JsonObj) -> None:
        who = identity(obj)
        self.cluster.forget_workload(who.key, resource)
        out = workload_deleted(resource, obj, self.ctx.subjects)
        log = self.log.bind(workload=who.key)
        await self.publisher.publish(out, log, when=self.view.knows_live)

    async def after_relist(self, resource: Resource, present: set[tuple[str, str]]) -> None:
        for key in list(self.cluster.workloads):
            if object_of(key) not in present:
                self.cluster.forget_workload(key, resource)
        for key, said in list(self.view.workloads.items()):
            if family_of_kind(said.kind) is not self.family or not ours(key):
                continue  # another kind, or another cluster's (M1)
            if object_of(key) in present:
                continue
            out = workload_gone(key, said.kind, said.uid, said.zone, self.ctx.subjects)
            log = self.log.bind(workload=key)
            if await self.publisher.publish(out, log):
                log.info("workload gone while unobserved: deleted")


class NodeObserver(Observer):
    """Nodes: zone and allocatable."""

    @property
    def candidates(self) -> list[Resource]:
        return [NODES]

    async def on_present(self, resource: Resource, obj: JsonObj) -> None:
        if not zone_here(identity(obj).zone):
            return  # labelled with another cluster's zone (M1): not this cluster's to count
        out = node_observed(obj, self.ctx.subjects)
        log = self.log.bind(node=identity(obj).name)
        if await self.publisher.publish(out, log) and out.problems:
            log.warning(
                "node resources partly unreadable", errors=[e.message for e in out.problems]
            )

    async def on_deleted(self, resource: Resource, obj: JsonObj) -> None:
        out = node_removed(obj, self.ctx.subjects)
        if zone_here(identity(obj).zone):
            log = self.log.bind(node=identity(obj).name)
            await self.publisher.publish(out, log, when=self.view.knows_live)

    async def after_relist(self, resource: Resource, present: set[tuple[str, str]]) -> None:
        for name, said in list(self.view.nodes.items()):
            if ("", name) not in present and zone_here(said.zone):
                out = node_removed(_stub(name, said.zone), self.ctx.subjects, gone=True)
                await self.publisher.publish(out, self.log.bind(node=name))


class PriorityClassObserver(Observer):
    """PriorityClasses: name and value."""

    @property
    def candidates(self) -> list[Resource]:
        return [PRIORITY_CLASSES]

    async def on_present(self, resource: Resource, obj: JsonObj) -> None:
        out = priority_class_observed(obj, self.ctx.subjects)
        log = self.log.bind(priority_class=identity(obj).name)
        if out is None:
            problems = [e.message for e in priority_class_problems(obj)]
            log.warning("priority class unusable", errors=problems)
            return
        await self.publisher.publish(out, log)

    async def on_deleted(self, resource: Resource, obj: JsonObj) -> None:
        out = priority_class_deleted(obj, self.ctx.subjects)
        log = self.log.bind(priority_class=identity(obj).name)
        await self.publisher.publish(out, log, when=self.view.knows_live)

    async def after_relist(self, resource: Resource, present: set[tuple[str, str]]) -> None:
        for name in list(self.view.classes):
            if ("", name) not in present:
                out = priority_class_deleted(_stub(name), self.ctx.subjects, gone=True)
                await self.publisher.publish(out, self.log.bind(priority_class=name))


class QuotaTreeObserver(Observer):
    """ElasticQuotaTrees: applied when valid, rejected with every error otherwise."""

    @property
    def candidates(self) -> list[Resource]:
        return [QUOTA_TREES]

    async def on_present(self, resource: Resource, obj: JsonObj) -> None:
        who = identity(obj)
        out = tree_event(obj, self.ctx.subjects)
        root = getattr(out.event, "root", None)
        status = obj.get("status")
        generation = obj["metadata"].get("generation")
        self.cluster.trees[(who.namespace, who.name)] = TreeObject(
            who.namespace,
            who.name,
            root,
            status if isinstance(status, dict) else {},
            uid=who.uid,
            generation=generation if isinstance(generation, int) else 0,
            errors=list(out.problems),
        )
        self.cluster.changed.set()
        log = self.log.bind(quota=f"{who.namespace}/{who.name}")
        if await self.publisher.publish(out, log) and out.problems:
            log.warning(
                "quota tree rejected", errors=[f"{e.path}: {e.message}" for e in out.problems]
            )

    async def on_deleted(self, resource: Resource, obj: JsonObj) -> None:
        who = identity(obj)
        self.cluster.trees.pop((who.namespace, who.name), None)
        await self._announce(tree_deleted(obj, self.ctx.subjects))

    async def after_relist(self, resource: Resource, present: set[tuple[str, str]]) -> None:
        gone = [key for key in self.cluster.trees if key not in present]
        for namespace, name in gone:
            del self.cluster.trees[(namespace, name)]
            stub = {"metadata": {"namespace": namespace, "name": name}}
            await self._announce(tree_deleted(stub, self.ctx.subjects, gone=True))
        if not present and not gone and not self.view.tree_deleted:
            # Deleted while no watcher ran: the log still has a tree whose object is gone.
            await self._announce(tree_deleted({}, self.ctx.subjects, gone=True))

    async def _announce(self, out: Outgoing) -> None:
        """Say on the log that the tree object is gone. Nothing else changes: the last valid
        tree stays in force and admissions go on under it (README, "Admission rules")."""
        if self.view.tree is None:
            return  # no tree was ever in force: nothing to say
        deleted = out.event
        assert isinstance(deleted, QuotaTreeDeleted)
        log = self.log.bind(quota=f"{deleted.namespace}/{deleted.name}")
        if await self.publisher.publish(out, log):
            log.warning("quota tree deleted; the last valid tree stays in force")


class LimitRangeObserver(Observer):
    """LimitRanges: the container defaults jobs without requests are read with (not logged:
    they only change how a job reads, and the job's own event carries the result)."""

    @property
    def candidates(self) -> list[Resource]:
        return [LIMIT_RANGES]

    async def on_present(self, resource: Resource, obj: JsonObj) -> None:
        who = identity(obj)
        self.cluster.limit_ranges[(who.namespace, who.name)] = container_defaults(obj)

    async def on_deleted(self, resource: Resource, obj: JsonObj) -> None:
        who = identity(obj)
        self.cluster.limit_ranges.pop((who.namespace, who.name), None)

    async def after_relist(self, resource: Resource, present: set[tuple[str, str]]) -> None:
        for key in list(self.cluster.limit_ranges):
            if key not in present:
                del self.cluster.limit_ranges[key]


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _failed(out: Outgoing) -> bool:
    return isinstance(out.event, WorkloadFinished) and not out.event.succeeded


def _stub(name: str, zone: Zone | None = None) -> JsonObj:
    """The metadata of a cluster-scoped object known only from the log (it is gone)."""
    labels = {ZONE_LABEL: zone} if zone else {}
    return {"metadata": {"name": name, "labels": labels}}
