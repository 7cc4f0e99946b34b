"""The demo workload driver (see the package docstring).

What it does: ``DemoDriver.run(stop)`` applies the demo tree and PriorityClasses (when the
stack runs a burst zone, the tree again with it marked burst, and plays the burst story of
``usher.demo.burst``, Z3), then the tree again with the small budgeted leaf of
``usher.demo.budget`` and its story (B1) and, with fair share on, with the Teams of
``usher.demo.fairshare`` and its story (F1), plays kube-queue's walkthrough's three scenarios,
then a job that is OOMKilled and retried with more memory (R12, R13), then a gang whose pods
never become ready, requeued after Department-b's ready timeout (R10, turned on by applying the
demo tree again with it), then submits a steady, seeded-random mix of jobs until ``stop`` is
set, telling what it does through ``say``; every ``BURST_EVERY`` ticks a reclaim burst is due,
sent once the quota tree (``quota``) shows it can only be admitted by reclaiming.
What it must never do: raise for a job that already exists (a restart replays the script),
or keep submitting while more than ``max_backlog`` jobs wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from usher.client import AlreadyExists, AsyncClient, ClientError, QuotaInfo
from usher.client.manifests import JobRequest, job_manifest, read_yaml_documents
from usher.core.tree.budget_spec import BUDGETS_ATTRIBUTE as BUDGETS
from usher.core.tree.quota_tree import (
    READY_TIMEOUT_ATTRIBUTE,
    REQUEUE_BACKOFF_ATTRIBUTE,
    RETRY_LIMIT_ATTRIBUTE,
)
from usher.demo.budget import BudgetStory, budget_leaf
from usher.demo.burst import BurstStory, burst_attributes
from usher.demo.fairshare import FairShareStory, fair_share_nodes
from usher.demo.story import play_story
from usher.local.cluster import WALKTHROUGH_NAMESPACES
from usher.local.kube_emulator.playbook import NEVER_READY, OOM_BELOW

T = TypeVar("T")
DEMO_DIR = Path(__file__).resolve().parent
DEMO_FILES = ("walkthrough-tree.yaml", "priority-classes.yaml")
DEMO_NAMESPACES = WALKTHROUGH_NAMESPACES
"""Every namespace the demo puts jobs in (the tree's leaves and the stories'): it creates them
first, as a user must on a cluster (the local one starts with them; a cluster may not)."""


def demo_file(name: str) -> Path:
    """A file shipped with the demo (``walkthrough-tree.yaml``, ``priority-classes.yaml``...)."""
    return DEMO_DIR / name


@dataclass(frozen=True)
class WalkthroughJob:
    """One job of the walkthrough's scenarios, as ``usher submit`` options."""

    at_s: float
    name: str
    namespace: str
    replicas: int
    duration_s: float
    priority_class: str | None = None
    note: str = ""


WALKTHROUGH_SCRIPT: tuple[WalkthroughJob, ...] = (
    WalkthroughJob(1, "pi-8k5pn", "user-a", 6, 75, note="scenario 1: 60 cpu in Department-a"),
    WalkthroughJob(2, "pi-2xtcj", "user-a", 6, 75, note="scenario 1: does not fit, waits at #1"),
    WalkthroughJob(4, "pi-6nsc7", "user-a", 6, 60, "priority-2", "scenario 2: priority 2 heads it"),
    WalkthroughJob(
        6, "borrow", "user-b", 4, 90, note="scenario 3: Department-a borrows all 100 cpu"
    ),
    WalkthroughJob(9, "urgent", "user-c", 1, 45, "priority-3", "scenario 3: Department-b reclaims"),
)

NAMESPACES = (("user-a", 4), ("user-b", 3), ("user-c", 3))
RECLAIMER = "user-c"
"""The namespace of the reclaim bursts (Department-b's, guaranteed 40 cpu by the demo tree)."""
BURST_EVERY = 20
"""A reclaim burst is due every this many steady ticks; it goes out once it can reclaim."""
CORE, GI = 1000, 1024**3
PRIORITY_CLASSES = ((None, 6), ("priority-2", 3), ("priority-3", 1))
OOM_JOB, OOM_JOB_NAMESPACE = "train-oom", "user-b"
"""The demo's OOM scale-up (R13): submitted once after the walkthrough's scenarios."""
STUCK_GANG, STUCK_NAMESPACE, STUCK_DEPARTMENT = "stuck-gang", "user-c", "Department-b"
"""The demo's gang that never becomes ready (R10): requeued, its quota used by others."""
READINESS = {READY_TIMEOUT_ATTRIBUTE: "60", REQUEUE_BACKOFF_ATTRIBUTE: "30"}
"""Department-b's readiness policy once the demo turns it on: 60 s to be ready, then a
backoff of 30 s doubling (the demo tree itself has none, as kube-queue's walkthrough shows)."""


