"""Console benchmark: a queue page with 10,000 pending jobs, on the server and in a browser.

What it does: folds a log of the two-department tree and ``PENDING`` pending jobs in one queue
(10 cpu each: a few fit, the rest wait for quota) into the console's ``ConsoleLog``, serves
the console from a thread of its own on a free loopback port, and measures a queue page (the
middle page of that queue): ``queue_page_server_ms``, the server's time to answer when the
state is new (one more job on the log each time, so the queue and every pending job's reason
are worked out again, as after any decision), ``queue_page_cached_ms`` when the state has not
moved, and ``queue_page_browser_ms``, headless Chromium's time from asking for the page to its
``load`` event (a new state each time: the server's time included). Medians of ``RUNS`` runs
after a warm-up. Without Chromium the browser number is NaN (reported, not enforced, like
every target).
What it must never do: touch the network beyond loopback, download a browser, or leave the
server thread or the browser running.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from aiohttp import web

from schemas import (
    Envelope,
    EventId,
    Millis,
    PodSet,
    QuotaPath,
    QuotaTreeApplied,
    WorkloadKey,
    WorkloadObserved,
    Zone,
)
from usher.adapters.nats.subjects import Subjects
from usher.console.feed import VIEW_REFRESH_S, ConsoleLog
from usher.console.server import make_app
from usher.core.history.replay import history_of
from usher.core.model.config import EngineConfig
from usher.core.protocol.log import LogEntry
from usher.core.tree.quota_tree import leaf_queue_name, parse_tree
from usher.demo import demo_file
from usher.local.processes import free_port

PENDING = 10_000
RUNS = 7
CHROMIUM = Path("/usr/bin/chromium")
NAMESPACE = "user-a"
START = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def _observed(n: int) -> WorkloadObserved:
    name = f"job-{n:05d}"
    return WorkloadObserved(
        workload=WorkloadKey(f"{NAMESPACE}/{name}"),
        namespace=NAMESPACE,
        name=name,
        kind="batch/v1/Job",
        zone=Zone("default"),
        priority=n % 3,
        created_ms=Millis(int(START.timestamp() * 1000) + n),
        pod_sets=[PodSet(name="main", count=1, requests={"cpu": 10_000, "memory": 2**30})],
    )


SUBJECTS = Subjects("bench")


def _envelope(n: int, event: QuotaTreeApplied | WorkloadObserved) -> tuple[str, Envelope]:
    """``event`` on its own subject: a reader believes a tree or a job only there."""
    at = START + timedelta(milliseconds=n)
    subject = (
        SUBJECTS.quota
        if isinstance(event, QuotaTreeApplied)
        else SUBJECTS.job(event.zone, event.namespace, event.name)
    )
    return subject, Envelope(id=EventId(f"bench:{n}"), time=at, source="bench", event=event)


def build_log(pending: int) -> tuple[list[LogEntry], str]:
    """The demo tree and ``pending`` jobs of user-a; the queue they wait in."""
    root = parse_tree(yaml.safe_load(demo_file("walkthrough-tree.yaml").read_text()))
    envelopes = [_envelope(0, QuotaTreeApplied(root=root))]
    envelopes += [_envelope(n, _observed(n)) for n in range(1, pending + 1)]
    leaf = next(c for c in root.children if NAMESPACE in c.namespaces)
    return history_of(envelopes).items, leaf_queue_name(QuotaPath(f"root/{leaf.name}"), leaf)


class Served:
    """The console over ``log`` in a thread with its own event loop, on ``port``."""

    def __init__(self, log: ConsoleLog, port: int) -> None:
        self.log, self.port = log, port
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        runner = web.AppRunner(make_app(self.log), access_log=None)
        self.loop.run_until_complete(runner.setup())
        self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())

    def apply(self, items: list[LogEntry]) -> None:
        """Fold entries in on the server's own loop (the live streams live there)."""
        done = threading.Event()

        def fold() -> None:
            self.log.apply(items)
            done.set()

        self.loop.call_soon_threadsafe(fold)
        done.wait()

    @contextmanager
    def running(self) -> Iterator[Served]:
        self.thread.start()
        self.ready.wait(30)
        try:
            yield self
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)


def _get_ms(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as response:
        body = response.read()
        assert response.status == 200 and b"job-" in body
    return (time.perf_counter() - started) * 1000


def _browser_ms(url: str, move: Callable[[], None]) -> list[float]:
    """Chromium's time from asking for the page to its load event, the state new each time."""
    if not CHROMIUM.exists():
        return []
    from tests.console.browser import chromium  # the tests' launch: Debian's, no network

    out = []
    with chromium() as context:
        page = context.new_page()
        page.goto(url, wait_until="load")  # warm-up: the browser's own start
        for _ in range(RUNS):
            move()
            started = time.perf_counter()
            page.goto(url, wait_until="load")
            out.append((time.perf_counter() - started) * 1000)
            assert page.locator("tr[data-job]").count() > 0
    return out


def run(quick: bool) -> dict[str, float]:
    """Run the benchmark; return its numbers."""
    pending = PENDING // 10 if quick else PENDING
    items, queue = build_log(pending)
    log = ConsoleLog(EngineConfig())
    log.apply(items)
    log.caught_up.set()
    port = free_port()
    page = pending // 100 // 2 or 1
    url = f"http://127.0.0.1:{port}/queue/{queue}?page={page}"
    served = Served(log, port)
    extra = [pending + 1]

    def move() -> None:
        """One more job on the log: the next answer works the whole state out again."""
        time.sleep(VIEW_REFRESH_S)  # the console does so at most this often
        served.apply([_bump(extra[0])])
        extra[0] += 1

    fresh, cached = [], []
    with served.running():
        _get_ms(url)  # warm-up
        for _ in range(RUNS):
            move()
            fresh.append(_get_ms(url))
            cached.append(_get_ms(url))
        browser = _browser_ms(url, move)
    return {
        "pending_jobs": float(pending),
        "queue_page_server_ms": statistics.median(fresh),
        "queue_page_cached_ms": statistics.median(cached),
        "queue_page_browser_ms": statistics.median(browser) if browser else math.nan,
    }


def _bump(n: int) -> LogEntry:
    """One more job on the log at the next position: the state moves."""
    [entry] = history_of([_envelope(n, _observed(n))]).items
    return LogEntry(
        seq=n + 1, subject=entry.subject, envelope=entry.envelope, time_ms=entry.time_ms
    )
