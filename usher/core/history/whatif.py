"""What-if: replay the recorded inputs under other settings and compare with the baseline.

What it does: takes the cluster events of the log (workloads observed, finished, deleted and
rejected; quota trees; nodes; priority classes) and plays them twice through the pure
``Engine``, once with the baseline settings and once with the changed ones (policy, oversell
rate, within-quota mode, minimum runtime, ready timeout (R10), or another quota tree), exactly
as ``usher sim`` plays a scenario: the events of one group are applied at their recorded times,
then a decision pass runs at the time of the group's last event; a pass also runs at every
min-runtime wakeup the engine reports in between, and after the last input until none is left (up
to ``until`` when given), as ``usher sim`` does. A group is a run of consecutive cluster events
each at most ``window_ms`` after the group's first one (default 20 ms, the dequeuer's settle
time). Recorded decisions are ignored: both runs make their own. It reports, per queue and
overall, workloads admitted, mean and p95 wait (first admission minus first observation on the
log), preemptions and pending workloads at the end, and the first differing decisions side by
side.

With ``since``, the log before it is folded as recorded (cluster events and decisions alike,
so the state at ``since`` is the real one) and only what follows is replayed; ``until`` ends
the replay. ``tree`` replaces every recorded ``QuotaTreeApplied`` in the replayed part (and is
applied at ``since`` when the folded part already had a tree): it is in force throughout.
``zone_policy`` (``with_zone_policy``) sets zone attributes -- a node's ``usher.io/zone-max``
(Z1) and default ``usher.io/zones`` (Z3), the root's ``usher.io/burst-zones`` (Z3) -- and a
node's lending policy (``usher.io/reclaim-within`` L1, ``usher.io/lending-limit`` L2) and
preemption policies (P1-P3: ``PREEMPTION_FLAGS``) on every
tree the run replays (each recorded version, ``tree`` when given, and the tree in force at
``since``), so the engine decides with them exactly as it would have. A job's own
``usher.io/zones`` annotation was fixed when it was observed (the log has it) and still wins;
a job listing none takes its leaf's list afresh from each tree, as the engine always does.

Approximations, by design: finish and delete events are replayed at their recorded times,
whatever the other run decided. A workload still pending when its recorded finish arrives
leaves the queue unadmitted; one admitted by a run but never started in reality holds its
quota until its recorded finish or deletion, or the end. Runtimes therefore do not stretch
with a later start.

What it must never do: perform I/O, read a clock, or feed a recorded decision to a run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import msgspec

from schemas import (
    Admitted,
    ClusterConnected,
    ClusterDisconnected,
    ClusterLost,
    Decision,
    FieldError,
    Inadmissible,
    Millis,
    NodeHeld,
    NodeObserved,
    NodeRemoved,
    NodeResumed,
    Preempted,
    PriorityClassDeleted,
    PriorityClassObserved,
    QuotaNode,
    QuotaPath,
    QuotaTreeApplied,
    QuotaTreeDeleted,
    QuotaTreeRejected,
    Requeued,
    Unmapped,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    WorkloadProgress,
    WorkloadRejected,
    Zone,
    ZoneServed,
)
from schemas.events import ClusterEvent
from usher.core.engine.facade import Engine
from usher.core.history.driver import Driver
from usher.core.history.fold import fold_believed
from usher.core.history.planning import (
    CLUSTER,
    DepartmentStats,
    ResourceUse,
    RunRecord,
    capacity_of,
    planning_report,
    wait_percentile,
)
from usher.core.history.replay import History, format_datetime, prefix, to_datetime
from usher.core.history.replayer import screened
from usher.core.history.usage import Interval, held_now
from usher.core.model.config import EngineConfig, format_rate
from usher.core.model.errors import ValueRefused
from usher.core.protocol.log import LogEntry
from usher.core.tree.quota_tree import iter_nodes, validate_tree
from usher.core.tree.zone_burst import BURST_ZONES_ATTRIBUTE, DEFAULT_ZONES_ATTRIBUTE
from usher.core.tree.zone_names import parse_zone_names
from usher.core.tree.zone_quota import ZONE_MAX_ATTRIBUTE, parse_zone_max
from usher.core.values.labels import topology_level
from usher.core.values.registry import (
    LENDING_LIMIT,
    PREEMPT_WHILE_BORROWING,
    RECLAIM_WITH_OWN_VICTIMS,
    RECLAIM_WITHIN,
    WITHIN_QUOTA_REQUEST,
    Setting,
)

DEFAULT_WINDOW_MS = 20
DEFAULT_LIMIT = 10
ALL_QUEUES = "(all)"

_INPUTS = (
    WorkloadObserved,
    WorkloadFinished,
    WorkloadProgress,
    WorkloadDeleted,
    WorkloadRejected,
    QuotaTreeApplied,
    QuotaTreeRejected,
    QuotaTreeDeleted,
    NodeObserved,
    NodeRemoved,
    PriorityClassObserved,
    PriorityClassDeleted,
    ZoneServed,
    ClusterConnected,
    ClusterDisconnected,
    ClusterLost,
    NodeHeld,
    NodeResumed,
)
"""The recorded inputs a run replays: every cluster event type and operators' holds, drains
and resumes (R14/R15: what people ordered stays ordered); decisions are left out."""

_ACTIONS: dict[type, str] = {
    Admitted: "admit",
    Preempted: "preempt",
    Requeued: "requeue",
    Inadmissible: "inadmissible",
    Unmapped: "unmapped",
}


ZONE_MAX_FLAG = "--zone-max"
ZONES_FLAG = "--zones"
BURST_ZONES_FLAG = "--burst-zones"
RECLAIM_WITHIN_FLAG = "--reclaim-within"
LENDING_LIMIT_FLAG = "--lending-limit"


class ZonePolicyError(ValueError):
    """A zone policy change that cannot be applied, naming the flag and what is wrong."""

    def __init__(self, flag: str, detail: str) -> None:
        self.flag = flag
        self.detail = detail
        super().__init__(f"{flag} {detail}")


@dataclass(frozen=True)
class ZoneSetting:
    """One node's attribute value as a flag gives it; ``value`` empty: remove the attribute."""

    flag: str
    node: str
    """A node name (names are unique in a tree) or its path (``root/gpu-team``)."""
    value: str

    def text(self) -> str:
        return f"{self.flag} {self.node}={self.value}"


