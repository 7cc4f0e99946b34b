"""The policy seam: what Round and Block change in a decision pass and in the reasons it gives.

What it does: one small strategy object per ``Policy`` (R3). A pass asks it whether
a candidate that stays pending closes its queue for the rest of the pass; the reason queries
ask it which workload, if any, blocks a waiting one. ``seam_for`` picks it from the enum, so
no other module compares policy names.
What it must never do: look at the state itself (the engine hands it what it needs), perform
I/O, or read a clock.
"""

from __future__ import annotations

from collections.abc import Callable

from schemas import WorkloadKey
from usher.core.model.config import Policy


class PolicySeam:
    """What a policy decides; the base answers as Round does."""

    __slots__ = ()

    closes_queue = False
    """Whether a candidate that stays pending closes its queue for the rest of the pass."""

    def blocking_head(
        self, job: WorkloadKey, head: Callable[[], WorkloadKey | None]
    ) -> WorkloadKey | None:
        """The workload that keeps ``job`` waiting by standing before it, or None.

        ``head`` finds the queue's head (the first workload this engine decides for); it is
        only called when the policy cares.
        """
        return None


class RoundSeam(PolicySeam):
    """Round: a head that cannot be admitted lets the rest of its queue be tried."""

    __slots__ = ()


class BlockSeam(PolicySeam):
    """Block: strict priority; a head that cannot be admitted holds its whole queue."""

    __slots__ = ()

    closes_queue = True

    def blocking_head(
        self, job: WorkloadKey, head: Callable[[], WorkloadKey | None]
    ) -> WorkloadKey | None:
        first = head()
        return first if first is not None and first != job else None


_SEAMS: dict[Policy, PolicySeam] = {Policy.ROUND: RoundSeam(), Policy.BLOCK: BlockSeam()}


def seam_for(policy: Policy) -> PolicySeam:
    """The seam of ``policy`` (stateless: one shared instance per policy)."""
    return _SEAMS[policy]
