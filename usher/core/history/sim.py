"""The scenario simulator (docs/admission-rules.md S1, S2): plays already-loaded scenario data.

What it does: ``load_scenario`` (``usher.core.history.scenario``) turns parsed YAML into a typed
``Scenario`` (or a
``ScenarioError`` naming every bad field), ``run`` drives the very same ``Engine`` as the
services through the timeline (besides the scenario file's actions, docs/admission-rules.md
S1: ``ready: ns/name`` -- every pod ready -- ``progress: {job, ready, total, succeeded}``,
the pod progress R10 judges readiness by
(a ``succeeded`` that reaches the job's ``usher.io/min-success`` is a finish, as the watcher
reports it), and ``fail: {job, container, exitCode}`` / ``oom: {job, container}``, a failed
attempt (R12, R13),
after which it plays the watcher: a ``Retried`` next attempt is made from the job's manifest
and observed at once) and its wakeups (min-runtime ends, ready deadlines, requeue backoffs),
``render_json``/``render_table`` print the outcome, and ``check`` compares it with the
scenario's ``expect:`` block (an optional ``usage:`` in it is checked against
``usage_intervals``, the run's decisions folded as the log's are, U1). A ``create`` with
``runSeconds`` finishes that long after each admission and ``until`` ends the run (S2);
``planning_record`` hands a run to the planning report.
What it must never do: open files, read a clock or draw random numbers: the caller loads the
YAML, and time is the scenario's own ``at``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction

import msgspec

from schemas import (
    Admitted,
    Decision,
    FieldError,
    Inadmissible,
    Millis,
    NodeHeld,
    NodeResumed,
    Preempted,
    QueueName,
    QuotaPath,
    QuotaTreeRejected,
    Requeued,
    Retried,
    TopologyPin,
    Unmapped,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    WorkloadProgress,
    WorkloadRejected,
    Zone,
)
from schemas.envelope import LogEvent
from schemas.events import ClusterEvent
from usher.core.engine.facade import Engine, JobView, QueueEntry
from usher.core.history.driver import MAX_WAKEUP_PASSES, Driver
from usher.core.history.planning import RunRecord, capacity_of
from usher.core.history.scenario import (
    MAX_MOMENT,
    Expect,
    Moment,
    Scenario,
    UsageExpect,
    load_scenario,
)
from usher.core.history.timeline import ORDER_FIELDS, Step, first_attempt
from usher.core.history.usage import (
    MS_PER_SECOND,
    Interval,
    UsageFold,
    usage_totals,
)
from usher.core.intake.workload import extract_workload
from usher.core.model.errors import WorkloadInvalid
from usher.core.model.quantity import CPU, format_quantity
from usher.core.rules.holds import HoldOrder, carry_out
from usher.core.rules.retry import container_memory, retry_manifest


@dataclass(frozen=True)
class SimDecision:
    """A decision and the scenario time it was made at."""

    at_ms: Millis
    decision: Decision


@dataclass(frozen=True)
class HoldChange:
    """A hold, drain or resume in force from ``at_ms`` (R14/R15)."""

    at_ms: Millis
    event: NodeHeld | NodeResumed


@dataclass(frozen=True)
class Rejection:
    """An input the engine rejected while playing (an invalid tree in ``apply:``, an order
    naming no node or with a negative grace)."""

    at_ms: Millis
    errors: list[FieldError]
    what: str = "tree rejected"
    """What was refused, for the table (``order refused``: a hold, drain or resume)."""


@dataclass(frozen=True)
class SimResult:
    """Everything a run produced: decisions in order and the final state."""

    scenario: Scenario
    decisions: list[SimDecision]
    rejections: list[Rejection]
    holds: list[HoldChange]
    jobs: dict[WorkloadKey, JobView]
    queues: dict[QueueName, list[QueueEntry]]
    quota_used: dict[QuotaPath, dict[str, int]]
    quota_limits: dict[QuotaPath, tuple[dict[str, int], dict[str, int]]]
    preempted: list[WorkloadKey]
    seen: dict[Millis, dict[WorkloadKey, JobView | None]] = field(default_factory=dict)
    """What ``expect.moments`` asked about, at each of its instants."""
    ledger: list[SimDecision] = field(default_factory=list)
    """Every decision in the order it was taken, with the ``Released`` the engine returns as
    it folds a finish or deletion (the simulator's ledger releases at once, S1): what usage
    accounting folds (U1)."""


# ---------------------------------------------------------------------------- running


def run(scenario: Scenario) -> SimResult:
    """Play the scenario: setup at t=0, a pass after each group of equal ``at``, wakeups."""
    # A scenario's victims stop the instant they are preempted (R7, S1).
    engine = Engine(replace(scenario.config, instant_release=True))
    decisions: list[SimDecision] = []
    rejections: list[Rejection] = []
    ledger: list[SimDecision] = []
    manifests: dict[WorkloadKey, Mapping[str, object]] = {
        step.event.workload: step.manifest
        for step in scenario.steps
        if isinstance(step.event, WorkloadObserved) and step.manifest is not None
    }
    """Each job's manifest as created (a retry's as the run made it): the watcher's part."""
    hold_changes: list[HoldChange] = []
    runs = _Runs(
        {
            step.event.workload: (step.run_ms, sum(p.count for p in step.event.pod_sets))
            for step in scenario.steps
            if isinstance(step.event, WorkloadObserved) and step.run_ms is not None
        }
    )
    moments = sorted(scenario.expect.moments, key=lambda m: m.at_ms) if scenario.expect else []
    seen: dict[Millis, dict[WorkloadKey, JobView | None]] = {}

    def look_before(at_ms: int) -> None:
        """The moments before ``at_ms`` see the state the passes before it left."""
        while moments and moments[0].at_ms < at_ms:
            moment = moments.pop(0)
            asked = sorted(moment.jobs.keys() | moment.reasons.keys())
            seen[moment.at_ms] = {key: engine.job_state(key) for key in asked}

    def prepared(entry: ClusterEvent | HoldOrder, at_ms: Millis) -> LogEvent | None:
        """The event an entry plays as (an order judged, a failure's memory), or None."""
        look_before(at_ms)
        event: LogEvent | None = (
            _judge(entry, engine, at_ms, rejections, hold_changes)
            if isinstance(entry, HoldOrder)
            else entry
        )
        if event is None:
            return None
        if isinstance(event, QuotaTreeRejected):
            rejections.append(Rejection(at_ms=at_ms, errors=event.errors))
        if isinstance(event, WorkloadFinished) and event.terminations:
            event = _with_memory(event, manifests.get(event.workload))
        return event

    def feed(entry: ClusterEvent | HoldOrder, at_ms: Millis) -> None:
        event = prepared(entry, at_ms)
        if event is not None:
            driver.feed(event, at_ms)

    def played(
        entries: list[ClusterEvent | HoldOrder], at_ms: Millis
    ) -> Iterator[tuple[LogEvent, Millis]]:
        """A group's entries, each prepared as it is fed (an order is judged on the state the
        entries before it left)."""
        for entry in entries:
            event = prepared(entry, at_ms)
            if event is not None:
                yield event, at_ms

    def decided(at_ms: Millis, made: list[Decision]) -> None:
        started = runs.track(made, at_ms)
        taken = [SimDecision(at_ms, d) for d in made]
        decisions.extend(taken)
        ledger.extend(taken)
        for workload, pods in started:
            # A run's pods are ready as it starts (S2): a ready timeout (R10) never ends it.
            feed(WorkloadProgress(workload=workload, ready=pods, total=pods), at_ms)
        retries = [d for d in made if isinstance(d, Retried) and d.job is not None]
        for decision in retries:
            # The watcher's part, at once (S1): the next attempt is created and observed,
            # and a pass follows, as after any new job.
            manifest = manifests.get(decision.workload)
            if manifest is None or decision.job is None:
                continue
            created = retry_manifest(manifest, decision)
            manifests[decision.job] = created
            driver.feed(_observed_or_rejected(created, at_ms), at_ms)
        if retries:
            driver.decide(at_ms)

    def released(at_ms: Millis, made: list[Decision]) -> None:
        ledger.extend(SimDecision(at_ms, d) for d in made)

    def due(at_ms: Millis) -> None:
        """The moments before ``at_ms`` look, then the runs ending by then finish (S2)."""
        look_before(at_ms)
        for workload in runs.due(at_ms):
            feed(WorkloadFinished(workload=workload), at_ms)

    driver = Driver(engine, decided, released, runs.next_end, due)
    for setup in scenario.setup:
        feed(setup, Millis(0))
    until = scenario.until_ms
    groups = [g for g in _groups(scenario.steps) if until is None or g[0] < until]
    if not groups or groups[0][0] > 0:
        driver.decide(Millis(0))
    for at_ms, entries in groups:
        driver.group(at_ms, played(entries, at_ms), at_ms)
    driver.wake_until(until)
    look_before(MAX_MOMENT)
    preempted = sorted({d.decision.workload for d in decisions if _is_preempted(d.decision)})
    return SimResult(
        scenario=scenario,
        decisions=decisions,
        rejections=rejections,
        holds=hold_changes,
        jobs=engine.jobs(),
        queues=engine.queues(),
        quota_used=engine.quota_used(),
        quota_limits=engine.quota_nodes(),
        preempted=preempted,
        ledger=ledger,
        seen=seen,
    )


