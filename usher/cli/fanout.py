"""``usher submit --for-each-day/--for-each`` and ``--group`` of wait, delete and jobs.

What it does: submits one job per day or value as one group (``AsyncClient.submit_each``),
printing each job as the API accepts it (the progress of a large fan-out); a Ctrl-C cancels the
fan-out, which lets the creates in flight finish and says which jobs exist and which do not
(``GroupIncomplete``, exit 130; an API failure part-way: exit 3 or 4, the same lines). Follows a
group to its end (one line per change, then which failed: exit 1 if any did) and deletes one.
What it must never do: leave a group half made without saying which half, or decide anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click

from usher.cli import fail

if TYPE_CHECKING:
    from usher.client import AsyncClient, JobInfo
    from usher.client.fanout import GroupResult
    from usher.client.manifests import JobRequest
    from usher.core.values.fanout import FanOut

T = TypeVar("T")
EXIT_GROUP_FAILED = 1
"""1: some job of the group ended otherwise than succeeded (as one job's ``--wait``)."""


def fan_out_of(
    for_each_day: str | None, weekdays: bool, calendar: str | None, for_each: str | None
) -> FanOut | None:
    """The fan-out the options ask for (None: one job); a usage error names the option."""
    from usher.client.errors import BadInput
    from usher.client.fanout import for_each as values_of
    from usher.client.fanout import for_each_day as days_of

    if for_each_day is not None and for_each is not None:
        raise click.UsageError("--for-each-day and --for-each: give one")
    if for_each_day is None and (weekdays or calendar is not None):
        raise click.UsageError("--weekdays and --calendar go with --for-each-day")
    try:
        if for_each_day is not None:
            return days_of(for_each_day, weekdays=weekdays, calendar=calendar)
        if for_each is not None:
            return values_of(for_each)
    except BadInput as exc:
        fail(exc.message, 2)
    return None


@contextlib.contextmanager
def ctrl_c_cancels(task: asyncio.Future[Any]) -> Iterator[None]:
    """While inside: Ctrl-C cancels ``task`` (which then says what it did) instead of raising
    ``KeyboardInterrupt`` wherever the loop happens to be."""
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGINT)
    loop.add_signal_handler(signal.SIGINT, task.cancel)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, previous)


async def cancellable(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` as its own task that a Ctrl-C cancels (``ctrl_c_cancels``)."""
    task = asyncio.ensure_future(work)
    with ctrl_c_cancels(task):
        return await task


async def submit_group(
    client: AsyncClient,
    fan_out: FanOut,
    request: JobRequest,
    *,
    group: str | None,
    check_zone: bool,
) -> str:
    """Create the group, one line per job created (``(k/N)`` after it); the group's name."""
    total = len(fan_out.values)
    done = 0

    def created(item: Any) -> None:
        nonlocal done
        done += 1
        click.echo(f"{item.label} created ({done}/{total})")

    submitted = await cancellable(  # GroupIncomplete: the command's ClientError lines
        client.submit_each(fan_out, request, group=group, check_zone=check_zone, on_created=created)
    )
    click.echo(f"group {submitted.group}: {total} jobs created")
    return submitted.group


def report_group(result: GroupResult, until: str) -> None:
    """``group G: N of M succeeded``; else which did not, and exit 1."""
    from usher.core.state.indexed import JobState

    total = len(result.jobs) + len(result.missing)
    if until == "admitted":
        late = [j for j in result.jobs if j.state != JobState.ADMITTED and j.done]
        if not late and not result.missing:
            click.echo(f"group {result.group}: {total} of {total} admitted (or done)")
            return
    else:
        late = result.failed
        if result.ok:
            click.echo(f"group {result.group}: {total} of {total} succeeded")
            return
    lines = [f"{j.job} ({_ended(j)})" for j in late] + [f"{k} (gone)" for k in result.missing]
    click.echo(f"usher: group {result.group}: {len(lines)} of {total} did not succeed:", err=True)
    for line in lines:
        click.echo(f"usher:   {line}", err=True)
    fail(
        f"group {result.group}: {len(lines)} of {total} failed: "
        + ", ".join(line.split(" ", 1)[0] for line in lines[:20])
        + (f" and {len(lines) - 20} more" if len(lines) > 20 else ""),
        EXIT_GROUP_FAILED,
    )


def _ended(job: JobInfo) -> str:
    from usher.core.state.indexed import JobState

    if job.state == JobState.FINISHED:
        return "failed" if job.succeeded is False else "succeeded"
    reason = f": {job.reason_code}" if job.reason_code else ""
    return f"{job.state}{reason}"
