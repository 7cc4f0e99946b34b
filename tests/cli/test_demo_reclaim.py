"""The demo's reclaim burst really reclaims, and the live view names a head of queue that Round
keeps passing over.

Played in the pure core as the running system does it: the demo's own tree and
PriorityClasses, jobs as `usher submit` builds them (``job_manifest``) turned into events by
the scenario loader, an engine deciding (victims stop at once, as in scenarios), and what it
decides folded by ``PeopleProjection`` -- the projection the live view and the demo read.
"""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import yaml
from rich.console import Console

from schemas import (
    DEFAULT_ZONE,
    Admitted,
    ClusterEvent,
    Envelope,
    EventId,
    LogEvent,
    Millis,
    Preempted,
    Released,
    WorkloadFinished,
    WorkloadKey,
)
from tests.builders.log import SUBJECTS
from usher.cli.live import render
from usher.client.manifests import JobRequest, job_manifest
from usher.client.state import LONG_AT_HEAD_S, PeopleProjection, now_ms
from usher.core.engine.facade import Engine
from usher.core.history import sim as simulator
from usher.core.model.config import EngineConfig
from usher.core.protocol.log import log_entry
from usher.demo import DEMO_FILES, demo_file
from usher.demo.driver import Burst, reclaim_burst


class Playback:
    """An engine deciding in scenario mode, its inputs and decisions folded by
    ``PeopleProjection``."""

    def __init__(self, config: EngineConfig | None = None, *, track_skips: bool = False) -> None:
        objects: list[Any] = []
        for name in DEMO_FILES:
            objects.extend(yaml.safe_load_all(demo_file(name).read_text()))
        self.scenario = simulator.load_scenario({"name": "demo", "objects": objects}, "demo")
        self.engine = Engine(replace(config or EngineConfig(), instant_release=True))
        self.state = PeopleProjection(config or EngineConfig(), track_skips=track_skips)
        self.decisions: list[LogEvent] = []
        self.seq = 0
        for event in self.scenario.setup:
            self.engine.apply(event, Millis(0))
            self._log(event, 0)

    def _log(self, event: LogEvent, at_ms: int) -> None:
        self.seq += 1
        when = datetime.fromtimestamp(at_ms / 1000, tz=UTC)
        subject, source = SUBJECTS.owner(event, DEFAULT_ZONE)
        envelope = Envelope(id=EventId(f"t:{self.seq}"), time=when, source=source, event=event)
        self.state.apply(log_entry(self.seq, subject, envelope))

    def submit(self, at_s: float, request: JobRequest) -> None:
        """The job as `usher submit` would create it, then a decision pass (and its wakeups)."""
        timeline = [{"at": at_s, "name": request.name, "create": job_manifest(request)}]
        loaded = simulator.load_scenario({"name": "step", "timeline": timeline}, "step")
        self.feed(at_s, [step.event for step in loaded.steps])

    def finish(self, at_s: float, key: str) -> None:
        """The job ends, and the ledger logs its release (the deciding engine releases at
        once; the people's view, like the running system's readers, waits for ``Released``)."""
        workload = WorkloadKey(key)
        requests = self.engine.counted_requests(workload)
        admitted = [d for d in self.decisions if isinstance(d, Admitted) and d.workload == key]
        self.feed(at_s, [WorkloadFinished(workload=workload)])
        if requests is not None and admitted:
            quota = admitted[-1].quota
            released = Released(workload=workload, quota=quota, requests=requests, cause="Finished")
            self._log(released, int(at_s * 1000))

    def feed(self, at_s: float, events: list[ClusterEvent]) -> None:
        at_ms = int(at_s * 1000)
        for event in events:
            self.engine.apply(event, Millis(at_ms))
            self._log(event, at_ms)
        for _ in range(5):  # a reclaim admits its preemptor in the pass after its victims stop
            decided = self.engine.decide(Millis(at_ms))
            if not decided:
                break
            for decision in decided:
                self.decisions.append(decision)
                self._log(decision, at_ms)


def job(name: str, namespace: str, replicas: int, cpu: str, memory: str, **more: Any) -> JobRequest:
    return JobRequest(
        namespace=namespace,
        image="busybox",
        name=name,
        cpu=cpu,
        memory=memory,
        replicas=replicas,
        duration_s=30,
        **more,
    )


