"""The pages' script (console.js) in a real browser, against the console served in-process.

No ``usher up``: the console's application serves a log written in memory (``ConsoleLog``
folds it exactly as the running console folds what it reads) from a thread of its own, so a
test can grow the log, or take the server away and bring it back on the same port, while
headless Chromium watches: the live decision rows follow the URL's filters (not an unsubmitted
form, and never on an older page), the corner says "disconnected" while the stream is down and
recovers when it is back, and the time travel slider reaches each new log position.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from aiohttp import web
from playwright.sync_api import expect

from tests.console.browser import chromium, skip_without_chromium
from tests.console.test_console_pages import reclaim_log
from usher.console.feed import ConsoleLog
from usher.console.server import make_app
from usher.core.model.config import EngineConfig
from usher.core.protocol.log import LogEntry
from usher.local.processes import free_port

skip_without_chromium()

T = TypeVar("T")
TIMEOUT_MS = 10_000


class Served:
    """``make_app(feed)`` on 127.0.0.1 from a thread with its own event loop; unlike
    ``bench/console.py``'s, it can take the server away and bring it back on the same port."""

    def __init__(self, feed: ConsoleLog) -> None:
        self.feed = feed
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.port = free_port()  # kept across a stop and a start
        self.runner: web.AppRunner | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout=30)

    def start(self) -> None:
        async def start() -> web.AppRunner:
            runner = web.AppRunner(make_app(self.feed), shutdown_timeout=1.0)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.port, reuse_address=True).start()
            return runner

        self.runner = self.run(start())

    def stop(self) -> None:
        if self.runner is not None:
            self.run(self.runner.cleanup())
            self.runner = None

    def apply(self, items: list[LogEntry]) -> None:
        async def apply() -> None:
            self.feed.apply(items)  # on the server's loop: it wakes the live streams

        self.run(apply())

    def close(self) -> None:
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def served() -> Iterator[tuple[Served, list[LogEntry]]]:
    """The reclaim log's first three entries served (one admit); the rest to apply."""
    items = reclaim_log().history().items
    feed = ConsoleLog(EngineConfig())
    feed.apply(items[:3])
    feed.caught_up.set()
    server = Served(feed)
    try:
        yield server, [i for i in items[3:] if isinstance(i, LogEntry)]
    finally:
        server.close()


@pytest.fixture
def page() -> Iterator[Any]:
    with chromium() as browser:
        yield browser.new_page()


def _wait_seq(page: Any, seq: int) -> None:
    # Selector-based waits: the console's CSP (script-src 'self') forbids the eval that
    # wait_for_function's string predicates need.
    expect(page.locator("#seq")).to_have_attribute("data-seq", str(seq), timeout=TIMEOUT_MS)


def _rows(page: Any) -> list[str]:
    rows = page.locator("#decision-rows tr[data-seq]")
    return [str(rows.nth(i).get_attribute("data-seq")) for i in range(rows.count())]


def test_live_rows_follow_the_urls_filters(
    served: tuple[Served, list[LogEntry]], page: Any
) -> None:
    server, rest = served
    page.goto(server.url + "/decisions?action=preempt", wait_until="domcontentloaded")
    _wait_seq(page, 3)
    page.locator("select[name=action]").select_option("")  # changed, never submitted
    server.apply(rest)  # 6 preempt, 7 release, 8 admit
    _wait_seq(page, 8)
    page.wait_for_selector('#decision-rows tr[data-seq="6"]', timeout=TIMEOUT_MS)
    page.wait_for_timeout(300)  # any other row would have come with the same events
    assert _rows(page) == ["6"]


def test_an_older_page_of_decisions_stays_as_it_is(
    served: tuple[Served, list[LogEntry]], page: Any
) -> None:
    server, rest = served
    page.goto(server.url + "/decisions?before=4", wait_until="domcontentloaded")
    _wait_seq(page, 3)
    server.apply(rest)
    _wait_seq(page, 8)
    page.wait_for_timeout(300)
    assert _rows(page) == ["3"]


def test_the_corner_says_disconnected_while_the_stream_is_down(
    served: tuple[Served, list[LogEntry]], page: Any
) -> None:
    server, rest = served
    page.goto(server.url + "/decisions", wait_until="domcontentloaded")
    _wait_seq(page, 3)
    assert page.locator("#link").is_hidden()
    server.stop()
    page.wait_for_selector("#live.down", timeout=TIMEOUT_MS)
    assert page.locator("#link").inner_text() == "disconnected, retrying"
    server.apply(rest)  # decided while the page could not hear
    server.start()
    page.wait_for_selector("#live:not(.down)", timeout=TIMEOUT_MS)
    _wait_seq(page, 8)
    page.wait_for_selector('#decision-rows tr[data-seq="8"]', timeout=TIMEOUT_MS)
    assert page.locator("#link").is_hidden()


def test_the_time_travel_slider_reaches_each_new_position(
    served: tuple[Served, list[LogEntry]], page: Any
) -> None:
    server, rest = served
    page.goto(server.url + "/replay", wait_until="domcontentloaded")
    _wait_seq(page, 3)
    assert page.locator("#travel-seq").get_attribute("max") == "3"
    server.apply(rest)
    expect(page.locator("#travel-seq")).to_have_attribute("max", "8", timeout=TIMEOUT_MS)
    assert page.locator("#travel-last").inner_text() == "8"