class _Runs:
    """S2: when each running job with a ``runSeconds`` ends: set at its admission, forgotten when
    it is preempted or requeued (that run is thrown away), handed out when due."""

    def __init__(self, runs: dict[WorkloadKey, tuple[Millis, int]]) -> None:
        self.runs = runs
        """Workload -> (its runtime, its pods)."""
        self.ends: dict[WorkloadKey, Millis] = {}

    def track(self, made: list[Decision], at_ms: Millis) -> list[tuple[WorkloadKey, int]]:
        """Runs that start with these decisions, with their pods (a partial admission's)."""
        started: list[tuple[WorkloadKey, int]] = []
        for decision in made:
            if isinstance(decision, Admitted) and decision.workload not in self.ends:
                # A retry (R12) runs as long as its first attempt.
                run = self.runs.get(decision.workload) or self.runs.get(
                    first_attempt(decision.workload)
                )
                if run is not None:
                    self.ends[decision.workload] = Millis(at_ms + run[0])
                    counts = decision.pod_counts
                    started.append((decision.workload, sum(counts.values()) if counts else run[1]))
            elif isinstance(decision, Preempted | Requeued):
                self.ends.pop(decision.workload, None)
        return started

    def next_end(self) -> Millis | None:
        return min(self.ends.values(), default=None)

    def due(self, at_ms: Millis) -> list[WorkloadKey]:
        """The runs ending at or before ``at_ms``, by name (removed)."""
        done = sorted(key for key, end in self.ends.items() if end <= at_ms)
        for key in done:
            del self.ends[key]
        return done


