"""The terminal live view gives each pending job's estimated start as ``usher jobs --start``
words it (issue 19, item 2), and why when it is unknown: on the screen and in plain lines."""

from __future__ import annotations

import io
from datetime import timedelta

from rich.console import Console

from schemas import Millis, NodeHeld, PodSet, WorkloadKey, WorkloadObserved, Zone, ZoneServed
from tests.builders.log import (
    BASE,
    BASE_MS,
    CPU,
    QA,
    B,
    Log,
    waiting_behind_a_run,
    walkthrough_round,
)
from usher.cli.live import queue_lines, render, starts_of
from usher.client.durations import estimated_start
from usher.client.state import PeopleProjection, StateView

NOW_S = 10_000.0
"""Seconds after BASE at which the views are taken."""


def view_of(log: Log, now_s: float = NOW_S) -> StateView:
    state = PeopleProjection()
    for item in log.history().items:
        state.apply(item)
    return state.view(Millis(BASE_MS + int(now_s * 1000)))


def test_a_pending_job_starts_with_a_range_in_the_plain_lines() -> None:
    view = view_of(waiting_behind_a_run(NOW_S))
    now = BASE + timedelta(seconds=NOW_S)
    starts = starts_of(view, now)
    assert starts == {"user-a/next": "~18m (8m-28m)"}
    [next_job] = [job for job in view.jobs if job.job == "user-a/next"]
    assert starts["user-a/next"] == estimated_start(next_job.estimate, now)  # usher jobs' words
    [queue] = [q for q in view.queues if q.name == QA]
    assert queue_lines(queue, starts)[1] == (
        "  #1 user-a/next prio 0: QuotaExceeded root/Department-a cpu 90 used + 50 requested "
        "> max 100 x 1.0; starts ~18m (8m-28m)"
    )
    assert not queue_lines(queue)[1].endswith("8m-28m)")  # no starts given: none shown


def test_an_unknown_start_is_shown_with_its_reason_on_the_screen() -> None:
    view = view_of(walkthrough_round())
    why = "unknown: 0 runs have ended on the log, 3 are needed"
    screen = io.StringIO()
    Console(file=screen, width=400, color_system=None).print(render(view, "usher", []))
    lines = screen.getvalue().splitlines()
    header = next(line for line in lines if "why it waits" in line)
    at = header.index("starts")
    row = lines.index(next(line for line in lines if "user-a/second" in line))
    cell = " ".join(line[at:].split("  ")[0].strip() for line in lines[row : row + 2])
    assert cell == why  # the column wraps it over two lines


def cannot_start_now(now: float) -> Log:
    """Three jobs that no pass at ``now`` admits, on a log where history says runs end soon:
    user-a/next waits (QuotaExceeded) behind user-a/running, which declares no end and has
    run for six hours, longer than every run on record; user-c/held waits under a held
    Department-b; user-b/mars asks for a zone no dequeuer serves."""
    log = waiting_behind_a_run(now - 6 * 3600 + 90)  # user-a/running started 6 h before now
    held = NodeHeld(
        node=B, mode="Hold", by="admin", at_ms=Millis(BASE_MS + int(now * 1000) - 60_000)
    )
    log.add(now - 60, held).job(now - 30, "user-c/held", 10)
    log.add(now - 25, ZoneServed(zone=Zone("default"), replica="default-1"))
    mars = WorkloadObserved(
        workload=WorkloadKey("user-b/mars"),
        namespace="user-b",
        name="mars",
        kind="batch/v1/Job",
        zone=Zone("mars"),
        created_ms=Millis(BASE_MS + int(now * 1000) - 20_000),
        pod_sets=[PodSet(name="main", count=1, requests={"cpu": CPU})],
        suspended=True,
    )
    return log.add(now - 20, mars)


def test_the_live_view_shows_no_now_for_a_job_that_cannot_start() -> None:
    """Issue 28: the live view said "now" for these three; each now says what it waits for."""
    view = view_of(cannot_start_now(NOW_S))
    now = BASE + timedelta(seconds=NOW_S)
    starts = starts_of(view, now)
    assert starts == {
        "user-a/next": "unknown: waits on 1 running job with no declared end (oldest 6h), "
        "longer than any of the 3 runs of queue root-department-a-user-a",
        "user-c/held": "unknown: a node on its path is held (R14): not before "
        "root/Department-b is resumed",
        "user-b/mars": "unknown: no zone it accepts is one this engine decides for: not before "
        "a dequeuer serves zone mars",
    }
    for job in view.jobs:
        if job.estimate is not None:  # the client's typed estimate, with the CLI's words
            assert job.estimate.says == estimated_start(job.estimate, now) == "unknown"
