"""The terminal live view gives each pending job's estimated start as ``usher jobs --start``
words it (issue 19, item 2), and why when it is unknown: on the screen and in plain lines."""

from __future__ import annotations

import io
from datetime import timedelta

from rich.console import Console

from schemas import Millis
from tests.builders.log import BASE, BASE_MS, QA, Log, waiting_behind_a_run, walkthrough_round
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
