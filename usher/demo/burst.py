"""The demo's burst to a virtual zone (docs/admission-rules.md Z3), played before the seed's.

What it does: when ``usher up`` runs a burst zone (``--burst-zones eci``: a virtual kubelet's
node with large allocatable), ``burst_attributes`` are what the demo adds to the seed tree's
root -- the burst zone, and the default list ``<own zone>,<burst zone>`` for every job below
-- and ``BurstStory.play`` shows both halves of Z3 in about 15 s: a job fills the own zone's
node (64 cpu), so the next job of that zone bursts to the virtual node (``ZoneFallback``);
once the own node is free again a job runs there, so Department-a borrows with two jobs, and
a Department-b job asking for its guarantee reclaims the *burst* job, though R5's order alone
would take the one admitted last. It waits for the story's jobs to end (at most
``STORY_LIMIT_S``) so the seed's scenarios start on an empty cluster as before.
What it must never do: raise for a job that already exists (a restart: the story ran, it is
skipped whole), or hold the demo up longer than ``STORY_LIMIT_S``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from usher.client import AsyncClient, BadInput, ClientError
from usher.core.zone_burst import BURST_ZONES_ATTRIBUTE, DEFAULT_ZONES_ATTRIBUTE

STORY_LIMIT_S = 20.0
"""The most the story may add to the demo before the seed's scenarios start."""


def burst_attributes(own_zone: str, burst_zone: str) -> dict[str, str]:
    """The seed tree root's attributes in the demo: ``burst_zone`` is burst, and every job of
    ``own_zone`` (the demo's zoned jobs) accepts it after its own (Z3)."""
    return {BURST_ZONES_ATTRIBUTE: burst_zone, DEFAULT_ZONES_ATTRIBUTE: f"{own_zone},{burst_zone}"}


@dataclass(frozen=True)
class StoryJob:
    """One job of the story, as ``usher submit`` options (cpu per replica)."""

    name: str
    namespace: str
    replicas: int
    cpu: str
    duration_s: float
    zone: str | None
    priority_class: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def story_jobs(own_zone: str, burst_zone: str) -> tuple[StoryJob, StoryJob, StoryJob, StoryJob]:
    """fill (the own node's 64 cpu), burst (2x8 cpu, Department-a), run (60 cpu on the own
    node once fill is done: Department-a borrows), reclaim (30 cpu within Department-b's
    40-cpu guarantee, while the cluster's 100 cpu are taken)."""
    return (
        StoryJob(f"fill-{own_zone}", "user-a", 4, "16", 3, own_zone),
        StoryJob(f"burst-{burst_zone}", "user-b", 2, "8", 8, own_zone),
        StoryJob(f"run-{own_zone}", "user-a", 4, "15", 4, own_zone),
        StoryJob("reclaim-burst", "user-c", 1, "30", 2, None, "priority-3"),
    )


@dataclass
class BurstStory:
    """The story against the running system, telling what happens through ``say``."""

    client: AsyncClient
    own_zone: str
    burst_zone: str
    say: Callable[[str], None]

    async def play(self) -> None:
        started = time.monotonic()
        fill, burst, run, reclaim = story_jobs(self.own_zone, self.burst_zone)
        if not await self._submit(fill, "fills the 64-cpu node of zone " + self.own_zone):
            return  # a restart: the story already ran
        await self._submit(burst, f"zone {self.own_zone} is full: it bursts")
        info = await self.client.wait(burst.key, until="admitted", timeout=self._left(started))
        self.say(f"demo: {burst.key} admitted in zone {info.zone} (burst, virtual node)")
        await self.client.wait(fill.key, until="done", timeout=self._left(started))
        await self._submit(run, f"zone {self.own_zone} has room again: Department-a borrows")
        await self.client.wait(run.key, until="admitted", timeout=self._left(started))
        await self._submit(reclaim, "Department-b reclaims: the burst job goes first")
        await self.client.wait(reclaim.key, until="admitted", timeout=self._left(started))
        for job in (run, reclaim, burst):
            await self.client.wait(job.key, until="done", timeout=self._left(started))

    def _left(self, started: float) -> float:
        return max(0.1, STORY_LIMIT_S - (time.monotonic() - started))

    async def _submit(self, job: StoryJob, note: str) -> bool:
        """Submit one job; False when it exists already (a restart)."""
        try:
            submitted = await self.client.submit(
                job.name,
                namespace=job.namespace,
                image="registry.local/burst:latest",
                cpu=job.cpu,
                replicas=job.replicas,
                priority_class=job.priority_class,
                zone=job.zone,
                duration=job.duration_s,
                check_namespace=False,
            )
        except BadInput as exc:
            if "already exists" in exc.message:
                return False
            raise
        self.say(f"demo: {submitted.label} submitted ({job.replicas}x{job.cpu} cpu, {note})")
        return True


class Story(Protocol):
    """A demo story: plays against the running system, telling what happens through ``say``
    (``BurstStory``; ``usher.demo.budget``'s ``BudgetStory``)."""

    @property
    def say(self) -> Callable[[str], None]: ...

    async def play(self) -> None: ...


async def play_story(story: Story, stop: asyncio.Event, name: str = "burst story") -> None:
    """Play ``story`` until it ends, fails (told as ``name``'s, the demo goes on) or ``stop``
    is set."""
    play = asyncio.ensure_future(story.play())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({play, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if play.done():
            play.result()
    except ClientError as exc:
        story.say(f"demo: {name}: {exc.message}")
    finally:
        for task in (play, stopping):
            task.cancel()
