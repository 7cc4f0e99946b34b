"""The demo's fair-share story (docs/admission-rules.md F1), played when fair share is on.

What it does: with ``usher up --half-life`` the demo adds ``fair_share_nodes`` below the demo
tree's root -- Teams (no guarantee, at most 12 cpu) with Team-x (namespace user-x, weight 1)
and Team-y (namespace user-y, ``usher.io/fair-weight: 3``) -- and ``FairShareStory.play``
shows both leaves competing for the same 12 cpu in about 8 s: Team-x runs a 12-cpu job for 2 s,
then Team-y one (which holds the 12 cpu), then Team-x and Team-y each submit a 12-cpu job, x's
first. Both used the same (24 cpu-seconds, x's longer ago), but Team-y's weight is 3, so its
decayed usage per weight is lower and its job goes first when the 12 cpu free up; with fair
share off, R3's order would take x's, submitted first. The live view shows each leaf's decayed
usage, weight and key as ``usher explain`` does. It takes nothing from the walkthrough's scenarios:
Teams has no guarantee and its jobs end before they start.
What it must never do: raise for a job that already exists (a restart: skipped whole), or hold
the demo up longer than ``STORY_LIMIT_S``.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Final

from usher.core.rules.fairshare import FAIR_WEIGHT_ATTRIBUTE
from usher.core.state.indexed import JobState
from usher.demo.story import StoryBase, StoryJob, story_node

STORY_LIMIT_S: Final = 12.0
"""The most the story may add to the demo before the walkthrough's scenarios start."""
PARENT: Final = "Teams"
X_NAMESPACE: Final = "user-x"
Y_NAMESPACE: Final = "user-y"
Y_WEIGHT: Final = 3
TEAMS_CPU: Final = "12"
"""What every job of the story asks for: all of Teams."""


def fair_share_nodes() -> dict[str, Any]:
    """The demo tree root's extra child when fair share is on: Teams, 12 cpu shared by two
    leaves of weights 1 and 3, neither with a guarantee (so both compete beyond it, F1)."""

    weighted = {FAIR_WEIGHT_ATTRIBUTE: str(Y_WEIGHT)}
    teams = [
        story_node("Team-x", namespace=X_NAMESPACE),  # weight 1, the default
        story_node("Team-y", namespace=Y_NAMESPACE, attributes=weighted),
    ]
    return story_node(PARENT, children=teams)


def story_jobs() -> tuple[StoryJob, StoryJob, StoryJob, StoryJob]:
    """warm-x (Team-x's usage), warm-y (Team-y's, the same; it holds the 12 cpu while the
    next two arrive), next-x (submitted first), next-y (goes first: lower usage per weight)."""
    return (
        StoryJob("warm-x", X_NAMESPACE, TEAMS_CPU, 2),
        StoryJob("warm-y", Y_NAMESPACE, TEAMS_CPU, 2),
        StoryJob("next-x", X_NAMESPACE, TEAMS_CPU, 1),
        StoryJob("next-y", Y_NAMESPACE, TEAMS_CPU, 1),
    )


class FairShareStory(StoryBase):
    """The story against the running system (its tree applied with ``fair_share_nodes``),
    telling what happens through ``say``."""

    image: ClassVar[str] = "registry.local/fair:latest"
    limit_s: ClassVar[float] = STORY_LIMIT_S

    async def play(self) -> None:
        started = time.monotonic()
        warm_x, warm_y, next_x, next_y = story_jobs()
        if not await self.submit(warm_x, "Team-x uses Teams' 12 cpu"):
            return  # a restart: the story already ran
        await self.client.wait(warm_x.key, until="done", timeout=self.left(started))
        await self.submit(warm_y, "Team-y uses as much, and holds the 12 cpu")
        await self.client.wait(warm_y.key, until="admitted", timeout=self.left(started))
        await self.submit(next_x, "waits; submitted first")
        await self.submit(next_y, f"waits; Team-y's weight is {Y_WEIGHT}")
        await self.client.wait(next_y.key, until="admitted", timeout=self.left(started))
        if (await self.client.job(next_x.key)).state == JobState.PENDING:
            self.say(
                f"demo: {next_y.key} admitted before {next_x.key}: Team-y's decayed usage per "
                "weight is lower (fair share, F1)"
            )
        await self.client.wait(next_x.key, until="done", timeout=self.left(started))
