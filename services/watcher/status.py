"""Status for people: one ``Queue`` object per leaf, and usage on the ElasticQuotaTree.

What it does: from the watcher's projection of the log, keeps (rate-limited, at most once per
``status_interval_s``, and only writing what differs) one ``Queue``
(``scheduling.x-k8s.io/v1alpha1``) per leaf of the tree in force in namespace ``kube-queue``,
as kube-queue did: label ``create-by-kubequeue: "true"``, annotation
``kube-queue/quota-fullname: <leaf path>``, ``spec.queuePolicy`` (Round or Block) and
``status.queueItemDetails.active`` (the first ``queue_status_items`` pending workloads in
order, with position and priority; ``backoff`` stays empty) and ``status.pending`` (how many
wait in all). Queues of leaves that vanished are deleted (only ours, by label). The
ElasticQuotaTree whose spec is the tree in force gets ``status.used``: quota path -> resource ->
quantity in Kubernetes notation, for every node of the tree, through the status subresource
(or a plain merge patch when the CRD has none). Every ElasticQuotaTree gets the condition
``Accepted`` (metav1.Condition, with ``observedGeneration``): True once its spec is the tree in
force, False with reason ``InvalidSpec`` and every field path and error when it is invalid (the
previous tree stays in force); a tree newly found invalid also gets a ``Warning`` core/v1 Event,
as ``kubectl describe`` shows it. A valid tree not yet in force keeps its condition until the
log says so.
What it must never do: write before the log has been replayed (an empty projection would delete
every queue), touch Queue objects it did not create, or write when nothing changed; decide
whether a tree is valid (the translation did) or in force (the log says).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from datetime import UTC, datetime

from schemas import QueueName, QuotaNode, QuotaPath, object_name
from services.common.runtime import ServiceContext, wait_or_stop
from services.watcher.kinds import EVENTS, NAMESPACES, QUEUES, QUOTA_TREES
from services.watcher.notify import core_event
from services.watcher.observe import ClusterView, TreeObject
from services.watcher.options import WatcherOptions
from services.watcher.projection import WatcherProjection
from usher.adapters.kube import (
    AlreadyExists,
    JsonObj,
    KubeClient,
    KubeError,
    NotFound,
    merge_diff,
)
from usher.core.engine.facade import QueueEntry
from usher.core.model.quantity import format_quantity
from usher.core.rules.holds import HoldRecord, hold_over
from usher.core.tree.quota_tree import iter_nodes, leaf_paths, leaf_queue_name

QUEUE_NAMESPACE = "kube-queue"
CREATED_BY_LABEL = "create-by-kubequeue"
QUOTA_ANNOTATION = "kube-queue/quota-fullname"
OURS = f"{CREATED_BY_LABEL}=true"
ACCEPTED = "Accepted"
INVALID_SPEC = "InvalidSpec"


# --------------------------------------------------------------------------- what it should be


def queue_manifest(
    name: QueueName,
    leaf: QuotaPath,
    policy: str,
    entries: list[QueueEntry],
    pending: int,
    hold: HoldRecord | None = None,
) -> JsonObj:
    """The Queue object of one leaf, status included: ``entries`` (its first pending workloads)
    in ``queueItemDetails.active``, how many wait in all in ``pending``, and ``hold`` only
    while a node on its path is held or drained (R14/R15): the node, who, when and why."""
    active = []
    for entry in entries:
        namespace, job = object_name(entry.job)
        active.append(
            {"name": job, "namespace": namespace, "position": entry.position,
             "priority": entry.priority}
        )  # fmt: skip
    return {
        "apiVersion": QUEUES.api_version,
        "kind": QUEUES.kind,
        "metadata": {
            "name": name,
            "namespace": QUEUE_NAMESPACE,
            "labels": {CREATED_BY_LABEL: "true"},
            "annotations": {QUOTA_ANNOTATION: leaf},
        },
        "spec": {"queuePolicy": policy},
        "status": {
            "queueItemDetails": {"active": active, "backoff": []},
            "pending": pending,
            **({"hold": hold.pending_reason().message} if hold is not None else {}),
        },
    }


def desired_queues(
    tree: QuotaNode | None,
    queues: dict[QueueName, list[QueueEntry]],
    policy: str,
    counts: dict[QueueName, tuple[int, int]] | None = None,
    holds: Mapping[QuotaPath, HoldRecord] | None = None,
) -> dict[str, JsonObj]:
    """One Queue per leaf of the tree in force (none without a tree). ``counts``: each
    queue's (pending, admitted) when ``queues`` holds only the first entries of each;
    ``holds``: the holds in force by node (R14/R15)."""
    if tree is None:
        return {}
    out: dict[str, JsonObj] = {}
    for path, leaf in leaf_paths(tree).items():
        name = leaf_queue_name(path, leaf)
        entries = queues.get(name, [])
        pending = counts[name][0] if counts is not None and name in counts else len(entries)
        hold = hold_over(holds, path) if holds else None
        out[name] = queue_manifest(name, path, policy, entries, pending, hold)
    return out


def tree_usage(tree: QuotaNode, used: dict[QuotaPath, dict[str, int]]) -> JsonObj:
    """``status.used`` of a tree: every node's usage in Kubernetes notation, in tree order."""
    return {
        path: {r: format_quantity(r, amount) for r, amount in sorted(used.get(path, {}).items())}
        for path, _, _ in iter_nodes(tree)
    }


