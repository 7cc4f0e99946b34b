"""The demo's fair-share story (F1) does what it says, played in the pure core as the running
system plays it with ``usher up --half-life``: the demo's tree with the Teams it adds, the
story's jobs as ``usher submit`` builds them, an engine deciding. Team-x and Team-y used the
same, Team-y weighs 3: its job goes first though Team-x's was submitted first, and only
because fair share is on; the live view gives each leaf's decayed usage per weight."""

from __future__ import annotations

from schemas import Admitted, Millis, WorkloadKey
from tests.builders.demo import story_request, story_setup, walkthrough_tree
from tests.cli.test_demo_reclaim import Playback
from usher.cli.live import queue_lines
from usher.core.model.config import EngineConfig
from usher.demo.fairshare import fair_share_nodes, story_jobs

HALF_LIFE_MS = 60_000


def _cluster(config: EngineConfig) -> Playback:
    """The demo's system once the story's Teams are added below the demo tree's root."""
    tree = walkthrough_tree()
    tree["spec"]["root"]["children"].append(fair_share_nodes())
    play = Playback(config)
    play.feed(0, story_setup("fair", tree))
    return play


def _played(config: EngineConfig) -> tuple[list[WorkloadKey], Playback]:
    """The story's steps at the times the running system takes them (each job ends after its
    duration); returns the order of admissions."""
    play = _cluster(config)
    warm_x, warm_y, next_x, next_y = story_jobs()
    play.submit(1, story_request(warm_x))
    play.finish(3, warm_x.key)
    play.submit(4, story_request(warm_y))
    play.submit(5, story_request(next_x))
    play.submit(5.5, story_request(next_y))
    play.finish(6, warm_y.key)
    admitted = [d.workload for d in play.decisions if isinstance(d, Admitted)]
    return admitted, play


def test_team_y_goes_first_by_its_weight() -> None:
    admitted, _ = _played(EngineConfig(half_life_ms=HALF_LIFE_MS))
    assert admitted == ["user-x/warm-x", "user-y/warm-y", "user-y/next-y"]


def test_without_fair_share_team_xs_job_submitted_first_goes_first() -> None:
    """What R3's order alone does: the story shows F1 only because fair share is on."""
    admitted, _ = _played(EngineConfig())
    assert admitted == ["user-x/warm-x", "user-y/warm-y", "user-x/next-x"]


def test_the_live_view_gives_each_teams_usage_per_weight() -> None:
    _, play = _played(EngineConfig(half_life_ms=HALF_LIFE_MS))
    queues = {q.quota: q for q in play.state.view(Millis(6000)).queues}
    x, y = queues["root/Teams/Team-x"], queues["root/Teams/Team-y"]
    assert x.fair_share is not None and y.fair_share is not None
    assert (x.fair_share.weight, y.fair_share.weight) == (1, 3)
    # The same usage (24 cpu-seconds each, x's decayed longer), y's divided by 3; explain's
    # key, in root-hours to 3 significant digits, tells the two apart at this small scale.
    assert x.fair_share.decayed_usage == {"cpu": "0.006 CPU-hours"}
    assert y.fair_share.decayed_usage == {"cpu": "0.007 CPU-hours"}
    assert queue_lines(y)[0].endswith(f"; {y.fair_words()}")
    assert "weight 3, key " in queue_lines(y)[0]
    assert x.fair_share.key != y.fair_share.key
    assert x.fair_share.key != "0.000 root-hours" != y.fair_share.key
