"""Stopping a service's background tasks for good.

It cancels tasks and waits until each has ended, cancelling again while one keeps running.
It must never leave a task running after it returns, nor swallow a task's failure silently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

RECANCEL_EVERY_S = 0.5
"""How long a cancelled task may keep running before it is cancelled again."""


async def cancel_tasks(
    tasks: Iterable[asyncio.Task[Any]],
) -> dict[asyncio.Task[Any], BaseException]:
    """Cancel ``tasks`` and wait until every one has ended; return the failures by task.

    Why a loop: in Python 3.11 a cancellation can be lost. ``asyncio.wait_for`` (used by
    nats-py's ``next_msg`` inside its own task) returns the awaited value instead of raising
    when the value arrives in the same loop turn as the cancel, and the task then carries on
    as if never cancelled. Cancelling again after a short wait ends such a task too.
    """
    every = [*tasks]
    pending = {task for task in every if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_EVERY_S)
    failures: dict[asyncio.Task[Any], BaseException] = {}
    for task in every:
        if task.cancelled():
            continue
        error = task.exception()
        if error is not None:
            failures[task] = error
    return failures
