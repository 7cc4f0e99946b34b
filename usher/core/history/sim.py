"""The scenario simulator (docs/admission-rules.md S1, S2): plays already-loaded scenario data.

What it does: ``load_scenario`` turns parsed YAML into a typed ``Scenario`` (or a
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
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction

import msgspec

from schemas import (
    Admitted,
    ContainerTermination,
    Decision,
    FieldError,
    HoldAction,
    Inadmissible,
    Millis,
    NodeHeld,
    NodeName,
    NodeObserved,
    NodeRemoved,
    NodeResumed,
    Preempted,
    PriorityClassObserved,
    QueueName,
    QuotaPath,
    QuotaTreeApplied,
    QuotaTreeRejected,
    Requeued,
    Retried,
    Unmapped,
    WorkloadDeleted,
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
from usher.core.history.planning import RunRecord, capacity_of
from usher.core.history.usage import (
    MS_PER_SECOND,
    USAGE_BY,
    Interval,
    UsageBy,
    UsageFold,
    usage_totals,
)
from usher.core.intake.workload import extract_priority_class, extract_workload
from usher.core.kinds import success
from usher.core.model.config import POLICIES, WITHIN_QUOTA_MODES, EngineConfig, Policy, WithinQuota
from usher.core.model.errors import InputError, ScenarioError, TreeInvalid, WorkloadInvalid
from usher.core.model.quantity import CPU, format_quantity, parse_resources
from usher.core.rules.holds import HoldOrder, carry_out
from usher.core.rules.retry import container_memory, retry_manifest
from usher.core.state.indexed import ENGINE_STATES
from usher.core.tree.quota_tree import parse_tree

TOP_LEVEL_KEYS = (
    "name",
    "description",
    "config",
    "nodes",
    "objects",
    "timeline",
    "until",
    "expect",
)
RUN_KEY = "runSeconds"
"""A ``create`` entry's optional runtime: the job finishes that long after each admission
(a preemption throws the run away; the next admission starts it again: S2)."""
CONFIG_KEYS = ("policy", "oversellRate", "withinQuota", "minRuntimeSeconds", "halfLifeSeconds")
ACTIONS = (
    "create",
    "finish",
    "delete",
    "apply",
    "node",
    "removeNode",
    "ready",
    "progress",
    "fail",
    "oom",
    "hold",
    "drain",
    "resume",
)
PROGRESS_KEYS = ("job", "ready", "total", "succeeded")
FAIL_KEYS = ("job", "container", "exitCode")
"""``fail: {job, container, exitCode}`` (or ``fail: ns/name``); ``oom`` takes job and container."""
OOM_EXIT_CODE = 137
"""What the kubelet reports for a container the OOM killer ended (SIGKILL)."""
ORDER_KEYS = ("node", "by", "reason", "grace")
"""Keys of a ``hold``/``drain``/``resume`` entry (R14/R15); ``grace`` is the drain's."""
ORDER_ACTIONS: dict[str, HoldAction] = {"hold": "Hold", "drain": "Drain", "resume": "Resume"}
ORDER_FIELDS = {"target": "node", "grace_seconds": "grace"}
"""An order's fields as a scenario names them (a refusal names the scenario's key)."""
SCENARIO_OPERATOR = "scenario"
"""Who orders a hold in a scenario that names nobody."""
STATES = tuple(state.value for state in ENGINE_STATES)
"""The states ``expect.jobs`` may name, as plain strings (an error message prints them)."""
EXPECT_KEYS = (
    "jobs",
    "queues",
    "preempted",
    "quota",
    "usage",
    "reasons",
    "admitted",
    "moments",
    "zones",
)
MOMENT_KEYS = ("at", "jobs", "reasons")
"""``expect.moments``: a list of ``{at, jobs, reasons}``, each checked against the state after
the last pass at or before scenario second ``at`` (time-based expectations: a budget's hold
before its reset, B1)."""
USAGE_KEYS = ("at", *USAGE_BY)
"""``expect.usage``: ``at`` (scenario seconds: the window is [0, at) and running workloads
accrue up to it) and, per grouping, group -> resource -> unit-seconds (U1)."""
MAX_MOMENT = 2**62
"""Later than any moment a scenario can name: the final look."""
MAX_WAKEUP_PASSES = 10_000
"""Bound on the passes run at wakeups after the last timeline entry (a safety net)."""


@dataclass(frozen=True)
class Step:
    """One timeline entry turned into the event it stands for."""

    at_ms: Millis
    event: ClusterEvent | HoldOrder
    """What the entry stands for; an operator's order is judged when it is played (R14)."""
    manifest: Mapping[str, object] | None = None
    """The manifest of a ``create``: a retry of the job is made from it (R12)."""
    run_ms: Millis | None = None
    """A ``create``'s ``runSeconds``: it finishes this long after it is admitted."""


