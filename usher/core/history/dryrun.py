"""Dry run of one workload before it is submitted: where it would go and what the next pass does.

What it does: ``dry_run`` applies the workload's ``WorkloadObserved`` (as the watcher would
write it for the created object) to an engine folded from the log, and asks a trial pass at
``now`` (``Engine.preview_pass``) what it would decide: the queue and quota node it lands in,
the position it takes, whether the pass admits it, and if not why (the limiting node and
numbers), whom the pass would preempt for it (reclaim or within-quota, each with its reason),
and its estimated start (``usher.core.history.estimate``). ``render_dry_run_table``/``_json``
print it.

What it must never do: perform I/O, read a clock, or be applied to an engine anybody keeps: the
engine it is given receives the workload and is thrown away by the caller afterwards (the pass
itself runs on copies and decides nothing).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from schemas import (
    Admitted,
    Millis,
    Preempted,
    QueueName,
    QuotaPath,
    Reason,
    WorkloadKey,
    WorkloadObserved,
)
from usher.core.engine.facade import Engine
from usher.core.history.estimate import Estimate, describe, estimate_pending
from usher.core.history.explain import people_json, total_requests
from usher.core.history.replay import History, fold, format_time, quantities
from usher.core.history.usage import Interval, intervals_of
from usher.core.model.config import EngineConfig
from usher.core.state.indexed import JobState


class AlreadyKnown(ValueError):
    """The log already has a workload of that name: creating it again would fail."""

    def __init__(self, workload: WorkloadKey, state: JobState) -> None:
        super().__init__(f"a job {workload} already exists ({state}): choose another name")
        self.workload = workload


class DryRun(msgspec.Struct, frozen=True, kw_only=True):
    """What ``usher submit --dry-run`` and ``usher explain -f`` print."""

    workload: WorkloadKey
    state: JobState
    """As the next pass would leave it: ``Admitted``, ``Pending``, ``Unmapped`` or
    ``Inadmissible``."""
    admitted: bool
    """The next decision pass admits it."""
    queue: QueueName | None = None
    quota: QuotaPath | None = None
    position: int | None = None
    """The place it takes in its queue on arrival (1-based), before the pass."""
    priority: int = 0
    requests: dict[str, str]
    """Total over all pods, in Kubernetes notation."""
    reason: Reason | None = None
    """Why it would wait after the pass (the limiting node and numbers), or why it is where
    it is; None when the pass admits it."""
    preempts: list[Preempted] = []
    """Whom the pass would preempt to make room for it (reclaim or within-quota: the code of
    each one's reason says which)."""
    estimate: Estimate | None = None
    """Its estimated start while it would wait (``now`` when the pass admits it)."""
    as_of_seq: int
    now: Millis


def dry_run(
    engine: Engine,
    observed: WorkloadObserved,
    now: Millis,
    intervals: Sequence[Interval],
    as_of_seq: int,
) -> DryRun:
    """What the next pass at ``now`` would do with ``observed``; ``engine`` (folded up to
    ``as_of_seq``, thrown away afterwards) receives it. ``intervals`` are the log's allocation
    intervals (U1), for the estimate. ``AlreadyKnown`` when the log has that workload."""
    key = observed.workload
    known = engine.job_state(key)
    if known is not None:
        raise AlreadyKnown(key, known.state)
    engine.apply(observed, now)
    arrived = engine.job_state(key)
    if arrived is None:  # the engine keeps every workload it observed
        raise AssertionError(f"{key} was observed but the engine does not know it")
    preview = engine.preview_pass(now)
    admitted = any(isinstance(d, Admitted) and d.workload == key for d in preview.decisions)
    after = preview.waiting.get(key, arrived)
    estimate = None
    if arrived.state == JobState.PENDING:
        estimate = estimate_pending(engine, now, {key: arrived}, preview, intervals).get(key)
    return DryRun(
        workload=key,
        state=JobState.ADMITTED if admitted else after.state,
        admitted=admitted,
        queue=arrived.queue,
        quota=arrived.quota,
        position=arrived.position,
        priority=arrived.priority,
        requests=quantities(total_requests(observed)),
        reason=None if admitted else after.reason,
        preempts=[
            d
            for d in preview.decisions
            if isinstance(d, Preempted) and d.preemptor == key and d.workload != key
        ],
        estimate=estimate,
        as_of_seq=as_of_seq,
        now=now,
    )


def dry_run_on_history(
    history: History, config: EngineConfig, observed: WorkloadObserved, now: Millis
) -> DryRun:
    """``dry_run`` on the state at the end of ``history`` (as ``usher explain`` folds it)."""
    engine = Engine(config)
    fold(engine, history.items)
    return dry_run(engine, observed, now, intervals_of(history.items), history.last_seq)


# ---------------------------------------------------------------------------- rendering


def render_dry_run_json(result: DryRun) -> str:
    """One JSON object in the words of ``usher explain -o json`` (``job``, quantities)."""
    return people_json(result)


def render_dry_runs_json(results: Sequence[DryRun]) -> str:
    """One object for one workload; an array, in file order, for several."""
    return people_json(results[0] if len(results) == 1 else list(results))


def render_dry_runs_table(results: Sequence[DryRun]) -> str:
    """Each workload's table, a blank line apart."""
    return "\n".join(render_dry_run_table(result) for result in results)


def render_dry_run_table(result: DryRun) -> str:
    """Plain text for people: one line per question a dry run answers."""
    r = result
    lines = [f"{r.workload} (dry run: nothing was created)"]
    requests = ", ".join(f"{k} {v}" for k, v in r.requests.items()) or "-"
    lines.append(f"  requests: {requests}")
    lines.append(f"  queue:    {r.queue or '-'}  quota {r.quota or '-'}  priority {r.priority}")
    if r.position is not None:
        lines.append(f"  position: {r.position}")
    verdict = "yes" if r.admitted else f"no ({r.state})"
    if r.admitted and r.preempts:
        verdict = "yes, once the jobs it preempts have stopped"
    lines.append(f"  next pass admits it: {verdict}")
    if r.reason is not None:
        lines.append(f"  why:      {r.reason.code}: {r.reason.message}")
    if r.preempts:
        lines.append("  preempts:")
        for victim in r.preempts:
            lines.append(
                f"    {victim.workload} on {victim.quota}: "
                f"{victim.reason.code}: {victim.reason.message}"
            )
    else:
        lines.append("  preempts: nobody")
    if r.estimate is not None:
        lines.append(f"  start:    {describe(r.estimate)}")
        if r.estimate.known:
            lines.append(f"            {r.estimate.basis}")
    lines.append(f"  as of:    seq {r.as_of_seq} ({format_time(r.now)})")
    return "\n".join(lines) + "\n"


__all__ = [
    "AlreadyKnown",
    "DryRun",
    "dry_run",
    "dry_run_on_history",
    "render_dry_run_json",
    "render_dry_run_table",
    "render_dry_runs_json",
    "render_dry_runs_table",
]
