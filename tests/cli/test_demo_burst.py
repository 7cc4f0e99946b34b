"""The demo's burst story (Z3) does what it says, played in the pure core as the running
system plays it: the demo's tree with the root attributes the demo adds, the nodes ``usher up
--burst-zones eci`` gives the cluster (zone a's node, the virtual node of eci), the story's
jobs as ``usher submit`` builds them, an engine deciding (victims stop at once)."""

from __future__ import annotations

from schemas import Admitted, Preempted, WorkloadKey
from tests.builders.demo import story_request, story_setup, walkthrough_tree
from tests.cli.test_demo_reclaim import Playback
from usher.demo.burst import burst_attributes, story_jobs
from usher.local.cluster import NODE_ALLOCATABLE
from usher.local.kube_emulator.virtual_node import VIRTUAL_ALLOCATABLE


def _cluster(attributes: dict[str, str]) -> Playback:
    """The demo's system once the burst zone is marked (``attributes`` on the tree's root)."""
    tree = walkthrough_tree()
    tree["spec"]["root"]["attributes"] = attributes
    nodes = [
        {"name": "node-a", "zone": "a", "allocatable": dict(NODE_ALLOCATABLE)},
        {"name": "virtual-node-eci", "zone": "eci", "allocatable": dict(VIRTUAL_ALLOCATABLE)},
    ]
    play = Playback()
    play.feed(0, story_setup("burst", tree, nodes))
    return play


def _play(attributes: dict[str, str]) -> tuple[list[Admitted], list[Preempted]]:
    admitted, preempted, _ = _played(attributes)
    return admitted, preempted


def _played(attributes: dict[str, str]) -> tuple[list[Admitted], list[Preempted], Playback]:
    play = _cluster(attributes)
    fill, burst, run, reclaim = story_jobs("a", "eci")
    play.submit(1, story_request(fill))
    play.submit(1, story_request(burst))
    play.finish(4, fill.key)
    play.submit(5, story_request(run))
    play.submit(6, story_request(reclaim))
    admitted = [d for d in play.decisions if isinstance(d, Admitted)]
    return admitted, [d for d in play.decisions if isinstance(d, Preempted)], play


def test_the_story_bursts_then_reclaims_the_burst_job_first() -> None:
    admitted, preempted = _play(burst_attributes("a", "eci"))
    zones = {d.workload: d.zone for d in admitted}
    assert zones == {
        WorkloadKey("user-a/fill-a"): "a",
        WorkloadKey("user-b/burst-eci"): "eci",
        WorkloadKey("user-a/run-a"): "a",
        WorkloadKey("user-c/reclaim-burst"): "default",
    }
    [burst] = [d for d in admitted if d.workload == "user-b/burst-eci"]
    assert burst.reason is not None and burst.reason.code == "ZoneFallback"
    assert [(d.workload, d.preemptor) for d in preempted] == [
        ("user-b/burst-eci", "user-c/reclaim-burst")
    ]


def test_without_the_burst_mark_reclaim_takes_the_job_admitted_last() -> None:
    """What R5's order alone would do: the story shows Z3 only because eci is burst."""
    admitted, preempted = _play({"usher.io/zones": "a,eci"})
    assert {d.workload: d.zone for d in admitted}[WorkloadKey("user-b/burst-eci")] == "eci"
    assert [d.workload for d in preempted] == ["user-a/run-a"]


def test_people_see_where_the_burst_job_runs_and_why() -> None:
    """The live view's line and ``usher status``'s zone (the client's projection): the
    admission into the burst zone says why, and the job shows the zone it runs in."""
    play = _cluster(burst_attributes("a", "eci"))
    fill, burst, _, _ = story_jobs("a", "eci")
    play.submit(1, story_request(fill))
    play.submit(1, story_request(burst))
    [line] = [d for d in play.state.decisions if d.action == "admit" and d.job == burst.key]
    assert line.reason == (
        "admitted in zone eci, passed over zone a: zone a cpu 64 admitted + 16 requested > "
        "64 allocatable"
    )
    running, waiting = play.state.job(burst.key), play.state.job(fill.key)
    assert running is not None and waiting is not None
    assert (running.zone, waiting.zone) == ("eci", "a")