@dataclass(frozen=True)
class Expect:
    """The scenario's ``expect:`` block, already validated."""

    jobs: dict[WorkloadKey, str] = field(default_factory=dict)
    queues: dict[QueueName, list[WorkloadKey]] = field(default_factory=dict)
    preempted: list[WorkloadKey] | None = None
    quota: dict[QuotaPath, dict[str, int]] = field(default_factory=dict)
    usage: UsageExpect | None = None
    reasons: dict[WorkloadKey, str] = field(default_factory=dict)
    """Workload -> the start of its final ``Code: message`` reason (R14's ``Held: ...``)."""
    admitted: dict[WorkloadKey, Millis] = field(default_factory=dict)
    """Workload -> the scenario time of its last admission (``expect.admitted``, seconds)."""
    moments: list[Moment] = field(default_factory=list)
    zones: dict[WorkloadKey, Zone] = field(default_factory=dict)
    """Workload -> the zone its last ``Admitted`` names (``expect.zones``, Z2)."""


@dataclass(frozen=True)
class Moment:
    """``expect.moments`` item: job states and reasons as they were at ``at_ms``."""

    at_ms: Millis
    jobs: dict[WorkloadKey, str]
    reasons: dict[WorkloadKey, str]


@dataclass(frozen=True)
class UsageExpect:
    """``expect.usage``: resource-seconds per group at scenario time ``at_ms`` (U1)."""

    at_ms: Millis
    groups: dict[UsageBy, dict[str, dict[str, int]]]
    """Grouping -> group -> resource -> canonical units x ms."""


@dataclass(frozen=True)
class Scenario:
    """A validated scenario, ready to ``run``."""

    name: str
    source: str
    config: EngineConfig
    setup: list[ClusterEvent]
    """Nodes and objects, applied at t=0 before the timeline."""
    steps: list[Step]
    expect: Expect | None
    until_ms: Millis | None = None
    """``until``: nothing at or after it is played (a planning run's horizon)."""


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


# ---------------------------------------------------------------------------- loading


class _Errors:
    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def add(self, path: str, code: str, message: str) -> None:
        self.items.append(FieldError(path=path, code=code, message=message))

    def absorb(self, prefix: str, failure: InputError) -> None:
        for error in failure.errors:
            path = f"{prefix}.{error.path}" if error.path else prefix
            self.items.append(FieldError(path=path, code=error.code, message=error.message))


def load_scenario(data: object, source: str) -> Scenario:
    """Validate parsed scenario data; raise ``ScenarioError`` naming every bad field."""
    errors = _Errors()
    if not isinstance(data, Mapping):
        errors.add("", "not-a-mapping", f"{source}: a scenario must be a mapping")
        raise ScenarioError(errors.items)
    for key in sorted(str(k) for k in data):
        if key not in TOP_LEVEL_KEYS:
            errors.add(key, "unknown-key", f"unknown key {key!r}; expected one of {TOP_LEVEL_KEYS}")
    name = data.get("name", source)
    if not isinstance(name, str):
        errors.add("name", "invalid-name", "name must be a string")
        name = source
    config = _load_config(data.get("config"), errors)
    setup = _load_nodes(data.get("nodes"), errors)
    setup.extend(_load_objects(data.get("objects"), errors))
    steps = _load_timeline(data.get("timeline"), errors)
    expect = _load_expect(data.get("expect"), errors) if "expect" in data else None
    until = _timeline_at(data["until"], "until", errors) if "until" in data else None
    if errors.items:
        raise ScenarioError(errors.items)
    return Scenario(
        name=name,
        source=source,
        config=config,
        setup=setup,
        steps=steps,
        expect=expect,
        until_ms=Millis(until) if until is not None else None,
    )