def accepted(tree: TreeObject, in_force: QuotaNode | None) -> tuple[bool, str, str] | None:
    """``(status, reason, message)`` of the tree's ``Accepted`` condition; None while a valid
    tree is not (yet) the one in force: the log has not said it, so nothing is claimed."""
    if tree.root is None:
        problems = "; ".join(f"{e.path}: {e.message}" for e in tree.errors)
        return False, INVALID_SPEC, f"{problems}; the previous tree stays in force"
    if tree.root == in_force:
        return True, "Applied", "the tree is in force"
    return None


def with_condition(
    conditions: object, kind: str, value: tuple[bool, str, str], generation: int, now: str
) -> list[JsonObj]:
    """``conditions`` with ``kind`` set; ``lastTransitionTime`` moves only when status does."""
    given = [c for c in conditions if isinstance(c, dict)] if isinstance(conditions, list) else []
    true, reason, message = value
    status = "True" if true else "False"
    before = next((c for c in given if c.get("type") == kind), None)
    since = before.get("lastTransitionTime") if before and before.get("status") == status else None
    condition = {
        "type": kind,
        "status": status,
        "observedGeneration": generation,
        "lastTransitionTime": since or now,
        "reason": reason,
        "message": message,
    }
    return [condition if c is before else c for c in given] if before else [*given, condition]


def newly_rejected(before: object, after: list[JsonObj]) -> JsonObj | None:
    """The ``Accepted=False`` condition of ``after`` when ``before`` did not already say it
    for that generation (one Event per rejected generation, across restarts)."""
    new = next((c for c in after if c.get("type") == ACCEPTED), None)
    if new is None or new.get("status") != "False":
        return None
    old = [c for c in before if isinstance(c, dict)] if isinstance(before, list) else []
    said = any(
        c.get("type") == ACCEPTED
        and c.get("status") == "False"
        and c.get("observedGeneration") == new["observedGeneration"]
        for c in old
    )
    return None if said else new


