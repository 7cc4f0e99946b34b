"""cancel_tasks ends tasks that swallow a cancellation and reports real failures."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from services.common.tasks import cancel_tasks


async def _swallows_first_cancel(ended: asyncio.Event) -> None:
    # What Python 3.11's wait_for does when the value arrives with the cancel: carry on.
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(3600)
    try:
        await asyncio.sleep(3600)
    finally:
        ended.set()


async def _fails() -> None:
    raise ValueError("broken")


async def test_a_task_that_swallows_a_cancel_is_cancelled_again_until_it_ends() -> None:
    ended = asyncio.Event()
    stubborn = asyncio.create_task(_swallows_first_cancel(ended))
    failing = asyncio.create_task(_fails())
    await asyncio.sleep(0)
    failures = await asyncio.wait_for(cancel_tasks([stubborn, failing]), 5)
    assert ended.is_set() and stubborn.cancelled()
    assert list(failures) == [failing]
    assert isinstance(failures[failing], ValueError)


async def test_nothing_to_cancel_returns_at_once() -> None:
    assert await cancel_tasks([]) == {}


@pytest.mark.parametrize("count", [1, 5])
async def test_every_task_has_ended_when_it_returns(count: int) -> None:
    tasks = [asyncio.create_task(asyncio.sleep(3600)) for _ in range(count)]
    assert await cancel_tasks(tasks) == {}
    assert all(task.done() for task in tasks)
