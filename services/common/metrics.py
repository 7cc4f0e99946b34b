"""Prometheus metrics of a service process: one registry, the metric families, gauge refreshers.

What it does: holds the process's single ``CollectorRegistry`` and every metric family the
services record into (``Metrics``; ``process_metrics()`` returns the one of this process, so
services running side by side in one process, as in tests, share it), renders it in the
standard text exposition format, copies per-queue and per-quota-node figures out of a pure
engine (``record_engine``), with each budget's spent and left (``record_budgets``, B1) and
each node's usage and cap per zone it caps (``record_zone_quota``, Z1), its usage in every
zone and guarantee per zone (``record_zone_usage``, Z3/Z4), counts admissions
per zone, burst or not (``record_admission``, Z3), adds
usage accrued per quota node to its counters (``record_usage``, U1) and samples consumer lag
now and then (``Sampler``).
What it must never do: label by workload (cardinality: one series per queue, quota node (and
zone in use) and resource at most), run per-job work on the decision path, or let a metrics
failure stop a service (samplers log and go on).

Units: seconds for durations, entries for lag; quota amounts in the engine's canonical units
(cpu in millicores, memory in bytes, other resources as counted).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from schemas import HOLD_MODES, Millis
from services.common.tasks import cancel_tasks
from usher.core.engine.facade import Engine
from usher.core.history.usage import UsageMeter, unit_seconds
from usher.core.rules.budgets import window_text

__all__ = [
    "CONTENT_TYPE_LATEST",
    "Metrics",
    "Sampler",
    "process_metrics",
    "record_admission",
    "record_budgets",
    "record_engine",
    "record_usage",
    "record_zone_usage",
]

_SHORT = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Buckets for work measured in milliseconds (a pass, a transaction)."""
_WAIT = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600)
"""Buckets for how long a workload waits for admission (a tenth of a second to hours)."""


