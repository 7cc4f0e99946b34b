"""The console's pages and live stream over a log written in memory (no servers, no browser).

The log is folded by ``ConsoleLog`` exactly as the running console folds what it reads; the
pages are asked for through aiohttp's test client.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from schemas import Millis, NodeHeld, NodeResumed, QuotaPath
from tests.builders.log import BASE_MS, QA, B, Log, waiting_behind_a_run
from usher.console import pages
from usher.console.feed import SAMPLE_MS, ConsoleLog
from usher.console.server import make_app
from usher.core.history import replay as hist
from usher.core.model.config import EngineConfig


def reclaim_log() -> Log:
    """user-a/big borrows; user-c/urgent reclaims Department-b's guarantee from it."""
    return (
        Log()
        .tree(0)
        .job(1, "user-a/big", 60)
        .admitted(2, "user-a/big", 60)
        .job(3, "user-a/next", 50)
        .job(20, "user-c/urgent", 30)
        .preempted(21, "user-a/big", "user-c/urgent")
        .released(22, "user-a/big", 60, "Preempted")
        .admitted(23, "user-c/urgent", 30, quota=B)
    )


def folded(log: Log) -> ConsoleLog:
    feed = ConsoleLog(EngineConfig())
    feed.apply(log.history().items)
    feed.caught_up.set()
    return feed


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    async with TestClient(TestServer(make_app(folded(reclaim_log())))) as test_client:
        yield test_client


async def page(client: TestClient, path: str) -> str:
    response = await client.get(path)
    assert response.status == 200, await response.text()
    return await response.text()


async def test_the_tree_page_shows_used_min_max_and_each_queues_head(client: TestClient) -> None:
    text = await page(client, "/")
    row = text.split('data-path="root/Department-a"')[1].split("</tr>")[0]
    cpu = row.split('data-resource="cpu">')[1]
    assert re.sub(r"<[^>]+>", "", cpu.split("</td>")[0]).split() == ["0", "/", "60", "/", "100"]
    glance = text.split("Queues at a glance")[1]
    assert '<a href="/job/user-a/big">user-a/big</a>' in glance  # the head of its queue


def test_loans_name_borrowers_and_the_unused_guarantees_they_run_on() -> None:
    feed = folded(Log().tree(0).job(1, "user-a/big", 80).admitted(2, "user-a/big", 80))
    [loan] = pages.loans(feed.view().quota)
    assert loan.parent == "root" and loan.resource == "cpu"
    assert loan.borrowers == ["Department-a (20 beyond its min 60)"]
    assert loan.lenders == ["Department-b (40 of its min 40 unused)"]


async def test_a_queue_of_10000_renders_one_page_at_a_time() -> None:
    log = Log().tree(0)
    for n in range(10_000):
        log.job(1 + n / 1000, f"user-a/job-{n:05d}", 70)
    async with TestClient(TestServer(make_app(folded(log)))) as test_client:
        text = await page(test_client, f"/queue/{QA}?page=50")
        positions = [int(p) for p in re.findall(r'class="position">(\d+)<', text)]
        assert positions == list(range(4901, 5001))
        assert "page 50 of 100" in text and 'rel="next"' in text
        last = await page(test_client, f"/queue/{QA}?page=100")
        assert "page 100 of 100" in last and 'rel="next"' not in last
        assert len(last) < 100_000  # one page, never the whole queue
        for beyond in ("999", "999999999", "0", "-3"):  # refused, never clamped (issue 21)
            response = await test_client.get(f"/queue/{QA}?page={beyond}")
            assert response.status == 400
            assert f"page must be from 1 to 100 (10000 jobs, 100 a page); got {beyond}" in (
                await response.text()
            )


async def test_a_jobs_page_tells_its_story_and_links_its_preemptor(client: TestClient) -> None:
    text = await page(client, "/job/user-a/big")
    story = text.split('id="timeline"')[1]
    assert [m for m in re.findall(r'<span class="what">(\w+)</span>', story)] == [
        "observed",
        "Admitted",
        "Preempted",
        "Released",
    ]
    assert '<a class="preemptor" href="/job/user-c/urgent">user-c/urgent</a>' in story
    urgent = await page(client, "/job/user-c/urgent")
    assert '<a class="victim" href="/job/user-a/big">user-a/big</a>' in urgent
    assert (await client.get("/job/user-a/nobody")).status == 404