def rejection_event(tree: TreeObject, condition: JsonObj, now: datetime) -> JsonObj:
    """A core/v1 ``Warning`` Event about the tree, as a controller records one."""
    involved = {
        "apiVersion": QUOTA_TREES.api_version,
        "kind": QUOTA_TREES.kind,
        "namespace": tree.namespace,
        "name": tree.name,
        "uid": tree.uid,
    }
    return core_event(
        involved,
        kind="Warning",
        reason=condition["reason"],
        message=condition["message"],
        now=now,
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _owned_part(obj: JsonObj) -> JsonObj:
    """What of a Queue's main resource we set (labels and annotations of others are kept)."""
    meta = obj.get("metadata") or {}
    return {
        "metadata": {
            "labels": meta.get("labels") or {},
            "annotations": meta.get("annotations") or {},
        },
        "spec": obj.get("spec") or {},
    }


# --------------------------------------------------------------------------- the writer


class StatusWriter:
    """Keeps Queue objects and the tree's usage in line with the projection."""

    def __init__(
        self,
        ctx: ServiceContext,
        kube: KubeClient,
        view: WatcherProjection,
        cluster: ClusterView,
        options: WatcherOptions,
    ) -> None:
        self.ctx = ctx
        self.kube = kube
        self.view = view
        self.cluster = cluster
        self.options = options
        self.queues: dict[str, JsonObj] | None = None
        """Our Queue objects as last read or written; None until listed."""
        self._status_via_main = False
        self._queues_missing = False
        self.log = ctx.log.bind(task="status")

    async def run(self) -> None:
        """Write status until cancelled; never before the log has been replayed."""
        await self.view.synced.wait()
        loop = asyncio.get_running_loop()
        backoff = self.options.backoff()
        resync_at = loop.time()
        while True:
            if loop.time() >= resync_at:
                self.queues = None  # list again: repairs what others changed or deleted
                resync_at = loop.time() + self.options.queue_resync_s
            self.view.projection.changed.clear()
            self.cluster.changed.clear()
            try:
                await self.write_once()
                backoff.reset()
            except KubeError as exc:
                self.log.warning("status not written", error=type(exc).__name__, detail=exc.message)
                self.queues = None
                await asyncio.sleep(backoff.next_delay())
            # Rate limit, then sleep until something changes (or it is time to resync).
            if await wait_or_stop(self.ctx.stop, self.ctx.settings.status_interval_s):
                return
            await self._until_changed(max(resync_at - loop.time(), 0.0))

    async def _until_changed(self, limit_s: float) -> None:
        waiters = {
            asyncio.ensure_future(self.view.projection.changed.wait()),
            asyncio.ensure_future(self.cluster.changed.wait()),
            asyncio.ensure_future(self.ctx.stop.wait()),
        }
        try:
            await asyncio.wait(waiters, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def write_once(self) -> None:
        """One pass: queues first, then the tree's usage."""
        engine = self.view.projection.engine
        head = self.options.queue_status_items
        desired = desired_queues(
            self.view.tree,
            engine.queues(head),
            engine.config.policy,
            engine.queue_counts(),
            engine.holds_in_force(),
        )
        try:
            await self._write_queues(desired)
        except NotFound as exc:
            # Only the list can say NotFound here: the Queue CRD is not installed. The tree's
            # usage is still worth writing; queues are tried again on the next pass.
            if not self._queues_missing:
                self.log.warning("Queue objects cannot be written", detail=exc.message)
            self._queues_missing = True
        else:
            self._queues_missing = False
        usage = tree_usage(self.view.tree, engine.quota_used()) if self.view.tree else None
        for tree in list(self.cluster.trees.values()):
            await self._write_tree_status(tree, usage if tree.root == self.view.tree else None)

    # ------------------------------------------------------------------ queues

    async def _write_queues(self, desired: dict[str, JsonObj]) -> None:
        if self.queues is None:
            listed = await self.kube.list(QUEUES, namespace=QUEUE_NAMESPACE, label_selector=OURS)
            self.queues = {item["metadata"]["name"]: item for item in listed.items}
        for name, want in desired.items():
            await self._write_queue(name, want)
        for name in [n for n in self.queues if n not in desired]:
            with contextlib.suppress(NotFound):
                await self.kube.delete(QUEUES, QUEUE_NAMESPACE, name)
            del self.queues[name]
            self.log.info("queue deleted: its leaf is gone", queue=name)

    async def _write_queue(self, name: str, want: JsonObj) -> None:
        assert self.queues is not None
        current = self.queues.get(name)
        try:
            if current is None:
                current = await self._create_queue(want)
            main = merge_diff(_owned_part(current), _owned_part(want), prune=False)
            if main is not None:
                current = await self.kube.merge_patch(QUEUES, QUEUE_NAMESPACE, name, main)
            status = merge_diff(current.get("status") or {}, want["status"])
            if status is not None:
                current = await self.kube.merge_patch(
                    QUEUES, QUEUE_NAMESPACE, name, {"status": status}, subresource="status"
                )
        except NotFound:
            # Deleted behind our back: created again on the next pass.
            self.queues.pop(name, None)
            self.cluster.changed.set()
            return
        except KubeError as exc:
            if exc.transient:
                raise
            # Refused for good (an invalid name?): report it, keep the other queues going.
            self.log.warning("queue not written", queue=name, error=type(exc).__name__,
                             detail=exc.message)  # fmt: skip
            return
        self.queues[name] = current

    async def _create_queue(self, want: JsonObj) -> JsonObj:
        body = {k: v for k, v in want.items() if k != "status"}
        name = want["metadata"]["name"]
        try:
            created = await self.kube.create(QUEUES, QUEUE_NAMESPACE, body)
        except AlreadyExists:
            return await self.kube.get(QUEUES, QUEUE_NAMESPACE, name)
        except NotFound:
            # The kube-queue namespace does not exist yet: make it, then try once more.
            namespace = {"apiVersion": "v1", "kind": "Namespace"}
            with contextlib.suppress(AlreadyExists):
                await self.kube.create(
                    NAMESPACES, None, {**namespace, "metadata": {"name": QUEUE_NAMESPACE}}
                )
            created = await self.kube.create(QUEUES, QUEUE_NAMESPACE, body)
        self.log.info("queue created", queue=name)
        return created

    # ------------------------------------------------------------------ the tree

    async def _write_tree_status(self, tree: TreeObject, usage: JsonObj | None) -> None:
        """The tree's ``Accepted`` condition, and its usage when it is the tree in force."""
        status: JsonObj = {}
        used = merge_diff(tree.status.get("used") or {}, usage) if usage is not None else None
        if used is not None:
            status["used"] = used
        condition = accepted(tree, self.view.tree)
        conditions: list[JsonObj] = []
        if condition is not None:
            before = tree.status.get("conditions")
            conditions = with_condition(before, ACCEPTED, condition, tree.generation, _now())
            if conditions != before:
                status["conditions"] = conditions
        if not status:
            return
        rejected = newly_rejected(tree.status.get("conditions"), conditions)
        body = {"status": status}
        try:
            written = await self._patch_tree_status(tree, body)
        except NotFound:
            return  # the tree was deleted meanwhile; its watch will say so
        except KubeError as exc:
            if exc.transient:
                raise
            self.log.warning("tree status not written", quota=f"{tree.namespace}/{tree.name}",
                             error=type(exc).__name__, detail=exc.message)  # fmt: skip
            return
        written_status = written.get("status")
        tree.status = written_status if isinstance(written_status, dict) else {}
        if rejected is not None:
            await self._record_event(tree, rejected)

    async def _record_event(self, tree: TreeObject, condition: JsonObj) -> None:
        """Best effort, as a controller's event recorder: a lost Event loses no state (the
        condition says it), so a refusal is logged and not retried."""
        try:
            event = rejection_event(tree, condition, datetime.now(UTC))
            await self.kube.create(EVENTS, tree.namespace, event)
        except KubeError as exc:
            self.log.warning("event not recorded", quota=f"{tree.namespace}/{tree.name}",
                             error=type(exc).__name__, detail=exc.message)  # fmt: skip

    async def _patch_tree_status(self, tree: TreeObject, body: JsonObj) -> JsonObj:
        if not self._status_via_main:
            try:
                return await self.kube.merge_patch(
                    QUOTA_TREES, tree.namespace, tree.name, body, subresource="status"
                )
            except NotFound:
                # Either the tree is gone (this raises NotFound again) or its CRD has no
                # status subresource, and status is then part of the main resource.
                await self.kube.get(QUOTA_TREES, tree.namespace, tree.name)
                self._status_via_main = True
                self.log.info("the ElasticQuotaTree CRD has no status subresource")
        return await self.kube.merge_patch(QUOTA_TREES, tree.namespace, tree.name, body)