def planning_record(result: SimResult) -> RunRecord:
    """What the planning report reads of a run: its window is ``[0, until)`` (without
    ``until``: up to its last step or decision), the capacity the nodes it saw leave."""
    scenario = result.scenario
    arrivals: dict[WorkloadKey, Millis] = {}
    for step in scenario.steps:
        played = scenario.until_ms is None or step.at_ms < scenario.until_ms
        if isinstance(step.event, WorkloadObserved) and played:
            arrivals.setdefault(step.event.workload, step.at_ms)
    last = max([0, *(s.at_ms for s in scenario.steps), *(r.at_ms for r in result.ledger)])
    return RunRecord(
        decisions=[(record.at_ms, record.decision) for record in result.ledger],
        arrivals=arrivals,
        waiting=[entry.job for entries in result.queues.values() for entry in entries],
        quotas={key: view.quota for key, view in result.jobs.items() if view.quota},
        limits=result.quota_limits,
        capacity=capacity_of([*scenario.setup, *(step.event for step in scenario.steps)]),
        since_ms=Millis(0),
        until_ms=scenario.until_ms if scenario.until_ms is not None else Millis(last),
    )


def usage_intervals(result: SimResult) -> list[Interval]:
    """The allocation intervals of a run, folded as the log's are (U1)."""
    fold = UsageFold()
    for record in result.ledger:
        fold.apply(record.decision, record.at_ms)
    return fold.intervals()