async def test_a_pending_jobs_page_gives_its_estimated_start(client: TestClient) -> None:
    text = await page(client, "/job/user-a/big")
    assert '<dt>estimated start</dt><dd id="start">' in text
    assert "(the next decision pass admits it)" in text.split('id="start">')[1].split("</dd>")[0]
    admitted = await page(client, "/job/user-c/urgent")
    assert 'id="start"' not in admitted


def cell(text: str, job: str, klass: str = "start") -> str:
    """The text of the ``klass`` cell of ``job``'s row (tags dropped, entities kept)."""
    row = text.split(f'<tr data-job="{job}">')[1].split("</tr>")[0]
    inside = row.split(f'<td class="{klass}"')[1].split(">", 1)[1].split("</td>")[0]
    return re.sub(r"<[^>]+>", "", inside)


async def test_each_pending_row_gives_its_estimated_start_as_usher_jobs_words_it() -> None:
    now = time.time() - BASE_MS / 1000  # seconds after the builder's BASE
    async with TestClient(TestServer(make_app(folded(waiting_behind_a_run(now))))) as test_client:
        for path in (f"/queue/{QA}", "/queues"):
            text = await page(test_client, path)
            assert "<th" in text and ">starts</th>" in text
            assert cell(text, "user-a/next") == "~18m (8m-28m)"
            row = text.split('<tr data-job="user-a/next">')[1].split("</tr>")[0]
            assert 'title="0 ahead in root-department-a-user-a, 1 running under ' in row
        glance = (await page(test_client, "/")).split("Queues at a glance")[1]
        head = glance.split('href="/job/user-a/next"')[1].split("</tr>")[0]
        assert '<td class="start"' in head and ">~18m (8m-28m)</td>" in head
        story = await page(test_client, "/job/user-a/next")
        start = story.split('id="start">')[1].split("</dd>")[0]
        assert start.startswith("~18m (8m-28m): at 20"), start
        assert "(p25 " in start and "3 runs of queue root-department-a-user-a" in start


async def test_an_unknown_start_says_why(client: TestClient) -> None:
    text = await page(client, f"/queue/{QA}")
    assert cell(text, "user-a/big") == "now"  # the next pass admits it
    why = "unknown: 1 run has ended on the log, 3 are needed"
    assert cell(text, "user-a/next") == why
    story = await page(client, "/job/user-a/next")
    assert story.split('id="start">')[1].split("</dd>")[0] == why


async def test_the_decision_stream_filters(client: TestClient) -> None:
    def actions(text: str) -> list[str]:
        return re.findall(r'<tr class="(\w+)" data-seq', text)

    assert actions(await page(client, "/decisions")) == ["admit", "release", "preempt", "admit"]
    assert actions(await page(client, "/decisions?action=preempt")) == ["preempt"]
    assert actions(await page(client, "/decisions?namespace=user-c")) == ["admit"]
    queue_b = "root-department-b-user-c"
    assert actions(await page(client, f"/decisions?queue={queue_b}")) == ["admit"]


async def test_time_travel_prints_what_usher_replay_prints(client: TestClient) -> None:
    history = reclaim_log().history()
    for seq in (3, 6, 8):
        text = await page(client, f"/replay?seq={seq}")
        shown = text.split('<pre id="replay-text">')[1].split("</pre>")[0]
        state = hist.replay(history, EngineConfig(), until_seq=seq)
        expected = hist.render_replay_table(state)
        assert shown.replace("&gt;", ">").replace("&lt;", "<") == expected


async def test_the_live_stream_tells_each_new_decision() -> None:
    log = reclaim_log()
    items = log.history().items
    feed = ConsoleLog(EngineConfig())
    feed.apply(items[:3])
    feed.caught_up.set()
    async with TestClient(TestServer(make_app(feed))) as test_client:
        response = await test_client.get("/events")
        assert response.headers["Content-Type"] == "text/event-stream"
        first = await response.content.readuntil(b"\n\n")
        assert b"event: seq\ndata: 3" in first
        feed.apply(items[3:])
        events = b""
        while b"data: 8\n\n" not in events:
            events += await asyncio.wait_for(response.content.readuntil(b"\n\n"), timeout=5)
        decisions = re.findall(rb'event: decision\ndata: \{"seq":(\d+).*?"action":"(\w+)"', events)
        assert decisions == [(b"6", b"preempt"), (b"7", b"release"), (b"8", b"admit")]
        response.close()


async def test_the_console_changes_nothing(client: TestClient) -> None:
    for path in ("/", "/decisions", "/replay", "/job/user-a/big"):
        assert (await client.post(path)).status == 405


