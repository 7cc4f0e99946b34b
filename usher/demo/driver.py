"""The demo workload driver (see the package docstring).

What it does: ``DemoDriver.run(stop)`` applies the seed tree and PriorityClasses, plays the
seed's three scenarios step by step, then submits a steady, seeded-random mix of jobs until
``stop`` is set, telling what it does through ``say``.
What it must never do: raise for a job that already exists (a restart replays the script),
or keep submitting while more than ``max_backlog`` jobs wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from usher.client import AsyncClient, BadInput, ClientError

T = TypeVar("T")
DEMO_DIR = Path(__file__).resolve().parent
DEMO_FILES = ("seed-tree.yaml", "priority-classes.yaml")


def demo_file(name: str) -> Path:
    """A file shipped with the demo (``seed-tree.yaml``, ``priority-classes.yaml``...)."""
    return DEMO_DIR / name


@dataclass(frozen=True)
class SeedJob:
    """One job of the seed's scenarios, as ``usher submit`` options."""

    at_s: float
    name: str
    namespace: str
    replicas: int
    duration_s: float
    priority_class: str | None = None
    note: str = ""


SEED_SCRIPT: tuple[SeedJob, ...] = (
    SeedJob(1, "pi-8k5pn", "user-a", 6, 75, note="scenario 1: 60 cpu in Department-a"),
    SeedJob(2, "pi-2xtcj", "user-a", 6, 75, note="scenario 1: does not fit, waits at #1"),
    SeedJob(4, "pi-6nsc7", "user-a", 6, 60, "priority-2", "scenario 2: priority 2 heads it"),
    SeedJob(6, "borrow", "user-b", 4, 90, note="scenario 3: Department-a borrows all 100 cpu"),
    SeedJob(9, "urgent", "user-c", 1, 45, "priority-3", "scenario 3: Department-b reclaims"),
)

NAMESPACES = (("user-a", 4), ("user-b", 3), ("user-c", 3))
PRIORITY_CLASSES = ((None, 6), ("priority-2", 3), ("priority-3", 1))


class DemoDriver:
    """Plays the demo against the running system."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        seed: int = 7,
        zones: tuple[str, ...] = (),
        say: Callable[[str], None] = lambda _line: None,
        backlog: Callable[[], int] = lambda: 0,
        tree_in_force: Callable[[], bool] = lambda: True,
        max_backlog: int = 12,
        pace_s: float = 3.0,
    ) -> None:
        self.client = client
        self.rng = random.Random(seed)
        self.zones = tuple(z for z in zones if z != "default")
        self.say = say
        self.backlog = backlog
        self.tree_in_force = tree_in_force
        self.max_backlog = max_backlog
        self.pace_s = pace_s
        self.submitted = 0

    async def run(self, stop: asyncio.Event) -> None:
        """The whole demo; returns when ``stop`` is set."""
        for name in DEMO_FILES:
            if not await self._step(stop, self._apply(name)):
                return
        for _ in range(300):  # jobs land on a known tree: wait (30 s at most) until it is in force
            if self.tree_in_force() or await _sleep(stop, 0.1):
                break
        clock = 0.0
        for job in SEED_SCRIPT:
            if await _sleep(stop, job.at_s - clock):
                return
            clock = job.at_s
            await self._step(stop, self._seed_job(job))
        if await _sleep(stop, 5.0):
            return
        tick = 0
        while not stop.is_set():
            tick += 1
            if self.backlog() < self.max_backlog:
                burst = tick % 20 == 0
                await self._step(stop, self._steady_job(reclaim=burst))
            if await _sleep(stop, self.pace_s * self.rng.uniform(0.5, 1.5)):
                return

    async def _step(self, stop: asyncio.Event, work: Coroutine[Any, Any, None]) -> bool:
        """Run one step; a failure is told and the demo goes on. False once stopping."""
        try:
            await work
        except ClientError as exc:
            self.say(f"demo: {exc.message}")
        return not stop.is_set()

    async def _apply(self, name: str) -> None:
        for applied in await self.client.apply(demo_file(name)):
            self.say(f"demo: {applied.label}/{applied.name} {applied.action}")

    async def _seed_job(self, job: SeedJob) -> None:
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
        except BadInput as exc:
            if "already exists" in exc.message:
                return  # a restart: the script already ran
            raise
        self.say(f"demo: {submitted.label} submitted ({job.note})")

    async def _steady_job(self, *, reclaim: bool) -> None:
        rng = self.rng
        priority: str | None
        if reclaim:
            namespace, replicas, cpu, priority = "user-c", 3, 10, "priority-3"
        else:
            namespace = _weighted(rng, NAMESPACES)
            replicas = rng.choice((1, 1, 2, 2, 3, 4))
            cpu = rng.choice((1, 2, 2, 4, 4, 8))
            priority = _weighted(rng, PRIORITY_CLASSES)
        gpu = "1" if not reclaim and rng.random() < 0.15 else None
        zone = rng.choice(self.zones) if self.zones else None
        duration = rng.randint(10, 50)
        team = {"user-a": "train", "user-b": "etl", "user-c": "eval"}[namespace]
        submitted = await self.client.submit(
            None,
            namespace=namespace,
            image=f"registry.local/{team}:latest",
            cpu=str(cpu),
            memory=f"{cpu * rng.choice((1, 2))}Gi",
            gpu=gpu,
            replicas=replicas,
            priority_class=priority,
            zone=zone,
            duration=duration,
            check_namespace=False,
        )
        self.submitted += 1
        what = f"{replicas}x{cpu} cpu" + (" +gpu" if gpu else "") + f", {duration}s"
        self.say(f"demo: {submitted.job} submitted ({what}{', reclaim' if reclaim else ''})")


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