@dataclass(frozen=True)
class ZonePolicy:
    """Zone attributes set on every tree a run replays (Z1, Z3): per node ``usher.io/zone-max``
    and ``usher.io/zones``, on the root ``usher.io/burst-zones`` (None: as recorded; empty:
    removed)."""

    nodes: tuple[ZoneSetting, ...] = ()
    burst_zones: str | None = None

    def text(self) -> str:
        """The flags as given, for the report."""
        parts = [setting.text() for setting in self.nodes]
        if self.burst_zones is not None:
            parts.append(f"{BURST_ZONES_FLAG} {self.burst_zones}")
        return "; ".join(parts)


RECLAIM_WITH_OWN_VICTIMS_FLAG = "--reclaim-with-own-victims"
PREEMPT_WHILE_BORROWING_FLAG = "--preempt-while-borrowing"
WITHIN_QUOTA_REQUEST_FLAG = "--within-quota-request"
PREEMPTION_FLAGS: dict[str, Setting[Any]] = {
    RECLAIM_WITH_OWN_VICTIMS_FLAG: RECLAIM_WITH_OWN_VICTIMS,
    PREEMPT_WHILE_BORROWING_FLAG: PREEMPT_WHILE_BORROWING,
    WITHIN_QUOTA_REQUEST_FLAG: WITHIN_QUOTA_REQUEST,
}
"""The per-node flags of the preemption policies (P1-P3) and the setting each one sets."""

_POLICY_FLAGS: dict[str, Setting[Any]] = {
    RECLAIM_WITHIN_FLAG: RECLAIM_WITHIN,  # L1
    LENDING_LIMIT_FLAG: LENDING_LIMIT,  # L2
    **PREEMPTION_FLAGS,
}
"""Every per-node flag that sets a registry setting (L1, L2, P1-P3)."""

_ATTRIBUTES = {
    ZONE_MAX_FLAG: ZONE_MAX_ATTRIBUTE,
    ZONES_FLAG: DEFAULT_ZONES_ATTRIBUTE,
    **{flag: setting.key for flag, setting in _POLICY_FLAGS.items()},
}
"""The tree attribute each per-node flag sets."""