def test_samples_and_waits_follow_log_time() -> None:
    log = Log().tree(0).job(1, "user-a/a", 10).job(2, "user-a/b", 90)
    log.admitted(31, "user-a/a", 10).job(47, "user-a/c", 10)
    feed = folded(log)
    assert [s.time_ms - BASE_MS for s in feed.samples] == [SAMPLE_MS, 2 * SAMPLE_MS, 3 * SAMPLE_MS]
    assert [s.pending.get(QA) for s in feed.samples] == [2, 2, 1]
    assert [s.admitted.get(QA, 0) for s in feed.samples] == [0, 0, 1]
    [wait] = feed.waits
    assert (wait.job, wait.queue, wait.wait_s) == ("user-a/a", QA, 30.0)


# --------------------------------------------------------------------------- what a new user met


async def refused(client: TestClient, path: str, status: int = 400) -> str:
    """The error page ``path`` answers: a page of the site (its navigation), never bare text."""
    response = await client.get(path)
    text = await response.text()
    assert response.status == status, text
    assert response.headers["Content-Type"].startswith("text/html")
    assert '<a href="/queues">Queues</a>' in text  # the site's navigation
    return text.split('id="error">')[1].split("</p>")[0]


async def test_unknown_decision_filters_are_refused_naming_what_there_is(
    client: TestClient,
) -> None:
    message = await refused(client, "/decisions?queue=<script>&namespace=junk&action=drop")
    assert message.startswith("queue: no queue &#39;&lt;script&gt;&#39; (queues of the tree")
    assert "root-department-a-user-a" in message and "<script>" not in message
    message = await refused(client, "/decisions?namespace=junk")
    assert message.startswith("namespace: no namespace &#39;junk&#39;") and "user-c" in message
    message = await refused(client, "/decisions?action=drop")
    assert message == "action: no action &#39;drop&#39; (actions: " + ", ".join(pages.ACTIONS) + ")"


async def test_positions_beyond_the_log_are_refused_not_clamped(client: TestClient) -> None:
    for seq in (-5, 9, 10**9):
        message = await refused(client, f"/replay?seq={seq}")
        assert message == f"seq must be a log position from 0 to 8 (the last read); got {seq}"
    assert (
        await refused(client, "/replay?seq=abc") == "seq must be a whole number; got &#39;abc&#39;"
    )
    assert "got -3" in await refused(client, f"/queue/{QA}?page=-3")


async def test_error_pages_say_what_is_there(client: TestClient) -> None:
    message = await refused(client, "/job/user-a/nope", 404)
    assert message.startswith("no job user-a/nope on the log") and "usher jobs" in message
    assert "<code>usher jobs</code>" in message and "`" not in message  # a command, as code
    message = await refused(client, "/queue/<b>nope", 404)
    assert message.startswith("no queue &#39;&lt;b&gt;nope&#39; in the tree in force (queues: ")
    assert "root-department-b-user-c" in message
    assert "/nothing-here" in await refused(client, "/nothing-here", 404)
    assert (await client.post("/")).status == 405


async def test_a_favicon_and_one_column_layout_for_every_queue_table(client: TestClient) -> None:
    icon = await client.get("/favicon.ico")
    assert icon.status == 200 and icon.headers["Content-Type"] == "image/svg+xml"
    assert (await client.get("/static/favicon.svg")).status == 200
    assert 'rel="icon" href="/static/favicon.svg"' in await page(client, "/")
    queues = await page(client, "/queues")
    tables = queues.count('<table class="jobs">')
    assert tables == 2 and queues.count('<colgroup><col class="position">') == tables


def test_a_chart_label_is_its_scale_and_a_single_sample_is_a_dot() -> None:
    jobs = pages.Unit("job", "jobs")
    chart = pages.line_chart("Pending", {"q": [(BASE_MS, 0.4)]}, jobs)
    # the scale's top is 1: so is its label
    assert (chart.y_max, chart.y_zero) == ("1 job", "0")
    [dot] = chart.dots
    assert dot.title == "q: 0.4 jobs at " + chart.x_from
    top = pages.HEIGHT - pages.PAD - (pages.HEIGHT - 2 * pages.PAD)
    two = pages.line_chart("Pending", {"q": [(BASE_MS, 2), (BASE_MS + 1000, 2)]}, jobs)
    assert two.y_max == "2 jobs" and {d.y for d in two.dots} == {top}  # the max is at the top