class Metrics:
    """The registry and the metric families of one process (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.queue_pending = Gauge(
            "usher_queue_pending_workloads",
            "Pending workloads per queue, as this process's projection sees them.",
            ["queue"],
            registry=r,
        )
        self.queue_admitted = Gauge(
            "usher_queue_admitted_workloads",
            "Admitted workloads per queue, as this process's projection sees them.",
            ["queue"],
            registry=r,
        )
        self.pending_past_estimate = Gauge(
            "usher_queue_pending_past_estimate_workloads",
            "Pending workloads per queue still waiting past the upper bound (p75) of the first "
            "estimated start the watcher could give them (E1); exported by the watcher.",
            ["queue"],
            registry=r,
        )
        self.admission_wait = Histogram(
            "usher_admission_wait_seconds",
            "From a workload's creation (or first observation) to its granted reservation.",
            ["zone"],
            buckets=_WAIT,
            registry=r,
        )
        self.quota_used = Gauge(
            "usher_quota_used",
            "Usage per quota node and resource (canonical units: millicores, bytes).",
            ["node", "resource"],
            registry=r,
        )
        self.quota_zone_used = Gauge(
            "usher_quota_zone_used",
            "Usage per quota node, zone and resource, for each zone the node caps (Z1; "
            "canonical units). usher_quota_used is the node's total across zones.",
            ["node", "zone", "resource"],
            registry=r,
        )
        self.quota_zone_max = Gauge(
            "usher_quota_zone_max",
            "Cap per quota node, zone and resource (Z1, usher.io/zone-max; canonical units).",
            ["node", "zone", "resource"],
            registry=r,
        )
        self.quota_used_in_zone = Gauge(
            "usher_quota_used_in_zone",
            "Usage per quota node, zone and resource, for every zone something counts in on "
            "the node and every zone it caps (Z1) or guarantees (Z4), burst zones (Z3) "
            "included (canonical units); summed over zones it is usher_quota_used, less what "
            "a reclaim's victims add until seen stopped (R7), which no zone count includes.",
            ["node", "zone", "resource"],
            registry=r,
        )
        self.quota_zone_min = Gauge(
            "usher_quota_zone_min",
            "Guarantee per quota node, zone and resource (Z4, usher.io/zone-min; canonical "
            "units), where a node declares one.",
            ["node", "zone", "resource"],
            registry=r,
        )
        self.quota_min = Gauge(
            "usher_quota_min",
            "Guaranteed minimum per quota node and resource (canonical units).",
            ["node", "resource"],
            registry=r,
        )
        self.quota_max = Gauge(
            "usher_quota_max",
            "Ceiling per quota node and resource (canonical units).",
            ["node", "resource"],
            registry=r,
        )
        self.usage = Counter(
            "usher_usage_resource_seconds",
            "Resource-seconds used per quota node (every node on the path) and resource, as "
            "usage accounting counts them (U1): core-seconds for cpu, byte-seconds for memory, "
            "unit-seconds otherwise. Every dequeuer counts the whole tree: take max across them.",
            ["node", "resource"],
            registry=r,
        )
        self.held_nodes = Gauge(
            "usher_quota_nodes_held",
            "Quota nodes held (mode Hold) or draining (mode Drain) as this process's "
            "projection sees them (R14/R15).",
            ["mode"],
            registry=r,
        )
        self.budget_spent = Gauge(
            "usher_budget_spent_resource_seconds",
            "What each budget has spent in its current window (B1), the running work counted up "
            "to this process's last decision: core-seconds for cpu, byte-seconds for memory, "
            "unit-seconds otherwise. window is month or <N>d.",
            ["node", "resource", "window"],
            registry=r,
        )
        self.budget_left = Gauge(
            "usher_budget_left_resource_seconds",
            "What each budget has left in its current window (B1), in the units of "
            "usher_budget_spent_resource_seconds; 0 once spent.",
            ["node", "resource", "window"],
            registry=r,
        )
        self.preemptions = Counter(
            "usher_preemptions",
            "Victims of accepted reclaims, by the reason code of their Preempted decision.",
            ["reason"],
            registry=r,
        )
        self.zone_admissions = Counter(
            "usher_zone_admissions",
            "Admissions into each zone that the ledger granted its dequeuer: reservations, and "
            "accepted reclaims (whose preemptor the ledger admits once its victims stop). "
            "burst is true for a zone the tree in force marks usher.io/burst-zones (Z3).",
            ["zone", "burst"],
            registry=r,
        )
        self.requeues = Counter(
            "usher_requeues",
            "Requeues the ledger granted, by the reason code of their Requeued decision (R10).",
            ["reason"],
            registry=r,
        )
        self.retries = Counter(
            "usher_retries",
            "Failed attempts of jobs with retries, by the reason code of their Retried decision "
            "(OOMKilled, Failed: retried; RetryLimitReached, MemoryCapReached: not) (R12).",
            ["cause"],
            registry=r,
        )
        self.pass_seconds = Histogram(
            "usher_decision_pass_seconds",
            "CPU time of one decision pass of the core (Engine.decide).",
            ["zone"],
            buckets=_SHORT,
            registry=r,
        )
        self.consumer_lag = Gauge(
            "usher_consumer_lag_entries",
            "Log entries this service has not applied yet (stream last seq - applied seq).",
            ["service"],
            registry=r,
        )
        self.ledger_seconds = Histogram(
            "usher_ledger_transaction_seconds",
            "Ledger transaction latency by operation (reserve, preempt, requeue, log batch).",
            ["operation"],
            buckets=_SHORT,
            registry=r,
        )
        self.watch_reconnects = Counter(
            "usher_watch_reconnects",
            "Kubernetes list/watch streams started again after a failure, by resource.",
            ["resource"],
            registry=r,
        )
        self.dlq_parked = Counter(
            "usher_dlq_parked",
            "Messages parked on the dead-letter queue, by service.",
            ["service"],
            registry=r,
        )
        self.forged_decisions = Counter(
            "usher_forged_decisions",
            "Decisions the watcher refused to carry out because their subject or source is not "
            "their owner's (parked on the dead-letter queue with reason ForgedDecision), by "
            "decision type.",
            ["decision"],
            registry=r,
        )
        self.up = Gauge(
            "usher_up",
            "1 while the service can do its work (what /healthz says), 0 once its NATS "
            "connection was down longer than the limit or keeps being lost.",
            registry=r,
        )
        self.nats_connected = Gauge(
            "usher_nats_connected",
            "1 while the service's NATS connection is up, 0 while it is down (reconnecting).",
            registry=r,
        )
        self.postgres_up = Gauge(
            "usher_postgres_up",
            "1 while PostgreSQL answers the service's SELECT 1 within 2 s (asked every second), "
            "0 when it does not; exported by the ledger.",
            ["service"],
            registry=r,
        )
        self.leader = Gauge(
            "usher_leader",
            "1 while this process holds the leadership of a single-writer role, else 0.",
            ["role"],
            registry=r,
        )
        # Label sets written by ``record_engine``, to remove series of queues and quota
        # nodes that disappeared (a gauge otherwise keeps its last value forever).
        self._queues: set[str] = set()
        self._nodes: set[tuple[str, str]] = set()
        self._budgets: set[tuple[str, str, str]] = set()
        self._zone_nodes: set[tuple[str, str, str]] = set()
        self._zone_usage: set[tuple[str, str, str]] = set()
        self._zone_mins: set[tuple[str, str, str]] = set()

    def render(self) -> bytes:
        """The registry in the text exposition format (what ``/metrics`` serves)."""
        return generate_latest(self.registry)


_process: Metrics | None = None


def process_metrics() -> Metrics:
    """The metrics of this process: created on first use, shared by every service in it."""
    global _process
    if _process is None:
        _process = Metrics()
    return _process


def queue_counts(engine: Engine) -> dict[str, tuple[int, int]]:
    """``{queue: (pending, admitted)}`` in O(queues), from the engine's public query."""
    return {str(queue): counts for queue, counts in engine.queue_counts().items()}