def parse_zone_policy(
    zone_max: Sequence[str],
    zones: Sequence[str],
    burst_zones: str | None,
    preemption: Mapping[str, Sequence[str]] | None = None,
    *,
    lending: Sequence[tuple[str, str]] = (),
) -> ZonePolicy | None:
    """The zone policy of ``--zone-max NODE=VALUE``, ``--zones NODE=LIST`` (each repeatable)
    and ``--burst-zones LIST``, with the preemption policies' per-node flags (``preemption``:
    flag of ``PREEMPTION_FLAGS`` -> its ``NODE=VALUE`` values, P1-P3) and ``lending``'s
    ``(flag, NODE=VALUE)`` pairs of ``--reclaim-within`` (L1) and ``--lending-limit`` (L2),
    every value in its attribute's own syntax and an empty one removing the attribute; None
    when no flag is given. Raises ``ZonePolicyError``."""
    settings = [
        *(_node_setting(ZONE_MAX_FLAG, raw) for raw in zone_max),
        *(_node_setting(ZONES_FLAG, raw) for raw in zones),
        *(_node_setting(flag, raw) for flag, raw in lending),
        *(
            _node_setting(flag, raw)
            for flag, values in (preemption or {}).items()
            for raw in values
        ),
    ]
    seen: set[tuple[str, str]] = set()
    for setting in settings:
        if (setting.flag, setting.node) in seen:
            raise ZonePolicyError(setting.flag, f"{setting.node}: the node is given twice")
        seen.add((setting.flag, setting.node))
    if burst_zones is not None and burst_zones.strip():
        problem = parse_zone_names(burst_zones)[1]
        if problem is not None:
            raise ZonePolicyError(BURST_ZONES_FLAG, problem)
    if not settings and burst_zones is None:
        return None
    return ZonePolicy(
        nodes=tuple(settings),
        burst_zones=None if burst_zones is None else burst_zones.strip(),
    )


def _node_setting(flag: str, raw: str) -> ZoneSetting:
    node, equals, value = raw.partition("=")
    node, value = node.strip(), value.strip()
    if not equals or not node:
        expected = "NODE=VALUE (a node name or path, then the attribute's value; empty removes it)"
        raise ZonePolicyError(flag, f"{raw!r}: expected {expected}")
    if value:
        problem = _value_problem(flag, value)
        if problem is not None:
            raise ZonePolicyError(flag, f"{node}={value}: {problem}")
    return ZoneSetting(flag=flag, node=node, value=value)


def _value_problem(flag: str, value: str) -> str | None:
    """Why ``value`` is not what the flag's attribute takes (T1's own parsers say it)."""
    if flag == ZONE_MAX_FLAG:
        errors = parse_zone_max({ZONE_MAX_ATTRIBUTE: value}, "")[1]
        return "; ".join(error.message for error in errors) or None
    if flag in _POLICY_FLAGS:
        refused = _POLICY_FLAGS[flag].refusal({_POLICY_FLAGS[flag].key: value}, "")
        return None if refused is None else refused.message
    return parse_zone_names(value)[1]


def with_zone_policy(root: QuotaNode, policy: ZonePolicy) -> QuotaNode:
    """``root`` with the zone attributes ``policy`` sets; a node it names that this tree lacks
    is left out (another version of the tree may have it). Pure: ``root`` is not changed."""

    def rebuilt(node: QuotaNode, path: str) -> QuotaNode:
        attributes = dict(node.attributes)
        for setting in policy.nodes:
            if setting.node in (node.name, path):
                _set(attributes, _ATTRIBUTES[setting.flag], setting.value)
        if path == root.name and policy.burst_zones is not None:
            _set(attributes, BURST_ZONES_ATTRIBUTE, policy.burst_zones)
        children = [rebuilt(child, f"{path}/{child.name}") for child in node.children]
        if attributes == node.attributes and all(
            new is old for new, old in zip(children, node.children, strict=True)
        ):
            return node
        return msgspec.structs.replace(node, attributes=attributes, children=children)

    return rebuilt(root, root.name)


def _set(attributes: dict[str, str], name: str, value: str) -> None:
    if value:
        attributes[name] = value
    else:
        attributes.pop(name, None)


def check_zone_policy(policy: ZonePolicy, trees: Sequence[QuotaNode]) -> None:
    """Raise ``ZonePolicyError`` when a node the policy names is in none of ``trees`` (the
    ones a run replays), or when a tree with the policy applied breaks T1."""
    known: set[str] = set()
    for tree in trees:
        known.update(part for path, node, _ in iter_nodes(tree) for part in (path, node.name))
    for setting in policy.nodes:
        if setting.node not in known:
            where = "the replayed window's quota trees" if trees else "any tree: none is replayed"
            raise ZonePolicyError(setting.flag, f"{setting.node}: no such node in {where}")
    for tree in trees:
        errors = validate_tree(with_zone_policy(tree, policy))
        if errors:
            first = errors[0]
            raise ZonePolicyError(
                _flag_of(first), f"makes the tree invalid: {first.path}: {first.message}"
            )


def _flag_of(error: FieldError) -> str:
    for flag, attribute in (*_ATTRIBUTES.items(), (BURST_ZONES_FLAG, BURST_ZONES_ATTRIBUTE)):
        if error.path.endswith(attribute):
            return flag
    return "zone policy"