@dataclass(frozen=True)
class Burst:
    """A reclaim burst's shape, as ``usher submit`` options (per replica)."""

    replicas: int
    cpu: str
    memory: str | None


def reclaim_burst(quota: Sequence[QuotaInfo]) -> Burst | None:
    """A job for ``RECLAIMER``'s leaf that is admitted only by reclaiming, or None for now.

    A job may take victims only while its request stays within its leaf's guarantee (R5:
    ``used + request <= min`` on every resource it asks for), so the burst asks for at most
    what is left of the leaf's ``min`` -- cpu, and memory no more than that leaves -- and for
    more cpu than the cluster has free, so that it fits only once a borrower is preempted.
    None while no other leaf borrows cpu, or the cluster could take the burst as it is.
    """
    leaf = next((n for n in quota if n.leaf and RECLAIMER in n.namespaces), None)
    root = next((n for n in quota if n.depth == 0), None)
    if leaf is None or root is None:
        return None
    if not any(n.leaf and n is not leaf and _borrows(n, "cpu") for n in quota):
        return None
    cores = _left(leaf.min_units, leaf.used_units, "cpu") // CORE
    replicas = min(3, cores)
    if replicas == 0:
        return None
    per_replica = cores // replicas
    if per_replica * replicas * CORE <= _left(root.max_units, root.used_units, "cpu"):
        return None  # it would fit without anyone giving way
    memory_gi = min(per_replica, _left(leaf.min_units, leaf.used_units, "memory") // replicas // GI)
    return Burst(replicas, str(per_replica), f"{memory_gi}Gi" if memory_gi > 0 else None)


def _left(limit: dict[str, int], used: dict[str, int], resource: str) -> int:
    return max(0, limit.get(resource, 0) - used.get(resource, 0))


def _borrows(node: QuotaInfo, resource: str) -> bool:
    return node.used_units.get(resource, 0) > node.min_units.get(resource, 0)


class DemoDriver:
    """Plays the demo against the running system."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        seed: int = 7,
        zones: tuple[str, ...] = (),
        burst_zones: tuple[str, ...] = (),
        say: Callable[[str], None] = lambda _line: None,
        backlog: Callable[[], int] = lambda: 0,
        quota: Callable[[], Sequence[QuotaInfo]] = lambda: (),
        tree_in_force: Callable[[], bool] = lambda: True,
        fair_share: bool = False,
        max_backlog: int = 12,
        pace_s: float = 3.0,
    ) -> None:
        self.client = client
        self.rng = random.Random(seed)
        self.zones = tuple(z for z in zones if z != "default" and z not in burst_zones)
        self.burst_zone = burst_zones[0] if burst_zones else None
        """Where the demo's zoned jobs burst (Z3); None: the stack runs no burst zone."""
        self.root_attributes: dict[str, str] = {}
        """What the demo adds to the demo tree's root (its burst zone), kept when it is
        applied again."""
        self.root_children: list[dict[str, Any]] = []
        """Leaves the demo adds below the demo tree's root (the budget story's), kept when
        it is applied again."""
        self.say = say
        self.backlog = backlog
        self.quota = quota
        self.tree_in_force = tree_in_force
        self.fair_share = fair_share
        """Whether the system runs fair share (``usher up --half-life``): its story plays."""
        self.max_backlog = max_backlog
        self.pace_s = pace_s
        self.submitted = 0

    async def run(self, stop: asyncio.Event) -> None:
        """The whole demo; returns when ``stop`` is set."""
        if not await self._step(stop, self._make_namespaces()):
            return
        for name in DEMO_FILES:
            if not await self._step(stop, self._apply(name)):
                return
        for _ in range(300):  # jobs land on a known tree: wait (30 s at most) until it is in force
            if self.tree_in_force() or await _sleep(stop, 0.1):
                break
        if self.burst_zone is not None and self.zones:
            await self._step(stop, self._mark_burst_zone(self.zones[0], self.burst_zone))
            story = BurstStory(
                self.client, self.say, own_zone=self.zones[0], burst_zone=self.burst_zone
            )
            await play_story(story, stop, "burst story")
        await self._step(stop, self._add_budget_leaf())
        await play_story(BudgetStory(self.client, self.say), stop, "budget story")
        if self.fair_share:
            await self._step(stop, self._add_fair_share_nodes())
            await play_story(FairShareStory(self.client, self.say), stop, "fair-share story")
        clock = 0.0
        for job in WALKTHROUGH_SCRIPT:
            if await _sleep(stop, job.at_s - clock):
                return
            clock = job.at_s
            await self._step(stop, self._walkthrough_job(job))
        if await _sleep(stop, 5.0):
            return
        await self._step(stop, self._oom_job())
        await self._step(stop, self._stuck_gang())
        tick, burst_due = 0, False
        while not stop.is_set():
            tick += 1
            burst_due = burst_due or tick % BURST_EVERY == 0
            burst = reclaim_burst(self.quota()) if burst_due else None
            if burst is not None:
                burst_due = False
                await self._step(stop, self._burst(burst))
            elif self.backlog() < self.max_backlog:
                await self._step(stop, self._steady_job())
            if await _sleep(stop, self.pace_s * self.rng.uniform(0.5, 1.5)):
                return

    async def _step(self, stop: asyncio.Event, work: Coroutine[Any, Any, None]) -> bool:
        """Run one step; a failure is told and the demo goes on. False once stopping."""
        try:
            await work
        except ClientError as exc:
            self.say(f"demo: {exc.message}")
        return not stop.is_set()

    async def _make_namespaces(self) -> None:
        manifests = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            for name in DEMO_NAMESPACES
        ]
        for applied in await self.client.apply_manifests(manifests, "demo: namespaces"):
            if applied.action == "created":
                self.say(f"demo: {applied.label}/{applied.name} {applied.action}")

    async def _apply(self, name: str) -> None:
        for applied in await self.client.apply(demo_file(name)):
            self.say(f"demo: {applied.label}/{applied.name} {applied.action}")

    def _walkthrough_tree(self) -> dict[str, Any]:
        """The demo tree as the demo applies it again: with what it added to the root."""
        [tree] = read_yaml_documents(demo_file("walkthrough-tree.yaml"))
        assert isinstance(tree, dict)
        if self.root_attributes:
            root = tree["spec"]["root"]
            root["attributes"] = {**root.get("attributes", {}), **self.root_attributes}
        if self.root_children:
            root = tree["spec"]["root"]
            root["children"] = [*root["children"], *self.root_children]
        return tree

    async def _add_budget_leaf(self) -> None:
        """Apply the demo tree again with the budget story's leaf below its root (B1)."""
        leaf = budget_leaf()
        self.root_children = [leaf]
        for applied in await self.client.apply_manifests(
            [self._walkthrough_tree()], "demo: budget"
        ):
            note = f"{leaf['name']} added with a budget of {leaf['attributes'][BUDGETS]}"
            self.say(f"demo: {applied.label}/{applied.name} {applied.action} ({note})")

    async def _add_fair_share_nodes(self) -> None:
        """Apply the demo tree again with the fair-share story's Teams below its root (F1)."""
        teams = fair_share_nodes()
        self.root_children = [*self.root_children, teams]
        for applied in await self.client.apply_manifests([self._walkthrough_tree()], "demo: fair"):
            note = f"{teams['name']} added: two leaves of weights 1 and 3 share 12 cpu"
            self.say(f"demo: {applied.label}/{applied.name} {applied.action} ({note})")

    async def _mark_burst_zone(self, own_zone: str, burst_zone: str) -> None:
        """Apply the demo tree again with ``burst_zone`` burst and the default list
        ``own_zone,burst_zone`` on its root (Z3)."""
        self.root_attributes = burst_attributes(own_zone, burst_zone)
        for applied in await self.client.apply_manifests([self._walkthrough_tree()], "demo: burst"):
            note = f"zone {burst_zone} burst, jobs of zone {own_zone} may burst there"
            self.say(f"demo: {applied.label}/{applied.name} {applied.action} ({note})")

    async def _walkthrough_job(self, job: WalkthroughJob) -> None:
        try:
            submitted = await self.client.submit(
                job.name,
                namespace=job.namespace,
                image="perl:5.34.0",
                cpu="10",
                memory="10Gi",
                replicas=job.replicas,
                priority_class=job.priority_class,
                duration=job.duration_s,
                command=("sleep", "1d"),
                check_namespace=False,
            )
        except AlreadyExists:
            return  # a restart: the script already ran
        self.say(f"demo: {submitted.label} submitted ({job.note})")

    async def _oom_job(self) -> None:
        """A job with retries that the emulator's kubelet OOM-kills at 4Gi (it kills below
        6Gi): Usher retries it as ``train-oom-retry-1`` with 6Gi (R12, R13), which runs."""
        request = JobRequest(
            namespace=OOM_JOB_NAMESPACE,
            image="registry.local/train:latest",
            name=OOM_JOB,
            cpu="2",
            memory="4Gi",
            zone=self._played_zone(),
            duration_s=20,
        )
        manifest = job_manifest(request)
        annotations = manifest["metadata"].setdefault("annotations", {})
        annotations.update({RETRY_LIMIT_ATTRIBUTE: "2", OOM_BELOW: "6Gi"})
        manifest["spec"]["backoffLimit"] = 0  # the first failed pod fails the Job
        try:
            submitted = await self.client.submit_manifest(manifest, check_namespace=False)
        except AlreadyExists:
            return  # a restart: the script already ran
        self.say(f"demo: {submitted.label} submitted (4Gi, OOMKilled below 6Gi, 2 retries)")

    async def _stuck_gang(self) -> None:
        """Turn on Department-b's ready timeout (the demo tree applied again with it), then
        submit a gang the emulator's kubelet never lets become ready: it is admitted, requeued
        after 60 s with its reason (``PodsNotReady: 0/4 pods ready after 60 s ...``), its
        quota goes to the jobs waiting, and it is offered again after its backoff (R10)."""
        tree = self._walkthrough_tree()
        for child in tree["spec"]["root"]["children"]:
            if child["name"] == STUCK_DEPARTMENT:
                child["attributes"] = {**child.get("attributes", {}), **READINESS}
        for applied in await self.client.apply_manifests([tree], "demo: ready timeout"):
            self.say(f"demo: {applied.label}/{applied.name} {applied.action} (ready timeout 60 s)")
        request = JobRequest(
            namespace=STUCK_NAMESPACE,
            image="registry.local/gang:latest",
            name=STUCK_GANG,
            cpu="5",
            memory="5Gi",
            replicas=4,
            zone=self._played_zone(),
            duration_s=600,
        )
        manifest = job_manifest(request)
        manifest["metadata"].setdefault("annotations", {})[NEVER_READY] = "3600"
        try:
            submitted = await self.client.submit_manifest(manifest, check_namespace=False)
        except AlreadyExists:
            return  # a restart: the script already ran
        self.say(f"demo: {submitted.label} submitted (4 pods that never become ready)")

    def _played_zone(self) -> str | None:
        """Where a job the kubelet plays pod by pod runs: its pods are placed on a node of
        their zone, and the zones ``usher up`` starts have nodes (zone ``default`` has none
        unless it is one of them), so the first of them."""
        return self.zones[0] if self.zones else None

    async def _steady_job(self) -> None:
        rng = self.rng
        namespace = _weighted(rng, NAMESPACES)
        replicas = rng.choice((1, 1, 2, 2, 3, 4))
        cpu = rng.choice((1, 2, 2, 4, 4, 8))
        priority = _weighted(rng, PRIORITY_CLASSES)
        gpu = "1" if rng.random() < 0.15 else None
        memory = f"{cpu * rng.choice((1, 2))}Gi"
        zone = rng.choice(self.zones) if self.zones else None
        what = f"{replicas}x{cpu} cpu" + (" +gpu" if gpu else "")
        await self._submit(namespace, replicas, str(cpu), memory, gpu, priority, zone, what)

    async def _burst(self, burst: Burst) -> None:
        # In a zone with a node, as the OOM and stuck-gang steps: pinned to zone ``default``
        # (no node under ``usher up``) its pods stayed Pending while the Job completed.
        what = f"{burst.replicas}x{burst.cpu} cpu, reclaim"
        zone = self._played_zone()
        await self._submit(
            RECLAIMER, burst.replicas, burst.cpu, burst.memory, None, "priority-3", zone, what
        )

    async def _submit(
        self,
        namespace: str,
        replicas: int,
        cpu: str,
        memory: str | None,
        gpu: str | None,
        priority: str | None,
        zone: str | None,
        what: str,
    ) -> None:
        duration = self.rng.randint(10, 50)
        team = {"user-a": "train", "user-b": "etl", "user-c": "eval"}[namespace]
        submitted = await self.client.submit(
            None,
            namespace=namespace,
            image=f"registry.local/{team}:latest",
            cpu=cpu,
            memory=memory,
            gpu=gpu,
            replicas=replicas,
            priority_class=priority,
            zone=zone,
            duration=duration,
            check_namespace=False,
        )
        self.submitted += 1
        self.say(f"demo: {submitted.job} submitted ({what}, {duration}s)")


def _weighted(rng: random.Random, options: tuple[tuple[T, int], ...]) -> T:
    values = [value for value, _ in options]
    weights = [weight for _, weight in options]
    return rng.choices(values, weights=weights)[0]


async def _sleep(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep, or return early (True) when stopping."""
    if seconds <= 0:
        return stop.is_set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    return stop.is_set()