def _observed_or_rejected(manifest: Mapping[str, object], at_ms: Millis) -> ClusterEvent:
    """A created job as the watcher reports it: observed, or rejected with why (a retry's
    name grown past what Kubernetes takes, say)."""
    try:
        return extract_workload(manifest, created_ms=at_ms)
    except WorkloadInvalid as failure:
        return WorkloadRejected(workload=failure.workload, kind=failure.kind, errors=failure.errors)


def _with_memory(
    event: WorkloadFinished, manifest: Mapping[str, object] | None
) -> WorkloadFinished:
    """The failed containers' memory as this attempt ran them, as the watcher reports it."""
    memory = container_memory(manifest) if manifest is not None else {}
    terminations = [
        msgspec.structs.replace(
            item,
            memory_request=memory.get((item.pod_set, item.container), (None, None))[0],
            memory_limit=memory.get((item.pod_set, item.container), (None, None))[1],
        )
        for item in event.terminations
    ]
    return msgspec.structs.replace(event, terminations=terminations)


def _judge(
    order: HoldOrder,
    engine: Engine,
    at_ms: Millis,
    rejections: list[Rejection],
    hold_changes: list[HoldChange],
) -> NodeHeld | NodeResumed | None:
    """The event an order records, as its owner would record it, or None when refused (the
    refusal is reported with the scenario's own key names)."""
    outcome = carry_out(order, engine.state.tree.root, engine.state.holds, at_ms)
    if isinstance(outcome, list):
        action = order.action.lower()
        named = [
            FieldError(
                path=f"{action}.{ORDER_FIELDS.get(e.path, e.path)}", code=e.code, message=e.message
            )
            for e in outcome
        ]
        rejections.append(Rejection(at_ms=at_ms, errors=named, what="order refused"))
        return None
    hold_changes.append(HoldChange(at_ms=at_ms, event=outcome))
    return outcome


def _is_preempted(decision: Decision) -> bool:
    return isinstance(decision, Preempted)


def _groups(steps: list[Step]) -> list[tuple[Millis, list[ClusterEvent | HoldOrder]]]:
    groups: list[tuple[Millis, list[ClusterEvent | HoldOrder]]] = []
    for step in steps:
        if groups and groups[-1][0] == step.at_ms:
            groups[-1][1].append(step.event)
        else:
            groups.append((step.at_ms, [step.event]))
    return groups


# ---------------------------------------------------------------------------- rendering


def _seconds(at_ms: int) -> int | float:
    """Scenario time as written: an int when whole seconds."""
    return at_ms // 1000 if at_ms % 1000 == 0 else at_ms / 1000