def test_every_chart_shares_one_time_span() -> None:
    early = {"q": [(BASE_MS, 1.0)]}
    late = {"q": [(BASE_MS + 60_000, 3.0)]}
    span = pages.time_span(early, late)
    assert span == (BASE_MS, BASE_MS + 60_000)
    first = pages.line_chart("a", early, pages.Unit("job", "jobs"), span)
    second = pages.dot_chart("b", late, pages.Unit("s", "s"), span)
    assert (first.x_from, first.x_to) == (second.x_from, second.x_to)
    assert first.dots[0].x == pages.PAD and second.dots[0].x == pages.WIDTH - pages.PAD


async def test_the_charts_page_says_what_each_point_is(client: TestClient) -> None:
    text = await page(client, "/charts")
    assert re.search(
        r"<title>root-department-a-user-a: \d+ jobs? at \d\d:\d\d:\d\d UTC</title>", text
    )
    assert 'class="y-tick y-zero">0<' in text
    # Each chart has its scales: values up the side, clock times along the bottom.
    assert text.count('class="y-tick') >= 2 * text.count("<svg") > 0
    assert re.search(r'class="x-tick">\d\d:\d\d(:\d\d)?<', text)


@pytest.mark.parametrize(
    ("largest", "labels"),
    [
        (0.4, ["0", "1 job"]),
        (2, ["0", "1", "2 jobs"]),
        (7, ["0", "2", "4", "6", "8 jobs"]),
        (37, ["0", "10", "20", "30", "40 jobs"]),
        (100, ["0", "50", "100 jobs"]),
        (101, ["0", "50", "100", "150 jobs"]),
    ],
)
def test_the_value_scale_goes_up_in_round_steps_to_just_above_the_largest(
    largest: float, labels: list[str]
) -> None:
    series = {"q": [(BASE_MS, 0.0), (BASE_MS + 1000, largest)]}
    ticks = pages.y_ticks(series, pages.Unit("job", "jobs"))
    assert [t.label for t in ticks] == labels
    assert ticks[0].at == pages.HEIGHT - pages.PAD and ticks[-1].at == pages.PAD
    assert pages.line_chart("q", series, pages.Unit("job", "jobs")).y_max == labels[-1]


MINUTE = 60_000
ROUND = BASE_MS - BASE_MS % (3600 * 1000)
"""An hour on the clock: ticks fall on round clock times."""


@pytest.mark.parametrize(
    ("span", "step_ms", "count"),
    [
        ((ROUND, ROUND + 30_000), 5_000, 7),  # 30 s: every 5 s
        ((ROUND + 1, ROUND + 30_000), 5_000, 6),  # the first tick is the first round time
        ((ROUND, ROUND + 20 * MINUTE), 5 * MINUTE, 5),
        ((ROUND, ROUND + 3 * 3600 * 1000), 30 * MINUTE, 7),
        ((ROUND, ROUND + 30 * 86_400_000), 5 * 86_400_000, 6),  # days from the epoch's
        ((ROUND, ROUND), 0, 1),  # one instant: one tick
        ((ROUND + 100, ROUND + 900), 800, 2),  # no round second inside: its two ends
    ],
)
def test_the_time_scale_ticks_round_clock_times(
    span: tuple[int, int], step_ms: int, count: int
) -> None:
    ticks = pages.x_ticks(span)
    assert len(ticks) == count <= pages.X_INTERVALS + 1
    xs = [t.at for t in ticks]
    assert xs == sorted(xs) and xs[0] >= pages.PAD and xs[-1] <= pages.WIDTH - pages.PAD
    if step_ms:
        gap = step_ms * (pages.WIDTH - 2 * pages.PAD) / (span[1] - span[0])
        assert all(abs(b - a - gap) < 0.2 for a, b in itertools.pairwise(xs))
    clock = r"\d\d:\d\d(:\d\d(\.\d{3})?)?|\d{4}-\d\d-\d\d"
    assert all(re.fullmatch(clock, t.label) for t in ticks)
    assert len({t.label for t in ticks}) == len(ticks), "every tick reads differently"


def test_decisions_are_paged_from_the_newest() -> None:
    feed = folded(reclaim_log())
    kept = list(feed.people.decisions)
    newest = pages.page_of_decisions(kept, None, 2)
    assert [d.seq for d in newest.items] == [8, 7] and newest.newer == 0
    assert newest.older_before == 7 and newest.newer_before is None
    older = pages.page_of_decisions(kept, newest.older_before, 2)
    assert [d.seq for d in older.items] == [6, 3] and older.newer == 2
    assert older.older_before is None and older.newer_before is None  # newer is the newest