def record_engine(metrics: Metrics, engine: Engine) -> None:
    """Copy per-queue counts and per-node quota (used/min/max) out of ``engine``."""
    counts = queue_counts(engine)
    for queue, (pending, admitted) in counts.items():
        metrics.queue_pending.labels(queue).set(pending)
        metrics.queue_admitted.labels(queue).set(admitted)
    for gone in metrics._queues - counts.keys():
        with contextlib.suppress(KeyError):
            metrics.queue_pending.remove(gone)
            metrics.queue_admitted.remove(gone)
    metrics._queues = set(counts)
    used = engine.quota_used()
    nodes: set[tuple[str, str]] = set()
    for path, (low, high) in engine.quota_nodes().items():
        node_used = used.get(path, {})
        for resource in {*low, *high, *node_used}:
            nodes.add((str(path), resource))
            metrics.quota_used.labels(path, resource).set(node_used.get(resource, 0))
            metrics.quota_min.labels(path, resource).set(low.get(resource, 0))
            metrics.quota_max.labels(path, resource).set(high.get(resource, 0))
    for gone_node in metrics._nodes - nodes:
        with contextlib.suppress(KeyError):
            for gauge in (metrics.quota_used, metrics.quota_min, metrics.quota_max):
                gauge.remove(*gone_node)
    metrics._nodes = nodes
    record_zone_quota(metrics, engine)
    modes = [record.mode for record in engine.holds_in_force().values()]
    for mode in HOLD_MODES:
        metrics.held_nodes.labels(mode).set(modes.count(mode))
    record_budgets(metrics, engine)


def record_zone_quota(metrics: Metrics, engine: Engine) -> None:
    """Used and cap of every node per zone it caps (Z1); a cap gone is removed."""
    series: set[tuple[str, str, str]] = set()
    for (path, zone), (used, caps) in engine.quota_zones().items():
        for resource, cap in caps.items():
            series.add((str(path), str(zone), resource))
            metrics.quota_zone_used.labels(path, zone, resource).set(used.get(resource, 0))
            metrics.quota_zone_max.labels(path, zone, resource).set(cap)
    for gone in metrics._zone_nodes - series:
        with contextlib.suppress(KeyError):
            metrics.quota_zone_used.remove(*gone)
            metrics.quota_zone_max.remove(*gone)
    metrics._zone_nodes = series
    record_zone_usage(metrics, engine)