def _decision_record(record: SimDecision) -> dict[str, object] | None:
    """One entry of ``decisions`` (S1); None for decisions it does not list."""
    decision = record.decision
    if isinstance(decision, Unmapped):
        queue, quota = None, None
    elif isinstance(decision, Admitted | Preempted | Inadmissible | Requeued | Retried):
        queue, quota = decision.queue, decision.quota
    else:
        return None
    entry: dict[str, object] = {
        "at": _seconds(record.at_ms),
        "action": _ACTIONS[type(decision)],
        "job": decision.workload,
        "queue": queue,
        "quota": quota,
    }
    if isinstance(decision, Preempted):
        entry["preemptor"] = decision.preemptor
    if isinstance(decision, Retried):
        entry["next"] = decision.job
    if isinstance(decision, Admitted):
        if decision.reason is not None:  # a partial admission says why (R11)
            entry["reason"] = f"{decision.reason.code}: {decision.reason.message}"
        if decision.topology is not None:  # its pods' domain (TP1)
            entry["domain"] = pin_text(decision.topology)
    else:
        entry["reason"] = f"{decision.reason.code}: {decision.reason.message}"
    return entry


_ACTIONS: dict[type, str] = {
    Admitted: "admit",
    Preempted: "preempt",
    Inadmissible: "inadmissible",
    Unmapped: "unmapped",
    Requeued: "requeue",
    Retried: "retry",
}


def _used_quantities(result: SimResult, path: QuotaPath) -> dict[str, str]:
    used = result.quota_used.get(path, {})
    named = set(result.quota_limits.get(path, ({}, {}))[1]) | set(used)
    return {r: format_quantity(r, used.get(r, 0)) for r in sorted(named)}


