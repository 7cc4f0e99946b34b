"""The one admission seam: every place that asks "may this job be offered now" asks the gates.

Scenario files 151 and 152 pin what ``usher sim`` cannot show (the reclaim preview; an engine
deciding for one zone): each is played here through an engine and asked what the pass, the
starvation guard and ``usher explain`` would say. The table-driven test plays every scenario
file and checks that, for each workload left pending, the places agree with the gates.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from schemas import Admitted, Millis, WorkloadKey, Zone
from usher.core.engine import starvation
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import restore, snapshot
from usher.core.gates import chain
from usher.core.history.estimate import estimate_pending
from usher.core.history.sim import load_scenario
from usher.core.rules.holds import HoldOrder, carry_out
from usher.core.state.indexed import PENDING

SCENARIOS = Path(__file__).parent.parent / "scenarios"
MAX_WAKEUPS = 1_000


def _play(name: str, zones: frozenset[Zone] | None = None, until_ms: int | None = None) -> Engine:
    """The scenario file played to its end (or up to ``until_ms``), as ``usher sim`` plays it
    (a pass after each group of equal ``at``, passes at wakeups), by an engine deciding for
    ``zones`` (None: all)."""
    path = SCENARIOS / name
    scenario = load_scenario(yaml.safe_load(path.read_text()), path.name)
    if until_ms is not None:
        scenario = replace(scenario, until_ms=Millis(until_ms))
    engine = Engine(replace(scenario.config, instant_release=True, zones=zones))
    for event in scenario.setup:
        engine.apply(event, Millis(0))
    engine.decide(Millis(0))

    def wake_until(limit: int | None) -> None:
        for _ in range(MAX_WAKEUPS):
            wakeup = engine.next_wakeup()
            if wakeup is None or (limit is not None and wakeup >= limit):
                return
            engine.decide(wakeup)

    groups: dict[int, list[object]] = {}
    for step in scenario.steps:
        if scenario.until_ms is None or step.at_ms < scenario.until_ms:
            groups.setdefault(step.at_ms, []).append(step.event)
    for at, events in sorted(groups.items()):
        wake_until(at)
        for event in events:
            if isinstance(event, HoldOrder):
                order = carry_out(event, engine.state.tree.root, engine.state.holds, Millis(at))
                if not isinstance(order, list):  # a refused order records nothing
                    engine.apply(order, Millis(at))
            else:
                engine.apply(event, Millis(at))  # type: ignore[arg-type]
        engine.decide(Millis(at))
    wake_until(scenario.until_ms)
    return engine


def test_a_job_below_a_held_node_previews_no_preemption() -> None:
    """151: the pass decides nothing for a/want (held, R14); the reclaim preview, what usher
    explain prints, said "a pass now would preempt b/big" before the seam."""
    engine = _play("151-held-job-preempts-nothing.yaml")
    want = WorkloadKey("a/want")
    why, victims = engine.reclaim_preview(want, engine.state.now)
    assert victims == []
    assert why == "a node on its path is held (R14): it is not offered, so it preempts nothing"
    shut = engine.refusal_of(want)
    assert shut is not None and shut.gate == "R14 hold" and not shut.timed
    assert engine.decide(Millis(engine.state.now + 1000)) == []


def test_the_dequeuer_of_an_accepted_zone_reserves_for_a_starved_head() -> None:
    """152 played by z2's engine: a/big's first zone is z1, but it accepts z2, where the pass
    offers it; the starvation guard reserves for it there too, so a/small3 waits behind it
    (before the seam the guard asked z1 only, and z2 admitted a/small3)."""
    engine = _play("152-reservation-in-an-accepted-zone.yaml", frozenset({Zone("z2")}))
    big, small3 = engine.state.jobs[WorkloadKey("a/big")], WorkloadKey("a/small3")
    assert starvation.may_try(engine, big)
    view = engine.job_state(small3)
    assert view is not None and view.state == PENDING
    assert view.reason is not None and view.reason.code == "BehindReservation"


def test_a_gated_job_names_its_closed_gates_wherever_it_is_asked_about() -> None:
    """160 at 15 s (G1): a/gated still lists example.com/scan. The reason names it (not the
    removed review), the reclaim preview preempts nothing, the start estimate gives no time,
    and a trial pass (the dry run's) does not admit it."""
    engine = _play("160-admission-gated-until-removed.yaml", until_ms=15_000)
    key, now = WorkloadKey("a/gated"), engine.state.now
    reason = engine.reason_now(key)
    assert reason is not None and reason.code == "AdmissionGated"
    assert "example.com/scan" in reason.message and "review" not in reason.message
    why, victims = engine.reclaim_preview(key, now)
    assert (why, victims) == (
        "admission gates are still listed on it (G1): it is not offered, so it preempts nothing",
        [],
    )
    view = engine.job_state(key)
    assert view is not None
    preview = engine.preview_pass(now)
    assert not any(isinstance(d, Admitted) and d.workload == key for d in preview.decisions)
    estimate = estimate_pending(engine, now, {key: view}, preview, [])[key]
    assert not estimate.known
    assert estimate.basis == (
        "unknown: admission gates are still listed on it (G1): "
        "not before example.com/scan is removed from it"
    )


def test_a_snapshot_carries_the_gates_still_closed() -> None:
    """161 at 15 s, restored from a snapshot: the same gates are closed (review alone: late was
    added after creation), and the next update that drops review opens the job in both."""
    engine = _play("161-admission-gate-never-added.yaml", until_ms=15_000)
    key = WorkloadKey("a/gated")
    assert engine.state.gated == {key: ("review",)}
    restored = restore(snapshot(engine), engine.config)
    assert restored.state.gated == engine.state.gated
    assert restored.reason_now(key) == engine.reason_now(key)


@pytest.mark.parametrize("name", sorted(p.name for p in SCENARIOS.glob("*.yaml")))
def test_every_place_agrees_with_the_gates_on_what_waits(name: str) -> None:
    """At the end of every scenario, for each pending workload: the reason says the first
    gate's reason when a gate shuts it; the starvation guard tries it exactly when no gate
    shuts it; the reclaim preview preempts nothing for it; its queue's head is never one a
    gate passes over."""
    engine = _play(name)
    engine.refresh_budgets()
    for key, job in sorted(engine.state.jobs.items()):
        if job.state != PENDING or job.leaf is None:
            continue
        shut = chain.refusal(engine, job)
        assert starvation.may_try(engine, job) == (shut is None and not job.held)
        if shut is None or job.held:
            continue
        assert engine.reason_now(key) == shut.reason
        why, victims = engine.reclaim_preview(key, engine.state.now)
        assert victims == [] and why is not None and why.startswith(shut.says)
    for leaf in engine.state.tree.leaves:
        head = engine.head(leaf)
        if head is not None:
            gates = chain.passing_over(engine, leaf)
            assert chain.passed_over(engine, engine.state.jobs[head], gates) is None


MONTH_RESET = Millis(31 * 86_400_000)
"""1970-02-01T00:00Z: when the scenarios' monthly budgets reset."""


@pytest.mark.parametrize(
    ("scenario", "until_ms", "key", "gate"),
    [
        ("70-budget-exhausted-holds-new-work.yaml", 5_000_000, "a/waiting", "B1 budget spent"),
        ("113-budget-overrun-held-when-opted-in.yaml", 1_900_000, "a/long", "B2 budget overrun"),
    ],
)
def test_a_budget_gate_says_it_opens_at_the_reset_and_the_estimate_reads_that(
    scenario: str, until_ms: int, key: str, gate: str
) -> None:
    """The gate is the one place that says when its "not now" can change (issue 28): a spent
    budget (B1) and an overrun (B2) open by time alone at their window's reset, and the start
    estimate gives no time before it."""
    engine = _play(scenario, until_ms=until_ms)
    workload, now = WorkloadKey(key), engine.state.now
    shut = engine.refusal_of(workload)
    assert shut is not None and shut.gate == gate
    assert (shut.opens.at_ms, shut.opens.on) == (MONTH_RESET, "the budget of root/A resets")
    view = engine.job_state(workload)
    assert view is not None
    estimate = estimate_pending(engine, now, {workload: view}, engine.preview_pass(now), [])[
        workload
    ]
    assert estimate.not_before_ms == MONTH_RESET
    assert "not before 1970-02-01T00:00:00.000Z, when the budget of root/A resets" in (
        estimate.basis
    )
    assert estimate.start_ms is None or estimate.start_ms >= MONTH_RESET
