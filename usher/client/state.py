"""What Usher says about every job, queue and quota node, read from the log.

What it does: ``catch_up`` folds the log into a ``PeopleProjection`` (the pure fold and its
results live in ``usher.core.history.people``, shared with the preemptor, which keeps the
people read model) with an ordered consumer until it has caught up with the end it saw at
start; ``read_state`` does it from an empty projection; ``now_ms`` is the clock the views are
asked at.
What it must never do: publish anything, acknowledge anything, or fold an entry itself (the
projection's ``apply`` is the one fold).
"""

from __future__ import annotations

import asyncio
import time

from nats.js import JetStreamContext

from schemas import Millis
from usher.adapters.nats.follower import LogFollower
from usher.adapters.nats.subjects import Subjects
from usher.core.history.people import (
    FEED_SUSPENDED,
    LONG_AT_HEAD_S,
    MAX_DECISIONS,
    DecisionInfo,
    JobInfo,
    PeopleProjection,
    QueuedJob,
    QueueInfo,
    QuotaInfo,
    StateView,
    TreeDeletion,
    TreeRejection,
)
from usher.core.model.config import EngineConfig

__all__ = [
    "FEED_SUSPENDED",
    "LONG_AT_HEAD_S",
    "MAX_DECISIONS",
    "DecisionInfo",
    "JobInfo",
    "PeopleProjection",
    "QueueInfo",
    "QueuedJob",
    "QuotaInfo",
    "StateView",
    "TreeDeletion",
    "TreeRejection",
    "catch_up",
    "now_ms",
    "read_state",
]


def now_ms() -> Millis:
    return Millis(int(time.time() * 1000))


async def catch_up(
    state: PeopleProjection,
    js: JetStreamContext,
    subjects: Subjects,
    *,
    timeout_s: float = 30.0,
) -> LogFollower:
    """Fold the whole log (from ``state.applied_seq + 1``) into ``state`` until caught up with
    the end seen at start; returns the follower, still following (the caller stops it)."""
    follower = LogFollower(js, subjects, start_seq=state.applied_seq + 1)
    await follower.start()
    if follower.caught_up:
        return follower
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    timer = loop.call_later(timeout_s, stop.set)
    try:
        async for batch in follower.batches(stop):
            for item in batch:
                state.apply(item)
            if follower.caught_up:
                break
    finally:
        timer.cancel()
    if not follower.caught_up:
        await follower.stop()
        raise TimeoutError(f"the log was not read to its end within {timeout_s}s")
    return follower


async def read_state(
    js: JetStreamContext, subjects: Subjects, config: EngineConfig, *, timeout_s: float = 30.0
) -> PeopleProjection:
    """The whole log folded into a fresh ``PeopleProjection``."""
    state = PeopleProjection(config)
    follower = await catch_up(state, js, subjects, timeout_s=timeout_s)
    await follower.stop()
    return state