def record_zone_usage(metrics: Metrics, engine: Engine) -> None:
    """Used of every node in every zone counted on it or that it caps or guarantees (zero
    there while nothing runs), and each guarantee declared (Z4); series gone are removed."""
    caps = {where: cap for where, (_, cap) in engine.quota_zones().items()}
    mins = engine.quota_zone_mins()
    used = engine.quota_used_by_zone()
    usage: set[tuple[str, str, str]] = set()
    for path, zone in {*used, *caps, *mins}:
        amounts = used.get((path, zone), {})
        declared = {**caps.get((path, zone), {}), **mins.get((path, zone), {})}
        for resource in {*amounts, *declared}:
            usage.add((str(path), str(zone), resource))
            metrics.quota_used_in_zone.labels(path, zone, resource).set(amounts.get(resource, 0))
    guaranteed: set[tuple[str, str, str]] = set()
    for (path, zone), minimum in mins.items():
        for resource, amount in minimum.items():
            guaranteed.add((str(path), str(zone), resource))
            metrics.quota_zone_min.labels(path, zone, resource).set(amount)
    _remove_gone(metrics.quota_used_in_zone, metrics._zone_usage - usage)
    _remove_gone(metrics.quota_zone_min, metrics._zone_mins - guaranteed)
    metrics._zone_usage, metrics._zone_mins = usage, guaranteed


def _remove_gone(gauge: Gauge, gone: set[tuple[str, str, str]]) -> None:
    for labels in gone:
        with contextlib.suppress(KeyError):
            gauge.remove(*labels)


def record_admission(metrics: Metrics, engine: Engine, zone: str) -> None:
    """One admission granted in ``zone``, labelled burst when the tree in force marks it so
    (Z3): what an operator of paid virtual nodes watches."""
    burst = "true" if zone in engine.burst_zones() else "false"
    metrics.zone_admissions.labels(zone, burst).inc()


def record_budgets(metrics: Metrics, engine: Engine) -> None:
    """Spent and left of every budget of the tree in force (B1); a budget gone is removed."""
    series: set[tuple[str, str, str]] = set()
    for status in engine.budget_statuses().values():
        budget = status.budget
        labels = (str(budget.node), budget.resource, window_text(budget.days))
        series.add(labels)
        metrics.budget_spent.labels(*labels).set(unit_seconds(budget.resource, status.spent))
        metrics.budget_left.labels(*labels).set(unit_seconds(budget.resource, status.left))
    for gone in metrics._budgets - series:
        with contextlib.suppress(KeyError):
            metrics.budget_spent.remove(*gone)
            metrics.budget_left.remove(*gone)
    metrics._budgets = series


def record_usage(metrics: Metrics, meter: UsageMeter, now_ms: Millis) -> None:
    """Add what accrued since the meter's previous reading to the usage counters."""
    for (node, resource), amount in sorted(meter.read(now_ms).items()):
        metrics.usage.labels(node, resource).inc(unit_seconds(resource, amount))


class Sampler:
    """Runs ``sample`` every ``every_s`` until stopped; a failing sample is logged, not fatal.

    Lag needs a round-trip to the server (the stream's last sequence), so it is sampled in
    the background rather than on the decision path or at scrape time (the exposition is
    synchronous).
    """

    def __init__(
        self, sample: Callable[[], Awaitable[None]], log: Any, *, every_s: float = 1.0
    ) -> None:
        self._sample = sample
        self._log = log
        self._every = every_s
        self._task: asyncio.Task[None] | None = None
        self.last_at = 0.0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="metrics-sampler")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            for error in (await cancel_tasks([task])).values():
                raise error

    async def _run(self) -> None:
        failing = False
        while True:
            try:
                await self._sample()
                failing = False
            except Exception as exc:
                # NATS away for a moment, a stream being re-created: the next tick retries.
                # Logged once per failing streak, not once per second.
                if not failing:
                    self._log.warning("metrics sample failed", error=type(exc).__name__)
                failing = True
            self.last_at = time.monotonic()
            await asyncio.sleep(self._every)
