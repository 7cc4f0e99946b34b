"""The console suite's log (``bench.console.build_log``) is one a reader believes: its tree
and jobs are on their own subjects, so the queue the suite asks for is there with every job.
(Written on subjects of no owner, the tree was ignored and the suite's every request got a
404 for a year's worth of ``make bench`` runs.)"""

from __future__ import annotations

from bench.console import build_log
from usher.console.feed import ConsoleLog
from usher.core.model.config import EngineConfig


def test_the_queue_the_suite_pages_through_holds_its_jobs() -> None:
    items, queue = build_log(250)
    log = ConsoleLog(EngineConfig())
    log.apply(items)
    view = log.view()
    [shown] = [q for q in view.queues if q.name == queue]
    assert len(shown.pending) == 250