def _load_config(raw: object, errors: _Errors) -> EngineConfig:
    if raw is None:
        return EngineConfig()
    if not isinstance(raw, Mapping):
        errors.add("config", "not-a-mapping", "config must be a mapping")
        return EngineConfig()
    for key in sorted(str(k) for k in raw):
        if key not in CONFIG_KEYS:
            errors.add(
                f"config.{key}", "unknown-key", f"unknown config key; expected {CONFIG_KEYS}"
            )
    policy = Policy.ROUND
    raw_policy = raw.get("policy", "Round")
    if raw_policy in POLICIES:
        policy = Policy(raw_policy)
    else:
        errors.add("config.policy", "invalid-value", f"policy must be one of {POLICIES}")
    within: WithinQuota = "Never"
    raw_within = raw.get("withinQuota", "Never")
    if raw_within in WITHIN_QUOTA_MODES:
        within = "LowerPriority" if raw_within == "LowerPriority" else "Never"
    else:
        errors.add(
            "config.withinQuota",
            "invalid-value",
            f"withinQuota must be one of {WITHIN_QUOTA_MODES}",
        )
    rate = _exact_number(raw.get("oversellRate", 1), "config.oversellRate", errors)
    if rate is not None and rate <= 0:
        errors.add("config.oversellRate", "invalid-value", "oversellRate must be > 0")
        rate = None
    runtime = _exact_number(raw.get("minRuntimeSeconds", 0), "config.minRuntimeSeconds", errors)
    runtime_ms = 0
    if runtime is not None:
        if runtime < 0 or (runtime * 1000).denominator != 1:
            errors.add(
                "config.minRuntimeSeconds",
                "invalid-value",
                "minRuntimeSeconds must be >= 0 with at most millisecond precision",
            )
        else:
            runtime_ms = int(runtime * 1000)
    return EngineConfig(
        policy=policy,
        oversell_rate=rate if rate is not None else Fraction(1),
        within_quota=within,
        min_runtime_ms=runtime_ms,
        half_life_ms=_half_life_ms(raw, errors),
    )


def _half_life_ms(raw: Mapping[str, object], errors: _Errors) -> int | None:
    """``halfLifeSeconds`` (F1): fair share with memory; absent = off."""
    if raw.get("halfLifeSeconds") is None:
        return None
    half_life = _exact_number(raw["halfLifeSeconds"], "config.halfLifeSeconds", errors)
    if half_life is None:
        return None
    if half_life <= 0 or (half_life * 1000).denominator != 1:
        errors.add(
            "config.halfLifeSeconds",
            "invalid-value",
            "halfLifeSeconds must be > 0 with at most millisecond precision",
        )
        return None
    return int(half_life * 1000)