@dataclass(frozen=True)
class Variant:
    """One set of settings to replay with; ``tree`` replaces the recorded trees, and
    ``zone_policy`` changes the zone attributes of every tree replayed."""

    config: EngineConfig
    tree: QuotaNode | None = None
    tree_label: str | None = None
    zone_policy: ZonePolicy | None = None
    topology_level: str | None = None
    """Every job asking a topology level (TP1) asks this one instead, required or preferred
    as it was (``NO_TOPOLOGY``: none at all); None: as recorded."""


NO_TOPOLOGY = "none"
"""``--topology-level none``: replay every job as if it asked no topology level (TP1)."""
TOPOLOGY_LEVEL_FLAG = "--topology-level"


def parse_topology_level(raw: str | None) -> str | None:
    """The level of ``--topology-level`` (a topology level's label key, or ``none``); None
    when not given. Raises ``ZonePolicyError`` naming the flag."""
    if raw is None or raw == NO_TOPOLOGY:
        return raw
    try:
        return topology_level(raw, TOPOLOGY_LEVEL_FLAG)
    except ValueRefused as refused:
        raise ZonePolicyError(TOPOLOGY_LEVEL_FLAG, refused.message) from None


@dataclass(frozen=True)
class WhatIfSpec:
    """What to compare, over which part of the log."""

    baseline: Variant
    changed: Variant
    since_ms: Millis | None = None
    until_ms: Millis | None = None
    window_ms: int = DEFAULT_WINDOW_MS
    limit: int = DEFAULT_LIMIT


