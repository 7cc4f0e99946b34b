"""Snapshots of the decision engine: its complete state as deterministic, versioned bytes.

What it does: ``snapshot(engine)`` encodes everything the engine's future decisions and
answers depend on (every workload with every field, the tree in force and the usage counted
on each of its nodes, nodes, served zones, priority classes, holds, preemptors, min-runtime wakeups,
pending announcements, the counters, and the live part of the reclaim memo) as msgspec
Structs in msgpack, tagged with a format number and the ``EngineConfig`` it was made under.
``restore(data, config)`` builds an engine that decides exactly as the original would from
there on, recomputing what is a pure function of that state (queues, per-leaf admitted
lists, zone capacity, the interned shapes, the pass's pruning and share caches).
What it must never do: perform I/O, read a clock, accept a snapshot of another format or of
another ``EngineConfig``, or hand back a half-built engine: every problem is a
``SnapshotError`` with the reason and the fields involved.

Why each piece is encoded or rebuilt (see ``ENCODED`` and ``REBUILT`` below):

* Accumulators are encoded, not re-derived: the usage of every node and zone is what the
  engine added and subtracted over its history. Re-deriving it from the workloads would
  "repair" any drift (a workload whose zone changed while admitted is unaccounted from its
  new zone) and the restored engine would then decide differently from the original.
* Orders that reach decisions are kept: workloads in insertion order (a new tree or a node
  change re-examines them in that order, which orders the announcements), announcements in
  order, the wakeup heap as the very list it is.
* The reclaim memo (``reclaim_failed``) maps a failed reclaim to the state version it failed
  at; an entry only counts while the version is unchanged, and versions only grow, so only
  entries of the current version are live. They are kept (they can skip a reclaim the memo
  says failed); the dead ones are dropped.
* What is encoded is the engine's ``EngineState``, field by field; everything else is derived
  and rebuilt by ``Engine.rebuild_derived``: queues and per-leaf admitted lists from the
  workloads, zone capacity from the nodes, residuals from the stop groups, the pruning data
  as after a new tree (every leaf dirty).
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Literal

import msgspec

from schemas import (
    ClusterName,
    FieldError,
    Millis,
    NodeName,
    QuotaNode,
    QuotaPath,
    Reason,
    RetryAsk,
    TopologyAsk,
    TopologyPin,
    WorkloadKey,
    Zone,
)
from usher.core.engine.facade import DERIVED_WRITTEN_BY_A_PASS, READ_BY_A_PASS, Engine
from usher.core.model.config import EngineConfig, ReadinessPolicy
from usher.core.model.errors import InputError
from usher.core.rules.budgets import BudgetBook, Running
from usher.core.rules.clusters import ClusterLink
from usher.core.rules.fairshare import FairBook
from usher.core.rules.holds import HoldRecord
from usher.core.rules.readiness import Readiness
from usher.core.rules.retry import Failure, RetryLink
from usher.core.state.durable import NodeCapacity
from usher.core.state.indexed import (
    ENGINE_STATES,
    Job,
    JobState,
    Placement,
    Shape,
    StopGroup,
    TreeIndex,
)

FORMAT = 3
"""Bumped whenever the encoding changes; a snapshot of another format is refused (replay)."""

ENCODED: frozenset[str] = frozenset(
    {
        "tree",  # as the root QuotaNode and each node's usage; the index is rebuilt from it
        "jobs",
        "announce",
        "priority_values",
        "nodes",
        "served",
        "clusters",
        "zone_used",
        "held",
        "holds",
        "tree_holds",
        "preemptors",
        "stops",  # victims and hold; their residuals are recomputed
        "lingering",
        "wakeups",
        "reclaim_failed",  # live entries only
        "failures",
        "retries",
        "budget_book",
        "closing",
        "starving",
        "gated",
        "fair_book",
        "version",
        "passes",
        "seq",
        "now",
        "last_pass_now",
    }
)
"""``EngineState`` fields a snapshot carries: all of them (the tests check it)."""

REBUILT: frozenset[str] = frozenset({*DERIVED_WRITTEN_BY_A_PASS, *READ_BY_A_PASS})
"""Engine attributes besides ``state``: ``Engine.rebuild_derived`` recomputes them. They are
exactly what a pass writes or reads besides ``state`` (one list, the facade's): ``config`` is
given to ``restore`` and checked against the snapshot's, ``policy`` is its seam; ``stopping``
comes from ``stops``, ``unready`` and ``grown`` from the admitted workloads' records, ``holds``
and ``held_leaves`` from ``holds`` and ``tree_holds``, the budget stops from the tree's budgets,
``budget_book`` and the admitted work; ``pass_admitted`` is empty between passes, when
snapshots are taken; the rest are indexes and caches of the workloads and the tree."""

SnapshotProblem = Literal["undecodable", "format", "config", "inconsistent"]

_STATES: tuple[JobState, ...] = ENGINE_STATES
_STATE_IDS: dict[JobState, int] = {state: i for i, state in enumerate(_STATES)}

Resources = dict[str, int]


class SnapshotError(InputError):
    """A snapshot that cannot become an engine; permanent: the caller replays the log instead.

    ``reason`` is ``undecodable`` (not a snapshot), ``format`` (another format number),
    ``config`` (made under another ``EngineConfig``) or ``inconsistent`` (decodes, but its
    parts contradict each other). ``expected``/``found`` name the values that differ.
    """

    def __init__(
        self,
        reason: SnapshotProblem,
        message: str,
        *,
        expected: str | None = None,
        found: str | None = None,
    ) -> None:
        self.reason: SnapshotProblem = reason
        self.expected = expected
        self.found = found
        detail = message
        if expected is not None or found is not None:
            detail = f"{message} (expected {expected}, found {found})"
        super().__init__([FieldError(path=f"snapshot.{reason}", code=reason, message=detail)])


class ConfigRecord(msgspec.Struct, frozen=True, array_like=True):
    """The ``EngineConfig`` a snapshot was made under, exactly (the rate as a fraction)."""

    policy: str
    oversell_rate: tuple[int, int]
    within_quota: str
    min_runtime_ms: int
    zones: list[str] | None
    instant_release: bool = False
    readiness: tuple[int, int, int, int] | None = None
    """Timeout, backoff base and cap (ms) and attempts (R10); None for the defaults."""
    half_life_ms: int | None = None
    """Fair share's half-life (F1); None when off."""


class PlacementRecord(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """Where a workload's usage counts: leaf path, shape index, zone."""

    path: str
    shape: int
    zone: str


class StopRecord(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A preemption whose victims still stop (``state.StopGroup`` without its residuals)."""

    preemptor: str
    hold: PlacementRecord | None
    victims: list[tuple[str, PlacementRecord]]


class JobRecord(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """Every field of ``state.Job``; shapes are indexes into ``EngineSnapshot.shapes``."""

    key: str
    namespace: str | None
    """``None`` when it is the key's namespace (almost always): a third of the size saved."""
    name: str | None
    zone: str
    priority_class: str | None
    spec_priority: int | None
    priority: int
    created_ms: int
    shape: int
    pods: list[int]
    quota_name: str | None
    state: int
    leaf: str | None
    sort_key: tuple[int, int]
    """The order key without the workload key (its last part is always the key)."""
    admitted_ms: int
    admit_seq: int
    used_path: str | None
    used_shape: int
    victim_key: tuple[int, int, int]
    arrived_pass: int
    note: Reason | None
    note_pass: int
    held: bool
    announced: Reason | None
    pod_count: int = 0
    readiness: Readiness | None = None
    scalable: tuple[str, int, int, int] | None = None
    """Partial admission (R11): pod set name, per-pod shape index, pods asked, fewest."""
    fit_shape: int | None = None
    """Shape index of the least it may start with; None when that is ``shape``."""
    retry_ask: RetryAsk | None = None
    """Its retry annotations (R12, R13)."""
    zones: list[str] = []
    """Every zone it accepts in order (Z2); empty when only ``zone``."""
    max_runtime_ms: int | None = None
    """Its declared maximum runtime (RT1); None: none declared."""
    listed: list[str] | None = None
    """The zones its own annotation lists when not ``zones`` (the tree gave those, Z3);
    None: the same as ``zones``."""
    grown: Reason | None = None
    """Admitted and observed asking more than it was admitted with (R16); None: it did not."""
    topology: TopologyAsk | None = None
    """Its topology ask (TP1); None: it asks none."""
    pin: TopologyPin | None = None
    """Admitted: the topology domain its pods are pinned to (TP1); None: none."""


class NodeRecord(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One Kubernetes node as the engine knows it."""

    zone: str
    name: str
    allocatable: Resources
    unschedulable: bool
    labels: dict[str, str] = {}
    """Its topology labels (TP1)."""


class MemoRecord(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A live entry of the reclaim memo (failed at the snapshot's version)."""

    leaf: str
    shape: int
    priority: int
    zone: str


class Counters(msgspec.Struct, frozen=True, array_like=True):
    """The engine's clocks and counters."""

    version: int
    passes: int
    seq: int
    now: int
    last_pass_now: int | None


class EngineSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """The whole snapshot. A map at the top so the format can be read before the rest."""

    format: int
    config: ConfigRecord
    counters: Counters
    tree: QuotaNode | None
    used: list[Resources]
    """Usage of every node of the tree, in the tree index's (pre-)order."""
    shapes: list[Shape]
    jobs: list[JobRecord]
    priority_values: list[tuple[str, int]]
    nodes: list[NodeRecord]
    zone_used: list[tuple[str, Resources]]
    held: list[str]
    preemptors: list[str]
    announce: list[str]
    wakeups: list[tuple[int, int, str]]
    reclaim_failed: list[MemoRecord]
    stops: list[StopRecord]
    lingering: list[tuple[str, PlacementRecord]]
    served: list[str] | None = None
    """Zones dequeuers announced; None before the first announcement."""
    clusters: list[tuple[str, ClusterLink]] = []
    """What the log last said of each cluster (M1), in first-seen order."""
    failures: list[tuple[str, Failure]] = []
    """Failed attempts awaiting their ``Retried`` (R12), in order."""
    retries: list[tuple[str, RetryLink]] = []
    """Attempts a ``Retried`` named (R12), in order."""
    holds: list[HoldRecord] = []
    """Holds and drains ordered on the log (R14/R15), by node path."""
    tree_holds: list[HoldRecord] = []
    """Holds and drains the tree's attributes put in force, by node path."""
    budget_book: list[tuple[str, int, int]] = []
    """What closed intervals accrued in each budget's window (B1): key, window start, amount."""
    closing: list[tuple[str, str, Resources, int]] = []
    """Intervals still open of workloads no longer admitted (U1): key, path, shape, start."""
    starving: list[tuple[str, int]] = []
    """Heads passed over and since when (N1), by key."""
    fair_book: list[tuple[str, int, str, str]] = []
    """Decayed usage of closed intervals (F1): leaf, its last close, resource, exact decimal."""
    gated: list[tuple[str, list[str]]] = []
    """The admission gates still listed, by workload (G1)."""


class _Header(msgspec.Struct):
    format: int


_encoder = msgspec.msgpack.Encoder()
_header_decoder = msgspec.msgpack.Decoder(_Header)
_decoder = msgspec.msgpack.Decoder(EngineSnapshot)


# ---------------------------------------------------------------------- config


def config_record(config: EngineConfig) -> ConfigRecord:
    """The exact, comparable form of ``config`` stored in a snapshot."""
    rate = config.oversell_rate
    return ConfigRecord(
        policy=config.policy,
        oversell_rate=(rate.numerator, rate.denominator),
        within_quota=config.within_quota,
        min_runtime_ms=config.min_runtime_ms,
        zones=sorted(config.zones) if config.zones is not None else None,
        instant_release=config.instant_release,
        readiness=None
        if config.readiness == ReadinessPolicy()
        else (
            config.readiness.timeout_ms,
            config.readiness.backoff_base_ms,
            config.readiness.backoff_cap_ms,
            config.readiness.max_attempts,
        ),
        half_life_ms=config.half_life_ms,
    )


def fingerprint(config: EngineConfig) -> str:
    """A short readable text that differs whenever a snapshot of ``config`` would be refused.

    Stores put it beside a snapshot so a service can skip a foreign one without fetching it.
    """
    return _fingerprint(config_record(config))


def _fingerprint(record: ConfigRecord) -> str:
    numerator, denominator = record.oversell_rate
    zones = "*" if record.zones is None else ",".join(record.zones)
    stop = ";instant_release" if record.instant_release else ""
    ready = "" if record.readiness is None else ";readiness=" + ",".join(map(str, record.readiness))
    if record.half_life_ms is not None:
        ready += f";half_life_ms={record.half_life_ms}"
    return (
        f"policy={record.policy};oversell={numerator}/{denominator};"
        f"within={record.within_quota};min_runtime_ms={record.min_runtime_ms};zones={zones}{stop}"
        f"{ready}"
    )


# ---------------------------------------------------------------------- encode


def snapshot(engine: Engine) -> bytes:
    """The complete state of ``engine`` as msgpack; same state, same bytes.

    Call it between calls into the engine (never during one): the engine is not touched.
    """
    with _collector_paused():
        return _encoder.encode(_record(engine))


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while ~10^5 objects are built or decoded.

    Allocating that many containers triggers full collections that walk the whole engine
    again and again: measured on 100k workloads, 3-5x the work itself. Nothing built here
    forms a reference cycle, so nothing is lost by collecting later, on the usual schedule.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _record(engine: Engine) -> EngineSnapshot:
    shape_ids: dict[Shape, int] = {}

    def sid(shape: Shape) -> int:
        found = shape_ids.get(shape)
        if found is None:
            found = shape_ids[shape] = len(shape_ids)
        return found

    state = engine.state
    state_ids = _STATE_IDS
    jobs: list[JobRecord] = []
    for key, job in state.jobs.items():
        namespace, _, name = key.partition("/")
        jobs.append(
            JobRecord(
                key,
                None if job.namespace == namespace else job.namespace,
                None if job.name == name else job.name,
                job.zone,
                job.priority_class,
                job.spec_priority,
                job.priority,
                job.created_ms,
                sid(job.shape),
                [sid(pod) for pod in job.pods],
                job.quota_name,
                state_ids[job.state],
                job.leaf,
                (job.sort_key[0], job.sort_key[1]),
                job.admitted_ms,
                job.admit_seq,
                job.used_path,
                sid(job.used_shape),
                (job.victim_key[0], job.victim_key[1], job.victim_key[2]),
                job.arrived_pass,
                job.note,
                job.note_pass,
                job.held,
                job.announced,
                job.pod_count,
                job.readiness,
                None
                if job.scalable is None
                else (job.scalable[0], sid(job.scalable[1]), job.scalable[2], job.scalable[3]),
                None if job.fit_shape == job.shape else sid(job.fit_shape),
                job.retry_ask,
                list(job.zones),
                job.max_runtime_ms,
                None if job.listed == job.zones else list(job.listed),
                job.grown,
                job.topology,
                job.pin,
            )
        )
    version = state.version
    memo = [
        MemoRecord(leaf, sid(shape), priority, zone)
        for (leaf, shape, priority, zone), at in sorted(state.reclaim_failed.items())
        if at == version
    ]
    nodes = [
        NodeRecord(
            zone, name, _sorted(record.allocatable), record.unschedulable, dict(record.labels)
        )
        for zone in sorted(state.nodes)
        for name, record in sorted(state.nodes[zone].items())
    ]
    # Before ``shapes`` is listed: the placements may name shapes no job has any more.
    stops = [
        StopRecord(
            str(preemptor),
            None if group.hold is None else _placement(group.hold, sid),
            [(str(v), _placement(group.victims[v], sid)) for v in sorted(group.victims)],
        )
        for preemptor, group in sorted(state.stops.items())
    ]
    lingering = [(str(k), _placement(w, sid)) for k, w in sorted(state.lingering.items())]
    return EngineSnapshot(
        format=FORMAT,
        config=config_record(engine.config),
        counters=Counters(version, state.passes, state.seq, state.now, state.last_pass_now),
        tree=state.tree.root,
        used=[_sorted(info.used) for info in state.tree.nodes.values()],
        shapes=list(shape_ids),
        jobs=jobs,
        priority_values=sorted(state.priority_values.items()),
        nodes=nodes,
        zone_used=[(zone, _sorted(used)) for zone, used in sorted(state.zone_used.items())],
        held=sorted(state.held),
        preemptors=sorted(state.preemptors),
        announce=list(state.announce),
        wakeups=[(end, seq, key) for end, seq, key in state.wakeups],
        reclaim_failed=memo,
        stops=stops,
        lingering=lingering,
        served=None if state.served is None else list(state.served),
        clusters=[(str(name), link) for name, link in state.clusters.items()],
        failures=[(str(key), failure) for key, failure in state.failures.items()],
        retries=[(str(key), link) for key, link in state.retries.items()],
        holds=[state.holds[path] for path in sorted(state.holds)],
        tree_holds=[state.tree_holds[path] for path in sorted(state.tree_holds)],
        budget_book=[
            (key, start, amount)
            for key, (start, amount) in sorted(state.budget_book.closed.items())
        ],
        closing=[
            (str(key), str(run.path), _sorted(dict(run.shape)), run.admitted_ms)
            for key, run in sorted(state.closing.items())
        ],
        starving=[(str(key), since) for key, since in sorted(state.starving.items())],
        gated=[(str(key), list(gates)) for key, gates in sorted(state.gated.items())],
        fair_book=[
            (str(leaf), at, resource, str(value))
            for leaf, (at, values) in sorted(state.fair_book.closed.items())
            for resource, value in sorted(values.items())
        ],
    )


def _placement(where: Placement, sid: Callable[[Shape], int]) -> PlacementRecord:
    path, shape, zone = where
    return PlacementRecord(str(path), sid(shape), str(zone))


def _placed(record: PlacementRecord, shapes: list[Shape]) -> Placement:
    return (QuotaPath(record.path), shapes[record.shape], Zone(record.zone))


def _sorted(resources: Resources) -> Resources:
    # Resource maps are only ever looked up, never iterated where order matters: sorted
    # keys make the bytes canonical.
    return dict(sorted(resources.items()))


# ---------------------------------------------------------------------- decode


def restore(data: bytes, config: EngineConfig) -> Engine:
    """An engine equal to the one ``data`` was taken from; ``SnapshotError`` if impossible.

    ``config`` must be the configuration the snapshot was made under (its decisions so far
    were made under it); the format number is checked before anything else is decoded.
    """
    try:
        header = _header_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SnapshotError("undecodable", f"not an engine snapshot: {exc}") from exc
    if header.format != FORMAT:
        raise SnapshotError(
            "format",
            "snapshot of another format",
            expected=str(FORMAT),
            found=str(header.format),
        )
    with _collector_paused():
        try:
            record = _decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise SnapshotError("undecodable", f"malformed snapshot: {exc}") from exc
        wanted = config_record(config)
        if record.config != wanted:
            raise SnapshotError(
                "config",
                "snapshot made under another engine configuration",
                expected=_fingerprint(wanted),
                found=_fingerprint(record.config),
            )
        try:
            return _rebuild(record, config)
        except (KeyError, IndexError, ValueError, TypeError, AssertionError) as exc:
            raise SnapshotError("inconsistent", f"{type(exc).__name__}: {exc}") from exc


def _rebuild(record: EngineSnapshot, config: EngineConfig) -> Engine:
    engine = Engine(config)
    state = engine.state
    tree = TreeIndex(record.tree, config)
    state.tree = tree
    if len(record.used) != len(tree.nodes):
        raise ValueError(f"{len(record.used)} usage entries for {len(tree.nodes)} tree nodes")
    for info, used in zip(tree.nodes.values(), record.used, strict=True):
        info.used = dict(used)
    shapes = list(record.shapes)
    state.jobs = _jobs(record.jobs, shapes)

    counters = record.counters
    state.version = counters.version
    state.passes = counters.passes
    state.seq = counters.seq
    state.now = Millis(counters.now)
    state.last_pass_now = (
        Millis(counters.last_pass_now) if counters.last_pass_now is not None else None
    )
    state.priority_values = dict(record.priority_values)
    for node in record.nodes:
        nodes = state.nodes.setdefault(Zone(node.zone), {})
        nodes[NodeName(node.name)] = NodeCapacity(
            dict(node.allocatable), node.unschedulable, dict(node.labels)
        )
    state.zone_used = {Zone(zone): dict(used) for zone, used in record.zone_used}
    if record.served is not None:
        state.served = {Zone(zone): None for zone in record.served}
    state.clusters = {ClusterName(name): link for name, link in record.clusters}
    jobs = state.jobs
    for key in record.held:
        if key not in jobs:
            raise KeyError(f"held workload {key} unknown")
        state.held[WorkloadKey(key)] = None
    for key in record.preemptors:
        state.preemptors[WorkloadKey(key)] = None
    for key in record.announce:
        state.announce[WorkloadKey(key)] = None
    state.wakeups = [(end, seq, WorkloadKey(key)) for end, seq, key in record.wakeups]
    state.reclaim_failed = {
        (QuotaPath(m.leaf), shapes[m.shape], m.priority, Zone(m.zone)): counters.version
        for m in record.reclaim_failed
    }
    state.stops = _stops(record.stops, shapes)
    state.lingering = {WorkloadKey(k): _placed(w, shapes) for k, w in record.lingering}
    state.failures = {WorkloadKey(k): failure for k, failure in record.failures}
    state.retries = {WorkloadKey(k): link for k, link in record.retries}
    state.holds = {hold.node: hold for hold in record.holds}
    state.tree_holds = {hold.node: hold for hold in record.tree_holds}
    state.budget_book = BudgetBook(
        closed={key: (start, amount) for key, start, amount in record.budget_book}
    )
    state.closing = {
        WorkloadKey(k): Running(QuotaPath(path), dict(shape), start)
        for k, path, shape, start in record.closing
    }
    state.starving = {WorkloadKey(k): Millis(since) for k, since in record.starving}
    state.gated = {WorkloadKey(k): tuple(gates) for k, gates in record.gated}
    state.fair_book = _fair_book(record.fair_book)
    engine.rebuild_derived()
    return engine


def _fair_book(rows: list[tuple[str, int, str, str]]) -> FairBook:
    """The fair book a snapshot carries (F1), row by row; a value that is not a finite
    decimal >= 0 is refused (``str`` of a Decimal reads back exactly)."""
    closed: dict[QuotaPath, tuple[int, dict[str, Decimal]]] = {}
    for leaf, at, resource, text in rows:
        value = Decimal(text) if _DECIMAL.fullmatch(text) else None
        if value is None:
            raise SnapshotError("inconsistent", f"fair book of {leaf}: {text!r} is not a decimal")
        _, values = closed.setdefault(QuotaPath(leaf), (at, {}))
        values[resource] = value
    return FairBook(closed=closed)


_DECIMAL = re.compile(r"[0-9]+(\.[0-9]+)?(E[-+]?[0-9]+)?")


def _stops(records: list[StopRecord], shapes: list[Shape]) -> dict[WorkloadKey, StopGroup]:
    """Groups of stopping victims (their residuals are derived: ``rebuild_derived``)."""
    stops: dict[WorkloadKey, StopGroup] = {}
    for record in records:
        preemptor = WorkloadKey(record.preemptor)
        hold = None if record.hold is None else _placed(record.hold, shapes)
        group = StopGroup(preemptor, hold)
        for victim, where in record.victims:
            group.victims[WorkloadKey(victim)] = _placed(where, shapes)
        stops[preemptor] = group
    return stops


def _jobs(records: list[JobRecord], shapes: list[Shape]) -> dict[WorkloadKey, Job]:
    states = _STATES
    jobs: dict[WorkloadKey, Job] = {}
    new_job = Job.__new__
    # One object per namespace and per pod list, as the engine keeps them (memory per job).
    names: dict[str, str] = {}
    pod_lists: dict[tuple[Shape, ...], tuple[Shape, ...]] = {}
    for r in records:
        key = WorkloadKey(r.key)
        namespace, _, name = key.partition("/")
        # Every slot is set below (no __init__: it would fill them twice).
        job = new_job(Job)
        job.key = key
        ns = r.namespace if r.namespace is not None else namespace
        job.namespace = names.setdefault(ns, ns)
        job.name = r.name if r.name is not None else name
        job.zone = Zone(r.zone)
        job.priority_class = r.priority_class
        job.spec_priority = r.spec_priority
        job.priority = r.priority
        job.created_ms = Millis(r.created_ms)
        job.shape = shapes[r.shape]
        pod_list = tuple(shapes[p] for p in r.pods)
        job.pods = pod_lists.setdefault(pod_list, pod_list)
        job.quota_name = r.quota_name
        job.state = states[r.state]
        job.leaf = QuotaPath(r.leaf) if r.leaf is not None else None
        job.sort_key = (r.sort_key[0], r.sort_key[1], key)
        job.admitted_ms = Millis(r.admitted_ms)
        job.admit_seq = r.admit_seq
        job.used_path = QuotaPath(r.used_path) if r.used_path is not None else None
        job.used_shape = shapes[r.used_shape]
        job.victim_key = (r.victim_key[0], r.victim_key[1], r.victim_key[2], key)
        job.arrived_pass = r.arrived_pass
        job.note = r.note
        job.note_pass = r.note_pass
        job.held = r.held
        job.announced = r.announced
        job.pod_count = r.pod_count
        job.readiness = r.readiness
        job.scalable = None
        if r.scalable is not None:
            name, pod, count, least = r.scalable
            job.scalable = (name, shapes[pod], count, least)
        job.fit_shape = job.shape if r.fit_shape is None else shapes[r.fit_shape]
        job.retry_ask = r.retry_ask
        job.zones = tuple(Zone(zone) for zone in r.zones)
        job.max_runtime_ms = r.max_runtime_ms
        job.listed = job.zones if r.listed is None else tuple(Zone(zone) for zone in r.listed)
        job.grown = r.grown
        job.topology = r.topology
        job.pin = r.pin
        if key in jobs:
            raise ValueError(f"workload {key} twice")
        jobs[key] = job
    return jobs


__all__ = [
    "ENCODED",
    "FORMAT",
    "REBUILT",
    "EngineSnapshot",
    "SnapshotError",
    "SnapshotProblem",
    "config_record",
    "fingerprint",
    "restore",
    "snapshot",
]
