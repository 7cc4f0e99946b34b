"""The demo's budget story (docs/admission-rules.md B1), played before the walkthrough's scenarios.

What it does: ``budget_leaf`` is the leaf the demo adds to the demo tree's root for it --
Department-c (namespace user-d), no guarantee, at most 12 cpu, and a budget of 0.01 CPU-hours
(36 cpu-seconds) a month with the ``hold`` action -- and ``BudgetStory.play`` spends it in
about 8 s: a job of 12 cpu for 4 s is admitted and runs to its end (a running job is never
evicted for a budget, so it overruns it), then the next job of Department-c waits with
``BudgetExhausted: 0.013 of 0.01 CPU-hours in <month>, resets <the 1st of the next> (budget of
root/Department-c)``, which the live view shows for the rest of the demo beside ``usher
budget``'s table (spent, limit, left, reset). It takes nothing from the walkthrough's scenarios: the
leaf has no guarantee, its spending job ends before they start and the held job holds nothing.
What it must never do: raise for a job that already exists (a restart: the story ran, it is
skipped whole), or hold the demo up longer than ``STORY_LIMIT_S``.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Final

from usher.client import JobInfo, WaitTimeout
from usher.core.tree.budget_spec import BUDGET_ACTION_ATTRIBUTE, BUDGETS_ATTRIBUTE, BudgetAction
from usher.demo.story import StoryBase, StoryJob, story_node

STORY_LIMIT_S: Final = 15.0
"""The most the story may add to the demo before the walkthrough's scenarios start."""
HELD_SEEN_S: Final = 3.0
"""How long the story waits for the held job's reason to reach the log."""
DEPARTMENT: Final = "Department-c"
NAMESPACE: Final = "user-d"
BUDGET: Final = "cpu=0.01h per month"
"""36 cpu-seconds: the first job (12 cpu x 4 s = 48) spends it."""


def budget_leaf() -> dict[str, Any]:
    """The demo tree root's extra child in the demo: a small leaf with a monthly CPU budget
    that holds new work once spent (B1)."""
    budget = {BUDGETS_ATTRIBUTE: BUDGET, BUDGET_ACTION_ATTRIBUTE: BudgetAction.HOLD}
    return story_node(DEPARTMENT, namespace=NAMESPACE, attributes=budget)


def story_jobs() -> tuple[StoryJob, StoryJob]:
    """spend (12 cpu for 4 s: 48 cpu-seconds, more than the 36 of the budget), then held
    (the same again: it waits until the budget's month ends)."""
    return StoryJob("spend-budget", NAMESPACE, "12", 4), StoryJob("over-budget", NAMESPACE, "12", 4)


class BudgetStory(StoryBase):
    """The story against the running system (its tree already applied with ``budget_leaf``),
    telling what happens through ``say``."""

    image: ClassVar[str] = "registry.local/budget:latest"
    limit_s: ClassVar[float] = STORY_LIMIT_S

    async def play(self) -> None:
        started = time.monotonic()
        spend, held = story_jobs()
        if not await self.submit(spend, f"spends {DEPARTMENT}'s budget of {BUDGET}"):
            return  # a restart: the story already ran
        await self.client.wait(spend.key, until="done", timeout=self.left(started))
        await self.submit(held, f"{DEPARTMENT}'s budget is spent: it is held")
        last = await self._waiting(held, started)
        if last is not None and last.reason_code is not None:
            self.say(f"demo: {held.key} waits: {last.reason_code}: {last.reason}")

    async def _waiting(self, job: StoryJob, started: float) -> JobInfo | None:
        """The held job's state once its reason is on the log (it is not admitted)."""
        try:
            return await self.client.wait(
                job.key, until="admitted", timeout=min(HELD_SEEN_S, self.left(started))
            )
        except WaitTimeout as exc:
            return exc.job if isinstance(exc.job, JobInfo) else None