def _exact_number(raw: object, path: str, errors: _Errors) -> Fraction | None:
    """A YAML number (or numeric string) as an exact fraction; ``1.1`` means 11/10."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        errors.add(path, "invalid-number", f"expected a number, got {type(raw).__name__}")
        return None
    try:
        # repr of a float is its shortest exact decimal, so 0.1 stays one tenth.
        return Fraction(repr(raw) if isinstance(raw, float) else str(raw))
    except (ValueError, ZeroDivisionError):
        errors.add(path, "invalid-number", f"expected a number, got {raw!r}")
        return None


def _load_nodes(raw: object, errors: _Errors) -> list[ClusterEvent]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        errors.add("nodes", "not-a-list", "nodes must be a list")
        return []
    return [
        event
        for index, item in enumerate(raw)
        if (event := _node_event(item, f"nodes[{index}]", errors)) is not None
    ]


def _node_event(raw: object, path: str, errors: _Errors) -> NodeObserved | None:
    if not isinstance(raw, Mapping):
        errors.add(path, "not-a-mapping", "a node must be {name, zone, allocatable}")
        return None
    for key in sorted(str(k) for k in raw):
        if key not in ("name", "zone", "allocatable", "unschedulable"):
            errors.add(f"{path}.{key}", "unknown-key", "node keys: name, zone, allocatable")
    name = raw.get("name")
    zone = raw.get("zone", "default")
    if not isinstance(name, str) or not name:
        errors.add(f"{path}.name", "missing-name", "a node needs a name")
        return None
    if not isinstance(zone, str) or not zone:
        errors.add(f"{path}.zone", "invalid-zone", "zone must be a non-empty string")
        return None
    unschedulable = raw.get("unschedulable", False)
    if not isinstance(unschedulable, bool):
        errors.add(f"{path}.unschedulable", "invalid-value", "unschedulable must be a boolean")
        return None
    try:
        allocatable = parse_resources(raw.get("allocatable"), f"{path}.allocatable")
    except InputError as failure:
        errors.items.extend(failure.errors)
        return None
    return NodeObserved(
        node=NodeName(name), zone=Zone(zone), allocatable=allocatable, unschedulable=unschedulable
    )


def _load_objects(raw: object, errors: _Errors) -> list[ClusterEvent]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        errors.add("objects", "not-a-list", "objects must be a list of manifests")
        return []
    events: list[ClusterEvent] = []
    for index, manifest in enumerate(raw):
        event = _object_event(manifest, f"objects[{index}]", errors)
        if event is not None:
            events.append(event)
    return events


def _object_event(manifest: object, path: str, errors: _Errors) -> ClusterEvent | None:
    """An ElasticQuotaTree (valid or rejected) or PriorityClass manifest as its event."""
    kind = manifest.get("kind") if isinstance(manifest, Mapping) else None
    if kind == "ElasticQuotaTree":
        try:
            return QuotaTreeApplied(root=parse_tree(manifest))
        except TreeInvalid as failure:
            # Not a scenario error: the engine must see the rejection and keep the last tree.
            return QuotaTreeRejected(errors=failure.errors)
    if kind == "PriorityClass":
        try:
            name, value = extract_priority_class(manifest)
        except InputError as failure:
            errors.absorb(path, failure)
            return None
        return PriorityClassObserved(name=name, value=value)
    errors.add(
        f"{path}.kind", "unsupported-kind", f"expected ElasticQuotaTree or PriorityClass: {kind!r}"
    )
    return None


def _load_timeline(raw: object, errors: _Errors) -> list[Step]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        errors.add("timeline", "not-a-list", "timeline must be a list")
        return []
    steps: list[Step] = []
    live: dict[WorkloadKey, int] = {}
    """Workloads created so far -> their pods (``ready`` and ``progress`` count them)."""
    manifests: dict[WorkloadKey, Mapping[str, object]] = {}
    last_ms = -1
    for index, entry in enumerate(raw):
        path = f"timeline[{index}]"
        if not isinstance(entry, Mapping):
            errors.add(path, "not-a-mapping", "a timeline entry must be a mapping")
            continue
        at_ms = _timeline_at(entry.get("at"), f"{path}.at", errors)
        if at_ms is not None:
            if at_ms < last_ms:
                errors.add(f"{path}.at", "not-monotonic", "at values must not decrease")
            last_ms = max(last_ms, at_ms)
        event = _timeline_event(entry, path, Millis(at_ms or 0), live, manifests, errors)
        run_ms = _run_ms(entry, path, errors) if RUN_KEY in entry else None
        if event is not None and at_ms is not None:
            created = manifests.get(event.workload) if isinstance(event, WorkloadObserved) else None
            steps.append(Step(at_ms=Millis(at_ms), event=event, manifest=created, run_ms=run_ms))
    return steps


def _timeline_at(raw: object, path: str, errors: _Errors) -> int | None:
    if raw is None:
        errors.add(path, "missing-at", "every timeline entry needs at (seconds)")
        return None
    if isinstance(raw, str):
        errors.add(path, "invalid-at", f"at must be a number of seconds, got {raw!r}")
        return None
    seconds = _exact_number(raw, path, errors)
    if seconds is None:
        return None
    if seconds < 0 or (seconds * 1000).denominator != 1:
        errors.add(path, "invalid-at", "at must be >= 0 with at most millisecond precision")
        return None
    return int(seconds * 1000)


def _run_ms(entry: Mapping[object, object], path: str, errors: _Errors) -> Millis | None:
    """``runSeconds`` of a ``create``: > 0 with at most millisecond precision."""
    where = f"{path}.{RUN_KEY}"
    if "create" not in entry:
        errors.add(where, "unexpected-run", f"{RUN_KEY} is only allowed with create")
        return None
    seconds = _exact_number(entry[RUN_KEY], where, errors)
    if seconds is None:
        return None
    if seconds <= 0 or (seconds * 1000).denominator != 1:
        errors.add(where, "invalid-run", f"{RUN_KEY} must be > 0 with at most ms precision")
        return None
    return Millis(int(seconds * 1000))


def _timeline_event(
    entry: Mapping[object, object],
    path: str,
    at_ms: Millis,
    live: dict[WorkloadKey, int],
    manifests: dict[WorkloadKey, Mapping[str, object]],
    errors: _Errors,
) -> ClusterEvent | HoldOrder | None:
    actions = [a for a in ACTIONS if a in entry]
    for key in sorted(str(k) for k in entry):
        if key not in (*ACTIONS, "at", "name", RUN_KEY):
            errors.add(f"{path}.{key}", "unknown-action", f"unknown key; actions are {ACTIONS}")
    if len(actions) != 1:
        if not any(str(k) not in (*ACTIONS, "at", "name", RUN_KEY) for k in entry):
            errors.add(path, "one-action", f"exactly one of {ACTIONS} is required")
        return None
    action = actions[0]
    if "name" in entry and action != "create":
        errors.add(f"{path}.name", "unexpected-name", "name is only allowed with create")
    value = entry[action]
    if action == "create":
        event = _create_event(value, entry.get("name"), path, at_ms, live, errors)
        if isinstance(event, WorkloadObserved) and isinstance(value, Mapping):
            manifests[event.workload] = value
        return event
    if action in ("fail", "oom"):
        return _failure_event(action, value, f"{path}.{action}", live, manifests, errors)
    if action in ("finish", "delete"):
        return _finish_or_delete(action, value, f"{path}.{action}", live, errors)
    if action in ("ready", "progress"):
        event = _progress_event(action, value, f"{path}.{action}", at_ms, live, errors)
        return _min_success_reached(event, manifests)
    if action == "apply":
        return _object_event(value, f"{path}.apply", errors)
    if action == "node":
        return _node_event(value, f"{path}.node", errors)
    if action in ORDER_ACTIONS:
        return _hold_order(ORDER_ACTIONS[action], value, f"{path}.{action}", errors)
    return _remove_node_event(value, f"{path}.removeNode", errors)


def _create_event(
    manifest: object,
    name: object,
    path: str,
    at_ms: Millis,
    live: dict[WorkloadKey, int],
    errors: _Errors,
) -> ClusterEvent | None:
    if name is not None and (not isinstance(name, str) or not name):
        errors.add(f"{path}.name", "invalid-name", "name must be a non-empty string")
        return None
    metadata = manifest.get("metadata") if isinstance(manifest, Mapping) else None
    if (
        name is None
        and isinstance(metadata, Mapping)
        and not metadata.get("name")
        and metadata.get("generateName")
    ):
        errors.add(
            f"{path}.name",
            "missing-name",
            "the manifest has only generateName; give the job a name with name:",
        )
        return None
    try:
        event = extract_workload(manifest, created_ms=at_ms, name=name)
    except WorkloadInvalid as failure:
        errors.absorb(f"{path}.create", failure)
        return None
    live[event.workload] = sum(p.count for p in event.pod_sets if p.count > 0)
    return event


def _finish_or_delete(
    action: str, value: object, path: str, live: dict[WorkloadKey, int], errors: _Errors
) -> ClusterEvent | None:
    if not isinstance(value, str) or value.count("/") != 1:
        errors.add(path, "invalid-job", f"{action} takes namespace/name, got {value!r}")
        return None
    key = WorkloadKey(value)
    if key not in live:
        errors.add(path, "unknown-job", f"{value} was not created earlier in the timeline")
        return None
    if action == "delete":
        live.pop(key, None)
        return WorkloadDeleted(workload=key)
    return WorkloadFinished(workload=key)


def _live_job(
    value: object, path: str, live: dict[WorkloadKey, int], errors: _Errors
) -> WorkloadKey | None:
    if not isinstance(value, str) or value.count("/") != 1:
        errors.add(path, "invalid-job", f"expected namespace/name, got {value!r}")
        return None
    key = WorkloadKey(value)
    first = _first_attempt(key)
    if key not in live and first in live:
        # A retry the run may create (R12): it has its first attempt's pods.
        live[key] = live[first]
    if key not in live:
        errors.add(path, "unknown-job", f"{value} was not created earlier in the timeline")
        return None
    return key


def _first_attempt(key: WorkloadKey) -> WorkloadKey:
    """``ns/name`` of ``ns/name-retry-<n>`` (R12); any other key itself."""
    head, sep, tail = key.rpartition("-retry-")
    return WorkloadKey(head) if sep and tail.isdigit() else key


def _failure_event(
    action: str,
    value: object,
    path: str,
    live: dict[WorkloadKey, int],
    manifests: dict[WorkloadKey, Mapping[str, object]],
    errors: _Errors,
) -> ClusterEvent | None:
    """``fail`` / ``oom``: the job failed, one container ending with an exit code or OOMKilled
    (R12, R13). Its memory is filled in as the run plays it (the watcher reports it)."""
    raw = value if isinstance(value, Mapping) else {"job": value}
    allowed = FAIL_KEYS if action == "fail" else FAIL_KEYS[:2]
    for key_name in sorted(str(k) for k in raw):
        if key_name not in allowed:
            errors.add(f"{path}.{key_name}", "unknown-key", f"{action} keys: {allowed}")
    key = _live_job(
        raw.get("job"), f"{path}.job" if isinstance(value, Mapping) else path, live, errors
    )
    if key is None:
        return None
    containers = list(container_memory(manifests.get(_first_attempt(key), {})))
    name = raw.get("container", containers[0][1] if containers else None)
    pod_sets = [pod_set for pod_set, container in containers if container == name]
    if not pod_sets:
        errors.add(f"{path}.container", "unknown-container", f"{key} has no container {name!r}")
        return None
    exit_code = raw.get("exitCode", 1) if action == "fail" else OOM_EXIT_CODE
    if isinstance(exit_code, bool) or not isinstance(exit_code, int) or exit_code == 0:
        errors.add(f"{path}.exitCode", "invalid-exit-code", "exitCode must be a non-zero integer")
        return None
    termination = ContainerTermination(
        pod_set=pod_sets[0],
        container=str(name),
        reason="OOMKilled" if action == "oom" else "Error",
        exit_code=exit_code,
    )
    return WorkloadFinished(workload=key, succeeded=False, terminations=[termination])


def _progress_event(
    action: str,
    value: object,
    path: str,
    at_ms: Millis,
    live: dict[WorkloadKey, int],
    errors: _Errors,
) -> ClusterEvent | None:
    """``ready: ns/name`` (every pod ready) or ``progress: {job, ready, total, succeeded}``
    (R10)."""
    if action == "ready":
        key = _live_job(value, path, live, errors)
        if key is None:
            return None
        return WorkloadProgress(workload=key, ready=live[key], total=live[key], observed_ms=at_ms)
    if not isinstance(value, Mapping):
        errors.add(path, "not-a-mapping", "progress takes {job, ready, total}")
        return None
    for key_name in sorted(str(k) for k in value):
        if key_name not in PROGRESS_KEYS:
            errors.add(f"{path}.{key_name}", "unknown-key", f"progress keys: {PROGRESS_KEYS}")
    key = _live_job(value.get("job"), f"{path}.job", live, errors)
    if key is None:
        return None
    total = value.get("total", live[key])
    ready = value.get("ready")
    succeeded = value.get("succeeded", 0)
    counts_valid = True
    for name, count in (("ready", ready), ("total", total), ("succeeded", succeeded)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            errors.add(f"{path}.{name}", "invalid-count", f"{name} must be a whole number >= 0")
            counts_valid = False
    if not counts_valid:
        return None
    assert isinstance(ready, int) and isinstance(total, int) and isinstance(succeeded, int)
    if ready > total:
        errors.add(f"{path}.ready", "invalid-count", f"ready {ready} is more than total {total}")
        return None
    if succeeded > ready:
        message = f"succeeded {succeeded} is more than ready {ready} (succeeded pods are ready)"
        errors.add(f"{path}.succeeded", "invalid-count", message)
        return None
    return WorkloadProgress(
        workload=key, ready=ready, total=total, succeeded=succeeded, observed_ms=at_ms
    )


def _min_success_reached(
    event: ClusterEvent | None, manifests: Mapping[WorkloadKey, Mapping[str, object]]
) -> ClusterEvent | None:
    """The watcher's part for minSuccess: once as many pods succeeded as the job's
    ``usher.io/min-success`` asks, it reports the job finished (succeeded), not progress."""
    if not isinstance(event, WorkloadProgress) or event.succeeded == 0:
        return event
    manifest = manifests.get(event.workload)
    outcome = success.reached(dict(manifest), event.succeeded) if manifest is not None else None
    if outcome is None:
        return event
    wanted = outcome.min_success
    return WorkloadFinished(workload=event.workload, succeeded=True, min_success=wanted)


def _hold_order(action: HoldAction, value: object, path: str, errors: _Errors) -> HoldOrder | None:
    """``hold|drain|resume: {node, by, reason, grace}`` (R14/R15). Its shape is checked
    here; whether it names a node and a valid grace is judged when it is played, against
    the tree then in force, as the ledger judges an operator's order."""
    if not isinstance(value, Mapping):
        errors.add(path, "not-a-mapping", f"takes {{{', '.join(ORDER_KEYS)}}}")
        return None
    for key_name in sorted(str(k) for k in value):
        if key_name not in ORDER_KEYS or (key_name == "grace" and action != "Drain"):
            errors.add(f"{path}.{key_name}", "unknown-key", f"keys: {ORDER_KEYS} (grace: drain)")
    node, grace = value.get("node"), value.get("grace")
    by, reason = value.get("by", SCENARIO_OPERATOR), value.get("reason", "")
    for name, text in (("node", node), ("by", by), ("reason", reason)):
        if not isinstance(text, str) or (name != "reason" and not text):
            errors.add(f"{path}.{name}", "invalid-type", f"{name} must be a non-empty string")
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int)):
        errors.add(f"{path}.grace", "invalid-grace", "grace is a whole number of seconds")
        return None
    if not (isinstance(node, str) and isinstance(by, str) and isinstance(reason, str)):
        return None
    return HoldOrder(action=action, target=node, by=by, reason=reason, grace_seconds=grace)