async def test_the_decisions_page_says_what_it_shows(client: TestClient) -> None:
    text = await page(client, "/decisions?action=admit")
    assert "Showing 1 to 2 of the 2 decisions this filter keeps, newest first" in text
    assert 'data-live="yes"' in text
    old = await page(client, "/decisions?action=admit&before=8")
    assert re.findall(r'<tr class="(\w+)" data-seq="(\d+)"', old) == [("admit", "3")]
    assert 'data-live="no"' in old and 'href="?action=admit">the newest, live' in old
    assert 'rel="prev" href="?action=admit">newer' in old
    assert "got 0" in await refused(client, "/decisions?before=0")


async def test_queue_rows_show_how_long_each_job_waits_and_what_it_asks(
    client: TestClient,
) -> None:
    text = await page(client, f"/queue/{QA}")
    row = text.split('data-job="user-a/next"')[1].split("</tr>")[0]
    assert re.search(r'<td class="age">\d+[smhd]</td>', row)
    assert '<td class="requests">cpu 50</td>' in row


async def test_a_jobs_page_counts_its_preemptions_and_links_its_blocker() -> None:
    log = Log().tree(0).job(1, "user-a/big", 60).admitted(2, "user-a/big", 60)
    log.job(3, "user-a/head", 50).job(4, "user-a/small", 10)
    feed = ConsoleLog(EngineConfig(policy="Block"))
    feed.apply(log.history().items)
    feed.caught_up.set()
    async with TestClient(TestServer(make_app(feed))) as test_client:
        small = await page(test_client, "/job/user-a/small")
        assert '<a class="blocker" href="/job/user-a/head">user-a/head</a>' in small
        assert re.search(r'<dd id="waiting">\d+[smhd] since it was created</dd>', small)
        assert '<dd id="preempted">never</dd>' in small


async def test_a_preempted_jobs_page_says_how_often(client: TestClient) -> None:
    assert '<dd id="preempted">1 time</dd>' in await page(client, "/job/user-a/big")


async def test_time_travel_shows_the_quota_as_the_tree_page_does(client: TestClient) -> None:
    text = await page(client, "/replay?seq=3")  # user-a/big admitted: 60 cpu of Department-a
    row = text.split('id="replay-quota"')[1].split('data-path="root/Department-a"')[1]
    assert '<div class="bar within"' in row.split("</tr>")[0]
    cpu = row.split('data-resource="cpu">')[1].split("</td>")[0]
    assert re.sub(r"<[^>]+>", "", cpu).split() == ["60", "/", "60", "/", "100"]
    assert '<td class="reason">' in text  # the reasons' cells wrap (console.css)


async def test_a_queue_row_links_the_job_in_its_way() -> None:
    log = Log().tree(0).job(1, "user-a/big", 60).admitted(2, "user-a/big", 60)
    log.job(3, "user-a/head", 50).job(4, "user-a/small", 10)
    feed = ConsoleLog(EngineConfig(policy="Block"))
    feed.apply(log.history().items)
    feed.caught_up.set()
    async with TestClient(TestServer(make_app(feed))) as test_client:
        for path in (f"/queue/{QA}", "/queues"):
            text = await page(test_client, path)
            row = text.split('data-job="user-a/small"')[1].split("</tr>")[0]
            assert "<b>BlockedByHead</b>" in row
            assert '(<a class="blocker" href="/job/user-a/head">user-a/head</a>)' in row
            head = text.split('data-job="user-a/head"')[1].split("</tr>")[0]
            assert 'class="blocker"' not in head


async def test_a_held_queue_says_who_held_it_and_why() -> None:
    """R14 on the queue pages: the hold (node, who, when, why) while it lasts, nothing after."""
    department = QuotaPath("root/Department-a")
    log = reclaim_log().add(
        30,
        NodeHeld(
            node=department,
            mode="Hold",
            by="alice",
            reason="GPU maintenance",
            at_ms=Millis(BASE_MS + 30_000),
        ),
    )
    async with TestClient(TestServer(make_app(folded(log)))) as held:
        for path in (f"/queue/{QA}", "/queues"):
            text = await page(held, path)
            assert "Held: root/Department-a held by alice at 2024-05-01T12:00:30Z" in text
            assert "GPU maintenance" in text
    log.add(40, NodeResumed(node=department, by="alice", at_ms=Millis(BASE_MS + 40_000)))
    async with TestClient(TestServer(make_app(folded(log)))) as resumed:
        assert "data-hold" not in await page(resumed, f"/queue/{QA}")
