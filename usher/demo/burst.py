"""The demo's burst to a virtual zone (docs/admission-rules.md Z3), played before the walkthrough's.

What it does: when ``usher up`` runs a burst zone (``--burst-zones eci``: a virtual kubelet's
node with large allocatable), ``burst_attributes`` are what the demo adds to the demo tree's
root -- the burst zone, and the default list ``<own zone>,<burst zone>`` for every job below
-- and ``BurstStory.play`` shows both halves of Z3 in about 15 s: a job fills the own zone's
node (64 cpu), so the next job of that zone bursts to the virtual node (``ZoneFallback``);
once the own node is free again a job runs there, so Department-a borrows with two jobs, and
a Department-b job asking for its guarantee reclaims the *burst* job, though R5's order alone
would take the one admitted last. It waits for the story's jobs to end (at most
``STORY_LIMIT_S``) so the walkthrough's scenarios start on an empty cluster as before.
What it must never do: raise for a job that already exists (a restart: the story ran, it is
skipped whole), or hold the demo up longer than ``STORY_LIMIT_S``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar, Final

from usher.core.tree.zone_burst import BURST_ZONES_ATTRIBUTE, DEFAULT_ZONES_ATTRIBUTE
from usher.demo.story import StoryBase, StoryJob

STORY_LIMIT_S: Final = 20.0
"""The most the story may add to the demo before the walkthrough's scenarios start."""


def burst_attributes(own_zone: str, burst_zone: str) -> dict[str, str]:
    """The demo tree root's attributes in the demo: ``burst_zone`` is burst, and every job of
    ``own_zone`` (the demo's zoned jobs) accepts it after its own (Z3)."""
    return {BURST_ZONES_ATTRIBUTE: burst_zone, DEFAULT_ZONES_ATTRIBUTE: f"{own_zone},{burst_zone}"}


def story_jobs(own_zone: str, burst_zone: str) -> tuple[StoryJob, StoryJob, StoryJob, StoryJob]:
    """fill (the own node's 64 cpu), burst (2x8 cpu, Department-a), run (60 cpu on the own
    node once fill is done: Department-a borrows), reclaim (30 cpu within Department-b's
    40-cpu guarantee, while the cluster's 100 cpu are taken)."""
    return (
        StoryJob(f"fill-{own_zone}", "user-a", "16", 3, replicas=4, zone=own_zone),
        StoryJob(f"burst-{burst_zone}", "user-b", "8", 8, replicas=2, zone=own_zone),
        StoryJob(f"run-{own_zone}", "user-a", "15", 4, replicas=4, zone=own_zone),
        StoryJob("reclaim-burst", "user-c", "30", 2, priority_class="priority-3"),
    )


@dataclass
class BurstStory(StoryBase):
    """The story against the running system (its tree's root marked with
    ``burst_attributes``), telling what happens through ``say``."""

    own_zone: str
    burst_zone: str

    image: ClassVar[str] = "registry.local/burst:latest"
    limit_s: ClassVar[float] = STORY_LIMIT_S

    async def play(self) -> None:
        started = time.monotonic()
        fill, burst, run, reclaim = story_jobs(self.own_zone, self.burst_zone)
        if not await self.submit(fill, "fills the 64-cpu node of zone " + self.own_zone):
            return  # a restart: the story already ran
        await self.submit(burst, f"zone {self.own_zone} is full: it bursts")
        info = await self.client.wait(burst.key, until="admitted", timeout=self.left(started))
        self.say(f"demo: {burst.key} admitted in zone {info.zone} (burst, virtual node)")
        await self.client.wait(fill.key, until="done", timeout=self.left(started))
        await self.submit(run, f"zone {self.own_zone} has room again: Department-a borrows")
        await self.client.wait(run.key, until="admitted", timeout=self.left(started))
        await self.submit(reclaim, "Department-b reclaims: the burst job goes first")
        await self.client.wait(reclaim.key, until="admitted", timeout=self.left(started))
        for job in (run, reclaim, burst):
            await self.client.wait(job.key, until="done", timeout=self.left(started))

    def size(self, job: StoryJob) -> str:
        return f"{job.replicas}x{job.cpu} cpu"