def _remove_node_event(value: object, path: str, errors: _Errors) -> ClusterEvent | None:
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        errors.add(path, "invalid-node", "removeNode takes {name, zone}")
        return None
    zone = value.get("zone", "default")
    if not isinstance(zone, str):
        errors.add(f"{path}.zone", "invalid-zone", "zone must be a string")
        return None
    return NodeRemoved(node=NodeName(str(value["name"])), zone=Zone(zone))


def _load_expect(raw: object, errors: _Errors) -> Expect:
    if not isinstance(raw, Mapping):
        errors.add("expect", "not-a-mapping", "expect must be a mapping")
        return Expect()
    for key in sorted(str(k) for k in raw):
        if key not in EXPECT_KEYS:
            errors.add(f"expect.{key}", "unknown-key", f"expect keys: {EXPECT_KEYS}")
    jobs: dict[WorkloadKey, str] = {}
    for job, state in _mapping(raw.get("jobs"), "expect.jobs", errors).items():
        if state not in STATES:
            errors.add(f"expect.jobs.{job}", "invalid-state", f"state must be one of {STATES}")
        else:
            jobs[WorkloadKey(job)] = str(state)
    queues: dict[QueueName, list[WorkloadKey]] = {}
    for queue, members in _mapping(raw.get("queues"), "expect.queues", errors).items():
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            errors.add(f"expect.queues.{queue}", "not-a-list", "a queue is a list of jobs")
        else:
            queues[QueueName(queue)] = [WorkloadKey(str(m)) for m in members]
    preempted: list[WorkloadKey] | None = None
    if "preempted" in raw:
        listed = raw.get("preempted")
        if not isinstance(listed, list) or not all(isinstance(m, str) for m in listed):
            errors.add("expect.preempted", "not-a-list", "preempted is a list of jobs")
        else:
            preempted = [WorkloadKey(str(m)) for m in listed]
    quota: dict[QuotaPath, dict[str, int]] = {}
    for node, used in _mapping(raw.get("quota"), "expect.quota", errors).items():
        try:
            quota[QuotaPath(node)] = parse_resources(used, f"expect.quota.{node}")
        except InputError as failure:
            errors.items.extend(failure.errors)
    said: dict[WorkloadKey, str] = {}
    for job, text in _mapping(raw.get("reasons"), "expect.reasons", errors).items():
        if not isinstance(text, str) or not text:
            errors.add(f"expect.reasons.{job}", "invalid-type", "a reason is a non-empty string")
        else:
            said[WorkloadKey(job)] = text
    usage = _load_usage(raw.get("usage"), errors) if "usage" in raw else None
    admitted: dict[WorkloadKey, Millis] = {}
    for job, at in _mapping(raw.get("admitted"), "expect.admitted", errors).items():
        at_ms = _timeline_at(at, f"expect.admitted.{job}", errors)
        if at_ms is not None:
            admitted[WorkloadKey(job)] = Millis(at_ms)
    zones: dict[WorkloadKey, Zone] = {}
    for job, zone in _mapping(raw.get("zones"), "expect.zones", errors).items():
        if not isinstance(zone, str) or not zone:
            errors.add(f"expect.zones.{job}", "invalid-type", "a zone is a non-empty string")
        else:
            zones[WorkloadKey(job)] = Zone(zone)
    return Expect(
        jobs=jobs,
        queues=queues,
        preempted=preempted,
        quota=quota,
        usage=usage,
        reasons=said,
        admitted=admitted,
        moments=_load_moments(raw.get("moments"), errors),
        zones=zones,
    )


