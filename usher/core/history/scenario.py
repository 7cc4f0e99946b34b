"""A scenario file as typed values (docs/admission-rules.md S1, S2): ``load_scenario``.

What it does: turns parsed YAML into a typed ``Scenario`` (config, setup nodes and objects,
the timeline: ``usher.core.history.timeline``, ``until``, and the ``expect:`` block) or raises
a ``ScenarioError`` naming every bad field. ``usher.core.history.sim`` plays it.
What it must never do: open files, read a clock or stop at the first bad field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from schemas import (
    Millis,
    QueueName,
    QuotaPath,
    WorkloadKey,
    Zone,
)
from schemas.events import ClusterEvent
from usher.core.history.timeline import (
    FieldErrors,
    Step,
    exact_number,
    load_timeline,
    node_event,
    object_event,
    timeline_at,
)
from usher.core.history.usage import (
    MS_PER_SECOND,
    USAGE_BY,
    UsageBy,
)
from usher.core.model.config import POLICIES, WITHIN_QUOTA_MODES, EngineConfig, Policy, WithinQuota
from usher.core.model.errors import InputError, ScenarioError
from usher.core.model.quantity import CPU, parse_resources
from usher.core.state.indexed import ENGINE_STATES

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
CONFIG_KEYS = ("policy", "oversellRate", "withinQuota", "minRuntimeSeconds", "halfLifeSeconds")
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
    "domains",
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
    domains: dict[WorkloadKey, str] = field(default_factory=dict)
    """Workload -> the topology domain its last ``Admitted`` pins it to, ``<level>=<domain>``,
    or ``none`` (``expect.domains``, TP1)."""


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


def load_scenario(data: object, source: str) -> Scenario:
    """Validate parsed scenario data; raise ``ScenarioError`` naming every bad field."""
    errors = FieldErrors()
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
    steps = load_timeline(data.get("timeline"), errors)
    expect = _load_expect(data.get("expect"), errors) if "expect" in data else None
    until = timeline_at(data["until"], "until", errors) if "until" in data else None
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


def _load_config(raw: object, errors: FieldErrors) -> EngineConfig:
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
    rate = exact_number(raw.get("oversellRate", 1), "config.oversellRate", errors)
    if rate is not None and rate <= 0:
        errors.add("config.oversellRate", "invalid-value", "oversellRate must be > 0")
        rate = None
    runtime = exact_number(raw.get("minRuntimeSeconds", 0), "config.minRuntimeSeconds", errors)
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


def _half_life_ms(raw: Mapping[str, object], errors: FieldErrors) -> int | None:
    """``halfLifeSeconds`` (F1): fair share with memory; absent = off."""
    if raw.get("halfLifeSeconds") is None:
        return None
    half_life = exact_number(raw["halfLifeSeconds"], "config.halfLifeSeconds", errors)
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


def _load_nodes(raw: object, errors: FieldErrors) -> list[ClusterEvent]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        errors.add("nodes", "not-a-list", "nodes must be a list")
        return []
    return [
        event
        for index, item in enumerate(raw)
        if (event := node_event(item, f"nodes[{index}]", errors)) is not None
    ]


def _load_objects(raw: object, errors: FieldErrors) -> list[ClusterEvent]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        errors.add("objects", "not-a-list", "objects must be a list of manifests")
        return []
    events: list[ClusterEvent] = []
    for index, manifest in enumerate(raw):
        event = object_event(manifest, f"objects[{index}]", errors)
        if event is not None:
            events.append(event)
    return events


def _load_expect(raw: object, errors: FieldErrors) -> Expect:
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
        at_ms = timeline_at(at, f"expect.admitted.{job}", errors)
        if at_ms is not None:
            admitted[WorkloadKey(job)] = Millis(at_ms)
    zones: dict[WorkloadKey, Zone] = {}
    for job, zone in _mapping(raw.get("zones"), "expect.zones", errors).items():
        if not isinstance(zone, str) or not zone:
            errors.add(f"expect.zones.{job}", "invalid-type", "a zone is a non-empty string")
        else:
            zones[WorkloadKey(job)] = Zone(zone)
    domains: dict[WorkloadKey, str] = {}
    for job, domain in _mapping(raw.get("domains"), "expect.domains", errors).items():
        if not isinstance(domain, str) or not domain:
            message = "a domain is '<level>=<domain>' or 'none'"
            errors.add(f"expect.domains.{job}", "invalid-type", message)
        else:
            domains[WorkloadKey(job)] = domain
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
        domains=domains,
    )


def _load_moments(raw: object, errors: FieldErrors) -> list[Moment]:
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
        at_ms = timeline_at(item.get("at"), f"{path}.at", errors)
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


def _load_usage(raw: object, errors: FieldErrors) -> UsageExpect | None:
    """``{at: seconds, node|queue|namespace: {group: {resource: unit-seconds}}}``."""
    if not isinstance(raw, Mapping):
        errors.add("expect.usage", "not-a-mapping", f"usage keys: {USAGE_KEYS}")
        return None
    for key in sorted(str(k) for k in raw):
        if key not in USAGE_KEYS:
            errors.add(f"expect.usage.{key}", "unknown-key", f"usage keys: {USAGE_KEYS}")
    if raw.get("at") is None:
        errors.add("expect.usage.at", "missing-at", "usage needs at (scenario seconds)")
    at_ms = timeline_at(raw.get("at"), "expect.usage.at", errors) if "at" in raw else None
    groups: dict[UsageBy, dict[str, dict[str, int]]] = {}
    for by in UsageBy:
        path = f"expect.usage.{by.value}"
        for group, amounts in _mapping(raw.get(by.value), path, errors).items():
            for resource, seconds in _mapping(amounts, f"{path}.{group}", errors).items():
                amount = _usage_amount(resource, seconds, f"{path}.{group}.{resource}", errors)
                if amount is not None:
                    groups.setdefault(by, {}).setdefault(group, {})[resource] = amount
    return UsageExpect(at_ms=Millis(at_ms), groups=groups) if at_ms is not None else None


def _usage_amount(resource: str, raw: object, path: str, errors: FieldErrors) -> int | None:
    """Unit-seconds (cpu: core-seconds) as canonical units x ms, which must be whole."""
    seconds = exact_number(raw, path, errors)
    if seconds is None:
        return None
    amount = seconds * MS_PER_SECOND * (1000 if resource == CPU else 1)
    if seconds < 0 or amount.denominator != 1:
        errors.add(path, "invalid-usage", "usage must be >= 0 and whole in canonical units x ms")
        return None
    return int(amount)


def _mapping(raw: object, path: str, errors: FieldErrors) -> dict[str, object]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        errors.add(path, "not-a-mapping", "expected a mapping")
        return {}
    return {str(k): v for k, v in raw.items()}


__all__ = [
    "CONFIG_KEYS",
    "EXPECT_KEYS",
    "MAX_MOMENT",
    "Expect",
    "Moment",
    "Scenario",
    "UsageExpect",
    "load_scenario",
]