def borrowing_cluster() -> Playback:
    """Department-a borrows 30 cpu; Department-b runs a job holding 16Gi of its 40Gi (the
    issue's case: the old burst, 3 x 10 cpu with 20Gi each, asked 60Gi and could never
    reclaim)."""
    play = Playback()
    play.submit(1, job("big", "user-a", 6, "10", "10Gi"))
    play.submit(2, job("borrow", "user-b", 3, "10", "1Gi"))
    play.submit(3, job("steady", "user-c", 1, "2", "16Gi"))
    admitted = {d.workload for d in play.decisions if isinstance(d, Admitted)}
    assert admitted == {"user-a/big", "user-b/borrow", "user-c/steady"}
    return play


def test_the_old_burst_could_never_reclaim() -> None:
    """What the demo used to send: 3 x 10 cpu with 20Gi each, 60Gi > Department-b's 40Gi."""
    play = borrowing_cluster()
    old = job("old", "user-c", 3, "10", "20Gi", priority_class="priority-3")
    before = len(play.decisions)
    play.submit(10, old)
    assert not any(isinstance(d, Admitted | Preempted) for d in play.decisions[before:])
    [waiting] = [j for j in play.state.view(Millis(10_000)).jobs if j.job == "user-c/old"]
    assert waiting.state == "Pending"  # and it stays so while Department-a borrows


def test_the_burst_is_sized_to_reclaim_and_does() -> None:
    play = borrowing_cluster()
    burst = reclaim_burst(play.state.view(now_ms(), reasons_too=False).quota)
    # 38 cpu and 24Gi are left of Department-b's guarantee; 8 cpu are free in the cluster.
    assert burst == Burst(replicas=3, cpu="12", memory="8Gi")

    before = len(play.decisions)
    play.submit(
        10,
        job(
            "burst", "user-c", burst.replicas, burst.cpu, burst.memory or "",
            priority_class="priority-3",
        ),
    )  # fmt: skip
    after = play.decisions[before:]
    victims = {d.workload for d in after if isinstance(d, Preempted)}
    assert victims and victims <= {"user-a/big", "user-b/borrow"}
    assert any(isinstance(d, Admitted) and d.workload == "user-c/burst" for d in after)


def test_no_burst_while_nobody_borrows() -> None:
    """Nobody to reclaim from: the burst waits (the driver tries again on its next tick)."""
    play = Playback()
    assert (
        reclaim_burst(play.state.view(now_ms(), reasons_too=False).quota) is None
    )  # empty cluster
    play.submit(1, job("big", "user-a", 6, "10", "10Gi"))  # exactly Department-a's 60
    assert reclaim_burst(play.state.view(now_ms(), reasons_too=False).quota) is None
    play.submit(2, job("more", "user-b", 1, "5", "1Gi"))  # now it borrows 5
    assert reclaim_burst(play.state.view(now_ms(), reasons_too=False).quota) == Burst(
        3, "13", "13Gi"
    )


def test_the_live_view_names_a_large_head_that_round_passes_over() -> None:
    play = Playback(track_skips=True)
    play.submit(0, job("hog", "user-a", 9, "10", "1Gi"))  # 90 of 100 cpu
    play.submit(1, job("large", "user-b", 4, "10", "1Gi"))  # 40 cpu: waits at the head
    play.submit(2, job("small-1", "user-b", 1, "5", "1Gi"))  # fits: Round admits it past
    play.submit(3, job("small-2", "user-b", 1, "5", "1Gi"))
    queue_of_large = next(q for q in play.state.view(now_ms()).queues if "user-b" in q.namespaces)
    assert queue_of_large.pending[0].job == "user-b/large"

    soon = play.state.view(Millis(int((2 + LONG_AT_HEAD_S - 1) * 1000)))
    assert soon.skipped_heads == []  # not long yet
    later = play.state.view(Millis(int((2 + LONG_AT_HEAD_S + 30) * 1000)))
    [head] = later.skipped_heads
    assert (head.job, head.queue, head.skipped) == ("user-b/large", queue_of_large.name, 2)
    assert head.requests["cpu"] == "40"
    assert head.describe() == (
        f"user-b/large (40 cpu, 4Gi memory) has waited 1m30s at the head of "
        f"{queue_of_large.name}: 2 later jobs admitted past it (Round skips a job that does "
        "not fit)"
    )
    screen = Console(width=250, record=True, file=io.StringIO())
    screen.print(render(later, "Usher", []))
    assert head.describe() in screen.export_text()
    # Once it runs, nothing is said any more.
    play.finish(95, "user-a/hog")
    assert play.state.engine.job_state(WorkloadKey("user-b/large")).state == "Admitted"  # type: ignore[union-attr]
    assert play.state.view(Millis(200_000)).skipped_heads == []