def _load_moments(raw: object, errors: _Errors) -> list[Moment]:
    """``[{at: seconds, jobs: {job: state}, reasons: {job: start}}]``."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        errors.add("expect.moments", "not-a-list", "moments is a list of {at, jobs, reasons}")
        return []
    out: list[Moment] = []
    for index, item in enumerate(raw):
        path = f"expect.moments[{index}]"
        if not isinstance(item, Mapping) or "at" not in item:
            errors.add(path, "missing-at", "a moment is a mapping with at (scenario seconds)")
            continue
        for key in sorted(str(k) for k in item):
            if key not in MOMENT_KEYS:
                errors.add(f"{path}.{key}", "unknown-key", f"moment keys: {MOMENT_KEYS}")
        at_ms = _timeline_at(item.get("at"), f"{path}.at", errors)
        jobs: dict[WorkloadKey, str] = {}
        for job, state in _mapping(item.get("jobs"), f"{path}.jobs", errors).items():
            if state not in STATES:
                errors.add(f"{path}.jobs.{job}", "invalid-state", f"state must be one of {STATES}")
            else:
                jobs[WorkloadKey(job)] = str(state)
        said: dict[WorkloadKey, str] = {}
        for job, text in _mapping(item.get("reasons"), f"{path}.reasons", errors).items():
            if not isinstance(text, str) or not text:
                errors.add(
                    f"{path}.reasons.{job}", "invalid-type", "a reason is a non-empty string"
                )
            else:
                said[WorkloadKey(job)] = text
        if at_ms is not None:
            out.append(Moment(at_ms=Millis(at_ms), jobs=jobs, reasons=said))
    return out


def _load_usage(raw: object, errors: _Errors) -> UsageExpect | None:
    """``{at: seconds, node|queue|namespace: {group: {resource: unit-seconds}}}``."""
    if not isinstance(raw, Mapping):
        errors.add("expect.usage", "not-a-mapping", f"usage keys: {USAGE_KEYS}")
        return None
    for key in sorted(str(k) for k in raw):
        if key not in USAGE_KEYS:
            errors.add(f"expect.usage.{key}", "unknown-key", f"usage keys: {USAGE_KEYS}")
    if raw.get("at") is None:
        errors.add("expect.usage.at", "missing-at", "usage needs at (scenario seconds)")
    at_ms = _timeline_at(raw.get("at"), "expect.usage.at", errors) if "at" in raw else None
    groups: dict[UsageBy, dict[str, dict[str, int]]] = {}
    for by in UsageBy:
        path = f"expect.usage.{by.value}"
        for group, amounts in _mapping(raw.get(by.value), path, errors).items():
            for resource, seconds in _mapping(amounts, f"{path}.{group}", errors).items():
                amount = _usage_amount(resource, seconds, f"{path}.{group}.{resource}", errors)
                if amount is not None:
                    groups.setdefault(by, {}).setdefault(group, {})[resource] = amount
    return UsageExpect(at_ms=Millis(at_ms), groups=groups) if at_ms is not None else None


def _usage_amount(resource: str, raw: object, path: str, errors: _Errors) -> int | None:
    """Unit-seconds (cpu: core-seconds) as canonical units x ms, which must be whole."""
    seconds = _exact_number(raw, path, errors)
    if seconds is None:
        return None
    amount = seconds * MS_PER_SECOND * (1000 if resource == CPU else 1)
    if seconds < 0 or amount.denominator != 1:
        errors.add(path, "invalid-usage", "usage must be >= 0 and whole in canonical units x ms")
        return None
    return int(amount)


def _mapping(raw: object, path: str, errors: _Errors) -> dict[str, object]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        errors.add(path, "not-a-mapping", "expected a mapping")
        return {}
    return {str(k): v for k, v in raw.items()}


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

    def feed(entry: ClusterEvent | HoldOrder, at_ms: Millis) -> None:
        look_before(at_ms)
        event: LogEvent | None = (
            _judge(entry, engine, at_ms, rejections, hold_changes)
            if isinstance(entry, HoldOrder)
            else entry
        )
        if event is None:
            return
        if isinstance(event, QuotaTreeRejected):
            rejections.append(Rejection(at_ms=at_ms, errors=event.errors))
        if isinstance(event, WorkloadFinished) and event.terminations:
            event = _with_memory(event, manifests.get(event.workload))
        ledger.extend(SimDecision(at_ms, d) for d in engine.apply(event, at_ms))

    def decide(at_ms: Millis) -> None:
        look_before(at_ms)
        made = engine.decide(at_ms)
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
            observed = _observed_or_rejected(created, at_ms)
            ledger.extend(SimDecision(at_ms, d) for d in engine.apply(observed, at_ms))
        if retries:
            decide(at_ms)

    def finish_due(at_ms: Millis) -> None:
        for workload in runs.due(at_ms):
            feed(WorkloadFinished(workload=workload), at_ms)

    def wake_until(limit: int | None) -> None:
        """Passes at wakeups and at runs' ends before ``limit`` (a wakeup-only pass counts
        against the safety net; a run's end is an input, as a timeline entry is)."""
        passes = 0
        while passes < MAX_WAKEUP_PASSES:
            wakeup, finish = engine.next_wakeup(), runs.next_end()
            upcoming = min((t for t in (wakeup, finish) if t is not None), default=None)
            if upcoming is None or (limit is not None and upcoming >= limit):
                return
            passes += upcoming != finish
            finish_due(upcoming)
            decide(upcoming)

    for setup in scenario.setup:
        feed(setup, Millis(0))
    until = scenario.until_ms
    groups = [g for g in _groups(scenario.steps) if until is None or g[0] < until]
    if not groups or groups[0][0] > 0:
        decide(Millis(0))
    for at_ms, entries in groups:
        wake_until(at_ms)
        finish_due(at_ms)
        for entry in entries:
            feed(entry, at_ms)
        decide(at_ms)
    wake_until(until)
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
                    _first_attempt(decision.workload)
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
