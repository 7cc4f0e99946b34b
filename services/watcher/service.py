"""The watcher service: all of Usher's Kubernetes I/O, in one process.

What it does: replays the log into its own projection (``projection``), then observes the
cluster (``observe``: priority classes, nodes and the quota tree first, then every job kind,
including the kinds it only rejects as unsupported) and publishes cluster events; once every job
kind has been listed it carries out decisions (``carry_out``) and, in an installation of several
clusters, says on the log whether its cluster answers (``fleet``, M1); all along it keeps Queue
objects and the tree's usage up to date (``status``), and tells each job that waits for a spent
budget once, counting per queue the jobs pending past their estimate (``waits``). It runs until
``ctx.stop`` is set; a task that dies of a bug takes the service down (to be restarted) rather
than leaving it half alive.
What it must never do: decide admissions (the dequeuers and the ledger do), publish before the
log is replayed, carry out a decision before it can see the workloads, or log credentials.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any

from schemas import DEFAULT_CLUSTER
from services.common.runtime import ServiceContext
from services.common.settings import SettingsError
from services.common.tasks import cancel_tasks
from services.watcher.carry_out import DecisionRunner
from services.watcher.deliveries import WebhookDeliveries
from services.watcher.fleet import LinkWatch, here, serve_cluster
from services.watcher.kinds import JOB_FAMILIES, UNSUPPORTED_FAMILIES
from services.watcher.objects import LastSeen
from services.watcher.observe import (
    ClusterView,
    LimitRangeObserver,
    NodeObserver,
    Observer,
    PriorityClassObserver,
    Publisher,
    QuotaTreeObserver,
    WorkloadObserver,
)
from services.watcher.options import WatcherOptions
from services.watcher.projection import WatcherProjection, follow_log
from services.watcher.status import StatusWriter
from services.watcher.waits import WaitWatch
from usher.adapters.kube import KubeClient
from usher.core.engine.facade import Engine


async def main(ctx: ServiceContext) -> None:
    """Run the watcher with production pacing until ``ctx.stop`` is set."""
    await run(ctx, WatcherOptions())


async def run(ctx: ServiceContext, options: WatcherOptions) -> None:
    """Run the watcher with ``options`` until ``ctx.stop`` is set."""
    kubeconfig = ctx.settings.kubeconfig
    if kubeconfig is None:
        raise SettingsError(
            "kubeconfig",
            "the watcher needs a kubeconfig: pass --kubeconfig or set USHER_KUBECONFIG "
            "(or KUBECONFIG)",
        )
    if ctx.settings.cluster is not None:
        zones = ctx.settings.clusters.get(ctx.settings.cluster, ())
        serve_cluster(ctx.settings.cluster, zones)  # before any task starts: each inherits it
    kube = await KubeClient.from_kubeconfig(kubeconfig)
    try:
        await Watcher(ctx, kube, options).run()
    finally:
        await kube.close()


class Watcher:
    """The watcher's tasks and the order they start in."""

    def __init__(self, ctx: ServiceContext, kube: KubeClient, options: WatcherOptions) -> None:
        self.ctx = ctx
        self.kube = kube
        self.options = options
        # The projection only answers queries: its zones filter does not matter.
        self.view = WatcherProjection.empty(Engine(ctx.settings.engine), ctx.subjects)
        self.cluster = ClusterView(objects=LastSeen(options.cached_objects))
        self.publisher = Publisher(ctx, self.view, options)
        args = (ctx, kube, self.publisher, self.view, self.cluster, options)
        # Another cluster than the default one (M1) says nothing of the tree and the
        # PriorityClasses (the default cluster's are in force) and keeps no Queue objects.
        self.worker = here() != DEFAULT_CLUSTER
        self.references: list[Observer] = [
            *([] if self.worker else [PriorityClassObserver(*args)]),
            NodeObserver(*args),
            *([] if self.worker else [QuotaTreeObserver(*args)]),
            LimitRangeObserver(*args),
        ]
        self.workloads: list[Observer] = [WorkloadObserver(f, *args) for f in JOB_FAMILIES]
        # Observed only to be rejected: decisions never wait for (nor act on) these kinds.
        self.unsupported: list[Observer] = [
            WorkloadObserver(f, *args) for f in UNSUPPORTED_FAMILIES
        ]
        url = ctx.settings.notify_url
        self.deliveries = WebhookDeliveries(ctx, url) if url else None
        self.decisions = DecisionRunner(
            ctx, kube, self.view, self.cluster, options, self.deliveries
        )
        self.status = StatusWriter(ctx, kube, self.view, self.cluster, options)
        self.waits = WaitWatch(ctx, kube, self.view, self.cluster, options, self.deliveries)
        self.link = LinkWatch(ctx, kube, options) if ctx.settings.cluster is not None else None
        self._tasks: list[asyncio.Task[None]] = []
        self.listed = asyncio.Event()
        """Every job kind listed, decisions flowing (the cluster is connected, M1)."""

    async def run(self) -> None:
        self.ctx.log.info("watcher starting", kubeconfig=str(self.ctx.settings.kubeconfig))
        try:
            self._start("log", follow_log(self.ctx, self.view, self.options))
            await self._tasks_running_until(self.view.synced)
            if self.ctx.stop.is_set():
                return
            # Right at the end of the replay: what the log shows then was told before.
            self._start("waits", self.waits.run())
            if self.link is not None:  # says connected once every job kind is listed (M1)
                self._start("link", self.link.run(self.listed))
            # Classes, nodes, the tree and LimitRanges first: jobs then land on a known tree
            # and read with their namespace's defaults (less churn).
            for observer in self.references:
                self._start(observer.name, observer.run())
            await self._tasks_running_until(*(o.attempted for o in self.references))
            for observer in [*self.workloads, *self.unsupported]:
                self._start(observer.name, observer.run())
            if not self.worker:
                self._start("status", self.status.run())
            # Decisions need every job kind listed: a workload not seen yet would look gone.
            await self._tasks_running_until(*(o.settled for o in self.workloads))
            if self.deliveries is not None:
                self._start("webhook", self.deliveries.run())
            self._start("decisions", self.decisions.run())
            self.listed.set()
            self.waits.may_tell.set()
            self.ctx.ready.set()  # every kind listed, decisions flowing: ready to serve
            await self._tasks_running_until()
        finally:
            await self._cancel_all()

    def _start(self, name: str, coroutine: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.create_task(coroutine, name=f"watcher-{name}"))

    async def _tasks_running_until(self, *events: asyncio.Event) -> None:
        """Wait for ``events`` (none: for the stop), failing fast if a task dies."""
        waiters = [asyncio.ensure_future(self.ctx.stop.wait())]
        goal = asyncio.ensure_future(_all_set(events)) if events else None
        try:
            while not self.ctx.stop.is_set() and (goal is None or not goal.done()):
                pending: set[asyncio.Future[Any]] = {*waiters, *self._tasks}
                if goal is not None:
                    pending.add(goal)
                await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                _raise_if_failed(self._tasks, stopping=self.ctx.stop.is_set())
        finally:
            for waiter in [*waiters, *([goal] if goal else [])]:
                waiter.cancel()

    async def _cancel_all(self) -> None:
        failures = await cancel_tasks(self._tasks)
        await self.publisher.close()
        for task, error in failures.items():
            self.ctx.log.error("task failed", task=task.get_name(), error=repr(error))
        self._tasks.clear()
        self.ctx.log.info("watcher stopped")


async def _all_set(events: Iterable[asyncio.Event]) -> None:
    for event in events:
        await event.wait()


def _raise_if_failed(tasks: list[asyncio.Task[None]], *, stopping: bool) -> None:
    """A task that died (or ended while the service runs) takes the service down."""
    for task in tasks:
        if task.done() and not task.cancelled():
            error = task.exception()
            if error is not None:
                raise error
            if not stopping:
                raise RuntimeError(f"{task.get_name()} ended before the service stopped")
