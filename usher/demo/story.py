"""What every demo story shares: its jobs, its time budget, submitting with a note, and playing.

What it does: a story (``usher.demo.burst``'s, ``budget``'s, ``fairshare``'s) is a few
``StoryJob``s submitted one after another against the running system, each told through
``say`` as ``demo: <job> submitted (<size>, <note>)``; ``StoryBase`` gives it the time left
of its budget (``limit_s``, counted from when it started) and ``submit``, which says False when
its job exists already -- a restart, the story ran (``AlreadyExists``, never the message).
The nodes a story adds below the demo tree's root are ``story_node``s (no guarantee).
``play_story`` plays one until it ends, fails (told, the demo goes on) or the demo stops.
What it must never do: raise for a job that already exists, or wait past a story's budget.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from usher.client import AlreadyExists, AsyncClient, ClientError


def story_node(
    name: str,
    *,
    namespace: str | None = None,
    attributes: dict[str, str] | None = None,
    children: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A node a story adds below the demo tree's root (a leaf of ``namespace``, or a parent of
    ``children``): at most 12 cpu, with no guarantee, so it takes nothing from the walkthrough's
    departments."""
    node: dict[str, Any] = {
        "name": name,
        "max": {"cpu": "12", "memory": "12Gi"},
        "min": {"cpu": "0", "memory": "0"},
    }
    if namespace is not None:
        node["namespaces"] = [namespace]
    if attributes is not None:
        node["attributes"] = attributes
    if children is not None:
        node["children"] = children
    return node


@dataclass(frozen=True)
class StoryJob:
    """One job of a story, as ``usher submit`` options (cpu per replica)."""

    name: str
    namespace: str
    cpu: str
    duration_s: float
    replicas: int = 1
    zone: str | None = None
    priority_class: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class StoryBase:
    """A story against the running system, telling what happens through ``say``; a subclass
    names its ``image``, its budget ``limit_s`` and plays its jobs in ``play``."""

    client: AsyncClient
    say: Callable[[str], None]

    image: ClassVar[str]
    limit_s: ClassVar[float]
    """The most the story may add to the demo before the walkthrough's scenarios start."""

    def left(self, started: float) -> float:
        """Seconds of the budget left since ``started`` (``time.monotonic``); a wait always
        gets a little, so a late step fails as a timeout, not at once."""
        return max(0.1, self.limit_s - (time.monotonic() - started))

    def size(self, job: StoryJob) -> str:
        """How the submitted line tells ``job``'s size."""
        return f"{job.cpu} cpu for {job.duration_s:g} s"

    async def submit(self, job: StoryJob, note: str) -> bool:
        """Submit one job; False when it exists already (a restart)."""
        try:
            submitted = await self.client.submit(
                job.name,
                namespace=job.namespace,
                image=self.image,
                cpu=job.cpu,
                replicas=job.replicas,
                priority_class=job.priority_class,
                zone=job.zone,
                duration=job.duration_s,
                check_namespace=False,
            )
        except AlreadyExists:
            return False
        self.say(f"demo: {submitted.label} submitted ({self.size(job)}, {note})")
        return True


class Story(Protocol):
    """A demo story: plays against the running system, telling what happens through ``say``
    (``StoryBase``'s subclasses)."""

    @property
    def say(self) -> Callable[[str], None]: ...

    async def play(self) -> None: ...


async def play_story(story: Story, stop: asyncio.Event, name: str) -> None:
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