def render_json(result: SimResult) -> str:
    """One JSON object (S1, D3); byte-identical for the same scenario."""
    jobs: dict[str, dict[str, object]] = {}
    for key, view in result.jobs.items():
        entry: dict[str, object] = {"state": view.state, "queue": view.queue}
        if view.position is not None:
            entry["position"] = view.position
        jobs[key] = entry
    output: dict[str, object] = {
        "decisions": [r for d in result.decisions if (r := _decision_record(d)) is not None],
        "final": {
            "jobs": jobs,
            "queues": {
                name: [{"job": e.job, "position": e.position, "priority": e.priority} for e in q]
                for name, q in result.queues.items()
            },
            "quota": {
                path: {"used": _used_quantities(result, path)} for path in result.quota_limits
            },
        },
    }
    if result.holds:
        output["holds"] = [_hold_record(change) for change in result.holds]
    if result.rejections:
        output["rejected"] = [
            {
                "at": _seconds(r.at_ms),
                "errors": [
                    {"path": e.path, "code": e.code, "message": e.message} for e in r.errors
                ],
            }
            for r in result.rejections
        ]
    return json.dumps(output, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def _hold_record(change: HoldChange) -> dict[str, object]:
    """One entry of ``holds`` (only in scenarios that hold, drain or resume: R14/R15)."""
    event = change.event
    entry: dict[str, object] = {
        "at": _seconds(change.at_ms),
        "action": event.mode.lower() if isinstance(event, NodeHeld) else "resume",
        "node": event.node,
        "by": event.by,
        "reason": event.reason,
    }
    if isinstance(event, NodeHeld) and event.mode == "Drain":
        entry["grace"] = event.grace_seconds
    return entry


def render_table(result: SimResult) -> str:
    """A plain-text report: decisions, jobs with reasons, queues, quota per node."""
    lines = [f"scenario {result.scenario.name}", "", "decisions:"]
    for record in result.decisions:
        row = _decision_record(record)
        if row is None:
            continue
        extra = f"  by {row['preemptor']}" if "preemptor" in row else ""
        extra += f"  in {row['domain']}" if "domain" in row else ""  # TP1
        why = f"  ({row['reason']})" if "reason" in row else ""
        lines.append(
            f"  t={row['at']!s:>6}  {row['action']:<12} {row['job']:<32} "
            f"{row['quota'] or '-'}{extra}{why}"
        )
    for rejection in result.rejections:
        for error in rejection.errors:
            lines.append(
                f"  t={_seconds(rejection.at_ms)!s:>6}  {rejection.what}  {error.path}: "
                f"{error.message}"
            )
    for change in result.holds:
        row = _hold_record(change)
        grace = f", grace {row['grace']} s" if "grace" in row else ""
        why = f": {row['reason']}" if row["reason"] else ""
        lines.append(
            f"  t={row['at']!s:>6}  {row['action']:<12} {row['node']} by {row['by']}{grace}{why}"
        )
    lines += ["", "jobs:"]
    for key, view in result.jobs.items():
        position = f"#{view.position}" if view.position is not None else ""
        reason = f"  {view.reason.code}: {view.reason.message}" if view.reason else ""
        lines.append(
            f"  {key:<32} {view.state:<12} {view.queue or '-':<36} {position:<5}{reason}".rstrip()
        )
    lines += ["", "queues:"]
    for name, entries in result.queues.items():
        members = ", ".join(f"{e.position}. {e.job} (prio {e.priority})" for e in entries)
        lines.append(f"  {name}: {members or '(empty)'}")
    lines += ["", "quota (used / min / max):"]
    for path, (minimum, maximum) in result.quota_limits.items():
        used = result.quota_used.get(path, {})
        cells = [
            f"{r} {format_quantity(r, used.get(r, 0))}/{format_quantity(r, minimum.get(r, 0))}/"
            f"{format_quantity(r, maximum[r])}"
            for r in sorted(maximum)
        ]
        lines.append(f"  {path:<40} {'  '.join(cells)}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- checking


def check(scenario: Scenario, result: SimResult) -> list[str]:
    """One line per difference between the outcome and ``expect:``; empty means pass."""
    expect = scenario.expect
    if expect is None:
        return []
    problems: list[str] = []
    for key, state in expect.jobs.items():
        view = result.jobs.get(key)
        actual = view.state if view is not None else "absent (deleted or never created)"
        if actual != state:
            problems.append(f"job {key}: expected {state}, got {actual}")
    for queue, members in expect.queues.items():
        entries = result.queues.get(queue)
        if entries is None:
            problems.append(f"queue {queue}: expected {members}, but no such queue exists")
            continue
        actual_members = [e.job for e in entries]
        if actual_members != members:
            problems.append(f"queue {queue}: expected {members}, got {actual_members}")
    if expect.preempted is not None:
        expected_set, actual_set = set(expect.preempted), set(result.preempted)
        for key in sorted(expected_set - actual_set):
            problems.append(f"preempted {key}: expected to be preempted, was not")
        for key in sorted(actual_set - expected_set):
            problems.append(f"preempted {key}: was preempted, not expected")
    for key, start in expect.reasons.items():
        view = result.jobs.get(key)
        why = view.reason if view is not None else None
        said = "" if why is None else f"{why.code}: {why.message}"
        if not said.startswith(start):
            problems.append(f"reason of {key}: expected {start!r}..., got {said!r}")
    for path, resources in expect.quota.items():
        if path not in result.quota_limits:
            problems.append(f"quota {path}: no such node in the final tree")
            continue
        used = result.quota_used.get(path, {})
        for resource, amount in resources.items():
            actual_amount = used.get(resource, 0)
            if actual_amount != amount:
                problems.append(
                    f"quota {path} {resource}: expected used {format_quantity(resource, amount)}"
                    f", got {format_quantity(resource, actual_amount)}"
                )
    if expect.usage is not None:
        problems += _usage_problems(expect.usage, usage_intervals(result))
    problems += _admitted_problems(expect.admitted, result)
    problems += _zone_problems(expect.zones, result)
    problems += _domain_problems(expect.domains, result)
    for moment in expect.moments:
        problems += _moment_problems(moment, result.seen.get(moment.at_ms, {}))
    return problems


def _admitted_problems(expect: dict[WorkloadKey, Millis], result: SimResult) -> list[str]:
    last: dict[WorkloadKey, Millis] = {}
    for record in result.decisions:
        if isinstance(record.decision, Admitted):
            last[record.decision.workload] = record.at_ms
    problems: list[str] = []
    for key, at_ms in expect.items():
        actual = last.get(key)
        if actual != at_ms:
            said = "never" if actual is None else f"at {_seconds(actual)}"
            problems.append(f"admitted {key}: expected at {_seconds(at_ms)}, was {said}")
    return problems


def _zone_problems(expect: dict[WorkloadKey, Zone], result: SimResult) -> list[str]:
    """``expect.zones``: the zone each workload's last ``Admitted`` names (Z2)."""
    last: dict[WorkloadKey, Zone] = {}
    for record in result.decisions:
        if isinstance(record.decision, Admitted):
            last[record.decision.workload] = record.decision.zone
    problems: list[str] = []
    for key, zone in expect.items():
        actual = last.get(key)
        if actual != zone:
            said = "never admitted" if actual is None else f"admitted in {actual}"
            problems.append(f"zone of {key}: expected {zone}, was {said}")
    return problems


def _domain_problems(expect: dict[WorkloadKey, str], result: SimResult) -> list[str]:
    """``expect.domains``: the topology domain each workload's last ``Admitted`` pins (TP1)."""
    last: dict[WorkloadKey, str] = {}
    for record in result.decisions:
        if isinstance(record.decision, Admitted):
            last[record.decision.workload] = pin_text(record.decision.topology)
    problems: list[str] = []
    for key, domain in expect.items():
        actual = last.get(key)
        if actual != domain:
            said = "never admitted" if actual is None else f"admitted pinned to {actual}"
            problems.append(f"domain of {key}: expected {domain}, was {said}")
    return problems


def pin_text(pin: TopologyPin | None) -> str:
    """``<level>=<domain>`` of a topology pin (TP1), ``none`` without one."""
    return "none" if pin is None else f"{pin.level}={pin.domain}"


def _moment_problems(moment: Moment, seen: dict[WorkloadKey, JobView | None]) -> list[str]:
    problems: list[str] = []
    at = _seconds(moment.at_ms)
    for key, state in moment.jobs.items():
        view = seen.get(key)
        actual = view.state if view is not None else "absent"
        if actual != state:
            problems.append(f"at {at} job {key}: expected {state}, got {actual}")
    for key, start in moment.reasons.items():
        view = seen.get(key)
        why = view.reason if view is not None else None
        said = "" if why is None else f"{why.code}: {why.message}"
        if not said.startswith(start):
            problems.append(f"at {at} reason of {key}: expected {start!r}..., got {said!r}")
    return problems


def _usage_problems(expect: UsageExpect, intervals: list[Interval]) -> list[str]:
    problems: list[str] = []
    at = expect.at_ms
    for by, groups in expect.groups.items():
        totals = usage_totals(intervals, since_ms=Millis(0), until_ms=at, now_ms=at, by=by)
        for group, amounts in groups.items():
            for resource, amount in amounts.items():
                actual = totals.get((group, resource), 0)
                if actual != amount:
                    problems.append(
                        f"usage {by.value} {group} {resource} at {_seconds(at)}: expected "
                        f"{_unit_seconds_text(resource, amount)}, got "
                        f"{_unit_seconds_text(resource, actual)} (unit-seconds)"
                    )
    return problems


def _unit_seconds_text(resource: str, amount: int) -> str:
    """Canonical units x ms as the unit-seconds a scenario writes (exact)."""
    value = Fraction(amount, MS_PER_SECOND * (1000 if resource == CPU else 1))
    return str(value.numerator) if value.denominator == 1 else str(float(value))


__all__ = [
    "MAX_WAKEUP_PASSES",
    "Expect",
    "HoldChange",
    "Rejection",
    "Scenario",
    "SimDecision",
    "SimResult",
    "Step",
    "UsageExpect",
    "check",
    "load_scenario",
    "planning_record",
    "render_json",
    "render_table",
    "run",
    "usage_intervals",
]