class RunSettings(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The settings of one run, as printed."""

    policy: str
    oversell_rate: str
    within_quota: str
    min_runtime_s: float
    tree: str
    ready_timeout_s: float | None = None
    """Ready timeout of nodes that set none (R10); None (off) is not printed."""
    half_life_s: float | None = None
    """Fair share's half-life (F1); None (off) is not printed."""
    zone_policy: str | None = None
    """The zone attributes changed on every replayed tree, as the flags gave them (Z1, Z3);
    None (as recorded) is not printed."""
    topology_level: str | None = None
    """The topology level every topology job asks instead (TP1); None (as recorded) is not
    printed."""


class Stats(msgspec.Struct, frozen=True, kw_only=True):
    """What one run did for one queue (or all of them)."""

    admitted: int
    """Workloads admitted at least once in the replayed part."""
    mean_wait_s: float | None
    p95_wait_s: float | None
    preemptions: int
    pending_at_end: int


class QueueComparison(msgspec.Struct, frozen=True, kw_only=True):
    """Baseline and what-if side by side for one queue (``(all)``: every queue)."""

    queue: str
    baseline: Stats
    whatif: Stats


class DecisionDiff(msgspec.Struct, frozen=True, kw_only=True):
    """The n-th decision of one kind about one workload, when the runs disagree on it."""

    workload: WorkloadKey
    action: str
    """``admit``, ``preempt``, ``inadmissible`` or ``unmapped``."""
    occurrence: int
    baseline_at: datetime | None
    whatif_at: datetime | None
    baseline_quota: str | None
    whatif_quota: str | None
    baseline_zone: Zone | None = None
    """The zone an admission was made in when it is not the workload's own (its first
    accepted zone): a fallback (Z2) or a burst (Z3). None otherwise."""
    whatif_zone: Zone | None = None


class DepartmentComparison(msgspec.Struct, frozen=True, kw_only=True):
    """Baseline and what-if side by side for one department (``usher sim --generate``'s
    report: waits, resource-seconds against the guarantee, work lost to preemption)."""

    department: str
    baseline: DepartmentStats
    whatif: DepartmentStats


class WhatIfReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``usher what-if`` prints."""

    baseline: RunSettings
    whatif: RunSettings
    start: datetime | None
    end: datetime | None
    inputs: int
    """Cluster events replayed."""
    groups: int
    window_ms: int
    overall: QueueComparison
    queues: list[QueueComparison]
    differences: list[DecisionDiff]
    differences_total: int
    departments: list[DepartmentComparison] = msgspec.field(default_factory=list)
    """Per department (and ``(cluster)``) over the replayed window; empty without one."""


# ---------------------------------------------------------------------------- one run


@dataclass
class _Run:
    decisions: list[tuple[Millis, Decision]] = field(default_factory=list)
    arrivals: dict[WorkloadKey, Millis] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)
    ledger: list[tuple[Millis, Decision]] = field(default_factory=list)
    """The run's decisions with the releases its replayed finishes bring (U1)."""
    opening: list[Interval] = field(default_factory=list)
    """What ran when the replay started (admitted in the recorded part before ``since``)."""
    waiting: list[WorkloadKey] = field(default_factory=list)
    quotas: dict[WorkloadKey, str] = field(default_factory=dict)
    limits: dict[QuotaPath, tuple[dict[str, int], dict[str, int]]] = field(default_factory=dict)
    homes: dict[WorkloadKey, Zone] = field(default_factory=dict)
    """Each workload's own zone, as first observed (the one that owns it, Z2)."""


def _groups(items: Sequence[LogEntry], window_ms: int) -> list[list[LogEntry]]:
    groups: list[list[LogEntry]] = []
    for item in items:
        if groups and item.time_ms - groups[-1][0].time_ms <= window_ms:
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


def _input(item: LogEntry, variant: Variant) -> ClusterEvent | NodeHeld | NodeResumed:
    event = item.event
    assert isinstance(event, _INPUTS)
    if isinstance(event, QuotaTreeApplied):
        return _replayed_tree(event, variant)
    if isinstance(event, WorkloadObserved) and event.topology is not None:
        return _replayed_ask(event, variant.topology_level)
    return event


def _replayed_ask(event: WorkloadObserved, level: str | None) -> WorkloadObserved:
    """A job's topology ask as a run replays it (TP1): as recorded, at ``level``, or none."""
    if level is None or event.topology is None:
        return event
    if level == NO_TOPOLOGY:
        return msgspec.structs.replace(event, topology=None)
    ask = msgspec.structs.replace(event.topology, level=level)
    return msgspec.structs.replace(event, topology=ask)


def _replayed_tree(event: QuotaTreeApplied, variant: Variant) -> QuotaTreeApplied:
    """A recorded tree as ``variant`` replays it: replaced by ``tree``, then given the zone
    policy's attributes."""
    if variant.tree is not None:
        event = QuotaTreeApplied(root=variant.tree)
    if variant.zone_policy is not None:
        root = with_zone_policy(event.root, variant.zone_policy)
        event = msgspec.structs.replace(event, root=root)
    return event


def _tree_in_force(folded: Sequence[LogEntry], variant: Variant) -> QuotaNode | None:
    """The tree the run starts from at ``since``, when the folded part had one and the
    variant changes it (``tree``, ``zone_policy``); None: keep the folded state as it is."""
    if variant.tree is None and variant.zone_policy is None:
        return None
    last = next((i.event for i in reversed(folded) if isinstance(i.event, QuotaTreeApplied)), None)
    if last is None:
        return None
    return _replayed_tree(last, variant).root


def _simulate(
    folded: Sequence[LogEntry],
    groups: Sequence[list[LogEntry]],
    variant: Variant,
    until_ms: Millis | None,
) -> _Run:
    # Replayed inputs carry no ledger releases: victims stop when preempted (as in usher sim).
    engine = Engine(replace(variant.config, instant_release=True))
    run = _Run()

    def arrive(item: LogEntry) -> None:
        event = item.event
        if isinstance(event, WorkloadObserved):
            run.arrivals.setdefault(event.workload, item.time_ms)
            run.homes.setdefault(event.workload, event.zone)

    def decided(at_ms: Millis, made: list[Decision]) -> None:
        taken = [(at_ms, d) for d in made]
        run.decisions.extend(taken)
        run.ledger.extend(taken)

    def released(at_ms: Millis, made: list[Decision]) -> None:
        run.ledger.extend((at_ms, d) for d in made)

    driver = Driver(engine, decided, released)
    for item in folded:
        arrive(item)
        fold_believed(engine, item)
    run.opening = held_now(engine)
    if folded:
        start = folded[-1].time_ms
        in_force = _tree_in_force(folded, variant)
        if in_force is not None:
            engine.apply(QuotaTreeApplied(root=in_force), start)
        driver.decide(start)
    for group in groups:
        for item in group:
            arrive(item)
        inputs = [(_input(item, variant), item.time_ms) for item in group]
        driver.group(group[0].time_ms, inputs, group[-1].time_ms)
    driver.wake_until(until_ms + 1 if until_ms is not None else None)
    queues = engine.queues()
    run.pending = {str(name): len(entries) for name, entries in queues.items()}
    run.waiting = [entry.job for entries in queues.values() for entry in entries]
    run.quotas = {key: view.quota for key, view in engine.jobs().items() if view.quota}
    run.limits = engine.quota_nodes()
    return run


# ---------------------------------------------------------------------------- comparing


def _stats(run: _Run, queue: str | None) -> Stats:
    first_admit: dict[WorkloadKey, Millis] = {}
    preemptions = 0
    for at_ms, decision in run.decisions:
        if isinstance(decision, Admitted) and (queue is None or decision.queue == queue):
            first_admit.setdefault(decision.workload, at_ms)
        elif isinstance(decision, Preempted) and (queue is None or decision.queue == queue):
            preemptions += 1
    waits = sorted(
        (at_ms - run.arrivals[key]) / 1000
        for key, at_ms in first_admit.items()
        if key in run.arrivals
    )
    pending = sum(run.pending.values()) if queue is None else run.pending.get(queue, 0)
    return Stats(
        admitted=len(first_admit),
        mean_wait_s=round(sum(waits) / len(waits), 3) if waits else None,
        p95_wait_s=round(wait_percentile(waits, 0.95), 3) if waits else None,
        preemptions=preemptions,
        pending_at_end=pending,
    )


def _queues(*runs: _Run) -> list[str]:
    names: set[str] = set()
    for run in runs:
        names.update(run.pending)
        for _, decision in run.decisions:
            queue = getattr(decision, "queue", None)
            if isinstance(queue, str) and queue:
                names.add(queue)
    return sorted(names)


DiffKey = tuple[WorkloadKey, str, int]


def _indexed(run: _Run) -> dict[DiffKey, tuple[Millis, str | None, Zone | None]]:
    """Each decision by (workload, action, occurrence): when, on which node, and for an
    admission outside the workload's own zone, that zone (Z2, Z3)."""
    counts: dict[tuple[WorkloadKey, str], int] = {}
    out: dict[DiffKey, tuple[Millis, str | None, Zone | None]] = {}
    for at_ms, decision in run.decisions:
        action = _ACTIONS.get(type(decision))
        if action is None:
            continue
        workload = decision.workload
        n = counts.get((workload, action), 0) + 1
        counts[(workload, action)] = n
        quota = None if isinstance(decision, Unmapped) else decision.quota
        zone = decision.zone if isinstance(decision, Admitted) else None
        if zone == run.homes.get(workload):
            zone = None
        out[(workload, action, n)] = (at_ms, quota, zone)
    return out


def _differences(baseline: _Run, whatif: _Run) -> list[DecisionDiff]:
    left, right = _indexed(baseline), _indexed(whatif)
    rows: list[tuple[int, DiffKey, DecisionDiff]] = []
    for key in set(left) | set(right):
        a, b = left.get(key), right.get(key)
        if a == b:
            continue
        first = min(x[0] for x in (a, b) if x is not None)
        rows.append(
            (
                first,
                key,
                DecisionDiff(
                    workload=key[0],
                    action=key[1],
                    occurrence=key[2],
                    baseline_at=to_datetime(a[0]) if a else None,
                    whatif_at=to_datetime(b[0]) if b else None,
                    baseline_quota=a[1] if a else None,
                    whatif_quota=b[1] if b else None,
                    baseline_zone=a[2] if a else None,
                    whatif_zone=b[2] if b else None,
                ),
            )
        )
    return [row for _, _, row in sorted(rows, key=lambda r: (r[0], r[1]))]


def _settings(variant: Variant) -> RunSettings:
    config = variant.config
    label = variant.tree_label or "the given tree"
    return RunSettings(
        policy=config.policy,
        oversell_rate=format_rate(config.oversell_rate),
        within_quota=config.within_quota,
        min_runtime_s=config.min_runtime_ms / 1000,
        ready_timeout_s=config.readiness.timeout_ms / 1000 or None,
        half_life_s=None if config.half_life_ms is None else config.half_life_ms / 1000,
        tree=f"{label} (replaces every recorded tree)" if variant.tree else "as recorded",
        zone_policy=variant.zone_policy.text() if variant.zone_policy else None,
        topology_level=variant.topology_level,
    )


def _replayed_trees(folded: Sequence[LogEntry], window: Sequence[LogEntry]) -> list[QuotaNode]:
    """The recorded trees a run replays: the one in force at the window's start, then every
    one applied in it."""
    trees = [i.event.root for i in window if isinstance(i.event, QuotaTreeApplied)]
    last = next((i.event for i in reversed(folded) if isinstance(i.event, QuotaTreeApplied)), None)
    return [last.root, *trees] if last is not None else trees


def what_if(history: History, spec: WhatIfSpec) -> WhatIfReport:
    """Replay the recorded inputs with both variants and compare what they decided (only
    what the services believe and could fold: ``screened``)."""
    upto = prefix(screened(history, spec.baseline.config), until_ms=spec.until_ms)
    cut = 0
    if spec.since_ms is not None:
        cut = next((i for i, item in enumerate(upto) if item.time_ms >= spec.since_ms), len(upto))
    folded, window = upto[:cut], upto[cut:]
    inputs = [item for item in window if isinstance(item.event, _INPUTS)]
    groups = _groups(inputs, spec.window_ms)
    for variant in (spec.baseline, spec.changed):
        if variant.zone_policy is not None:
            recorded = _replayed_trees(folded, window)
            trees = [variant.tree] if variant.tree is not None and recorded else recorded
            check_zone_policy(variant.zone_policy, trees)
    baseline = _simulate(folded, groups, spec.baseline, spec.until_ms)
    changed = _simulate(folded, groups, spec.changed, spec.until_ms)
    differences = _differences(baseline, changed)
    start = window[0].time_ms if window else None
    end = upto[-1].time_ms if upto else None
    capacity = capacity_of(item.event for item in upto if isinstance(item.event, _INPUTS))
    since = Millis(spec.since_ms if spec.since_ms is not None else start or 0)
    until = Millis(spec.until_ms if spec.until_ms is not None else end or 0)
    return WhatIfReport(
        baseline=_settings(spec.baseline),
        whatif=_settings(spec.changed),
        start=to_datetime(start) if start is not None else None,
        end=to_datetime(end) if end is not None else None,
        inputs=len(inputs),
        groups=len(groups),
        window_ms=spec.window_ms,
        overall=QueueComparison(
            queue=ALL_QUEUES, baseline=_stats(baseline, None), whatif=_stats(changed, None)
        ),
        queues=[
            QueueComparison(queue=q, baseline=_stats(baseline, q), whatif=_stats(changed, q))
            for q in _queues(baseline, changed)
        ],
        differences=differences[: max(spec.limit, 0)],
        differences_total=len(differences),
        departments=_departments(baseline, changed, capacity, since, until) if window else [],
    )


def _departments(
    baseline: _Run, whatif: _Run, capacity: dict[str, int], since: Millis, until: Millis
) -> list[DepartmentComparison]:
    """The planning report of each run over the replayed window, side by side."""

    def report(run: _Run) -> list[DepartmentStats]:
        done = planning_report(
            RunRecord(
                decisions=run.ledger,
                arrivals=run.arrivals,
                waiting=run.waiting,
                quotas=run.quotas,
                limits=run.limits,
                capacity=capacity,
                since_ms=since,
                until_ms=until,
                opening=run.opening,
            )
        )
        return [*done.departments, done.cluster]

    before = {row.department: row for row in report(baseline)}
    after = {row.department: row for row in report(whatif)}
    named = sorted((before.keys() | after.keys()) - {CLUSTER})
    return [
        DepartmentComparison(
            department=name,
            baseline=before.get(name) or _nothing(name),
            whatif=after.get(name) or _nothing(name),
        )
        for name in [*named, CLUSTER]
    ]


def _nothing(department: str) -> DepartmentStats:
    """A department one run's tree does not have (``--tree``)."""
    return DepartmentStats(
        department=department,
        jobs=0,
        admitted=0,
        pending=0,
        wait_mean_s=None,
        wait_p95_s=None,
        wait_max_s=None,
        preemptions=0,
        resources=[],
    )


# ---------------------------------------------------------------------------- rendering


def render_whatif_json(report: WhatIfReport) -> str:
    """One JSON object: settings, per-queue and overall stats, first differences."""
    return msgspec.json.format(msgspec.json.encode(report).decode(), indent=2) + "\n"


def _describe(settings: RunSettings) -> str:
    ready = f", ready-timeout {settings.ready_timeout_s:g}s" if settings.ready_timeout_s else ""
    if settings.half_life_s is not None:
        ready += f", fair-share half-life {settings.half_life_s:g}s"
    zones = f", zone policy {settings.zone_policy}" if settings.zone_policy else ""
    if settings.topology_level is not None:
        zones += f", topology level {settings.topology_level}"
    return (
        f"policy {settings.policy}, oversell {settings.oversell_rate}, within-quota "
        f"{settings.within_quota}, min-runtime {settings.min_runtime_s:g}s{ready}, "
        f"tree {settings.tree}{zones}"
    )


def _pair(left: object, right: object) -> str:
    def one(value: object) -> str:
        if value is None:
            return "-"
        return f"{value:.2f}s" if isinstance(value, float) else str(value)

    return f"{one(left)} -> {one(right)}"


def _stats_row(row: QueueComparison) -> str:
    a, b = row.baseline, row.whatif
    return (
        f"  {row.queue:<36} {_pair(a.admitted, b.admitted):<11} "
        f"{_pair(a.mean_wait_s, b.mean_wait_s):<20} {_pair(a.p95_wait_s, b.p95_wait_s):<20} "
        f"{_pair(a.preemptions, b.preemptions):<12} {_pair(a.pending_at_end, b.pending_at_end)}"
    )


def _at(when: datetime | None, start: datetime | None, quota: str | None, zone: Zone | None) -> str:
    if when is None:
        return "-"
    offset = f"+{(when - start).total_seconds():.3f}s" if start is not None else ""
    elsewhere = f" in zone {zone}" if zone is not None else ""
    return f"{offset} {quota or ''}{elsewhere}".strip()


def render_whatif_table(report: WhatIfReport) -> str:
    """A plain-text comparison for people."""
    start = format_datetime(report.start) if report.start else "-"
    end = format_datetime(report.end) if report.end else "-"
    lines = [
        f"replayed {report.inputs} recorded inputs ({start} .. {end}) in {report.groups} "
        f"groups (window {report.window_ms} ms); recorded decisions ignored",
        f"  baseline: {_describe(report.baseline)}",
        f"  what-if:  {_describe(report.whatif)}",
        "",
        f"  {'queue':<36} {'admitted':<11} {'mean wait':<20} {'p95 wait':<20} "
        f"{'preemptions':<12} pending at end",
        _stats_row(report.overall),
    ]
    lines.extend(_stats_row(row) for row in report.queues)
    lines.append("")
    if not report.differences_total:
        lines.append("no differing decisions")
        return "\n".join([*lines, *_department_lines(report.departments)]) + "\n"
    shown = len(report.differences)
    lines.append(
        f"first differing decisions ({shown} of {report.differences_total}), "
        "time since the start of the replay:"
    )
    lines.append(f"  {'workload':<32} {'decision':<16} {'baseline':<32} what-if")
    for diff in report.differences:
        lines.append(
            f"  {diff.workload:<32} {f'{diff.action} #{diff.occurrence}':<16} "
            f"{_at(diff.baseline_at, report.start, diff.baseline_quota, diff.baseline_zone):<32} "
            f"{_at(diff.whatif_at, report.start, diff.whatif_quota, diff.whatif_zone)}"
        )
    return "\n".join([*lines, *_department_lines(report.departments)]) + "\n"


def _department_lines(rows: list[DepartmentComparison]) -> list[str]:
    """The planning report's figures per department, baseline -> what-if (the window is the
    replay's; resource-seconds in CPU-, GiB-, GPU-seconds)."""
    if not rows:
        return []
    lines = [
        "",
        "per department over the replayed window (baseline -> what-if):",
        f"  {'department':<36} {'jobs':<11} {'admitted':<11} {'pending':<11} "
        f"{'mean wait':<20} {'p95 wait':<20} {'max wait':<20} preemptions",
    ]
    for row in rows:
        a, b = row.baseline, row.whatif
        lines.append(
            f"  {row.department:<36} {_pair(a.jobs, b.jobs):<11} "
            f"{_pair(a.admitted, b.admitted):<11} {_pair(a.pending, b.pending):<11} "
            f"{_pair(a.wait_mean_s, b.wait_mean_s):<20} {_pair(a.wait_p95_s, b.wait_p95_s):<20} "
            f"{_pair(a.wait_max_s, b.wait_max_s):<20} {_pair(a.preemptions, b.preemptions)}"
        )
    lines += [
        "",
        f"  {'department':<36} {'resource':<16} {'used':<28} {'of min':<18} "
        f"{'of cluster':<18} lost to preemption",
    ]
    for row in rows:
        before = {use.resource: use for use in row.baseline.resources}
        after = {use.resource: use for use in row.whatif.resources}
        for resource in sorted(before.keys() | after.keys()):
            a_use, b_use = before.get(resource), after.get(resource)

            def cell(use: ResourceUse | None, name: str) -> object:
                value = getattr(use, name) if use is not None else None
                return None if value is None else f"{value}%" if name.endswith("pct") else value

            lines.append(
                f"  {row.department:<36} {resource:<16} "
                f"{_pair(cell(a_use, 'used'), cell(b_use, 'used')):<28} "
                f"{_pair(cell(a_use, 'of_guarantee_pct'), cell(b_use, 'of_guarantee_pct')):<18} "
                f"{_pair(cell(a_use, 'utilisation_pct'), cell(b_use, 'utilisation_pct')):<18} "
                f"{_pair(cell(a_use, 'lost_to_preemption'), cell(b_use, 'lost_to_preemption'))}"
            )
    return lines


__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_WINDOW_MS",
    "DecisionDiff",
    "DepartmentComparison",
    "QueueComparison",
    "RunSettings",
    "Stats",
    "Variant",
    "WhatIfReport",
    "WhatIfSpec",
    "ZonePolicy",
    "ZonePolicyError",
    "ZoneSetting",
    "check_zone_policy",
    "parse_zone_policy",
    "render_whatif_json",
    "render_whatif_table",
    "what_if",
    "with_zone_policy",
]
