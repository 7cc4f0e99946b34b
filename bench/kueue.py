"""Kueue's scheduler performance baseline, translated to Usher and run through the whole stack.

What it does: reproduces Kueue's ``test/performance/scheduler/configs/baseline`` workload on a
fresh Usher installation, every part its own process as deployed: embedded NATS JetStream and
PostgreSQL, the Kubernetes API emulator with its fake kubelet, and ``python -m usher run``
ledger, preemptor, watcher and one dequeuer (zone ``default``: the jobs carry no zone label,
and one zone keeps one total order of decisions; there is nothing for a second zone to split).

The translation (Kueue -> Usher):
* 5 cohorts x 6 ClusterQueues (nominal 20 cpu, borrowing limit 100) -> an ElasticQuotaTree
  ``root`` (min = max = 600 cpu) -> 5 parents ``cohort-<p>`` (min = max = 120 cpu: a cohort
  only lends inside itself) -> 6 leaves ``cq-<p>-<l>`` each (min 20, max 120 cpu), each leaf
  with its own namespace ``cq-<p>-<l>``. ``withinClusterQueue: LowerPriority`` ->
  ``USHER_WITHIN_QUOTA=LowerPriority``; ``reclaimWithinCohort: Any`` -> Usher's reclaim of
  lent ``min``.
* Per leaf, three arrival streams starting together: small 350 x (1 cpu, 200 ms, priority
  50, one every 100 ms), medium 100 x (5 cpu, 500 ms, priority 100, every 500 ms), large
  50 x (20 cpu, 1 s, priority 200, every 1.2 s): 30 x 500 = 15,000 batch/v1 Jobs, created
  suspended through kubernetes_asyncio at their arrival times (all creations of one 100 ms
  tick concurrently), with ``priorityClassName`` (three PriorityClasses) and the annotation
  ``usher.io/sim-duration`` the fake kubelet runs them for (speed 1: real seconds).

What it reports (all times from this machine's clock; the log's envelope times are stamped
by the service that wrote them):
* ``wall_s``: from the first creation request to the last ``WorkloadFinished`` on the log.
* ``tta_<class>_mean_s``: mean time to admission per class, from the moment this process sent
  the Job's create request to the first ``Admitted`` decision of that workload on the log
  (stamped by the ledger in the transaction that granted it). Kueue measures from the first
  event its recorder sees of the Workload object, which is later than the Job's creation.
* ``usage_pct``: Kueue's "ClusterQueue class usage", exactly as its checker computes it:
  sum over leaves of the integral of the leaf's admitted cpu over time, divided by (sum of the
  leaves' nominal quota = ``min``, 600 cpu) x (the monitoring window). The window here is
  ``wall_s``; a workload counts from its admission (``admitted_at`` in the ledger) until its
  release or preemption, clipped to the window. With every leaf's min 20 cpu this is also the
  time-weighted utilisation of the 600-cpu root. ``leaf_usage_of_max_pct`` is the same
  integral divided by the sum of the leaves' ``max`` (120 each) instead.
* ``ideal_makespan_s``: total cpu-seconds of the workloads / the root's 600 cpu (66 s; the
  last arrival plus its runtime, 59.8 s, is below it), and ``wall_vs_ideal``.
* Kueue's published means (``kueue_*``) beside ours, and ``speedup_<class>`` = Kueue's mean
  time to admission / ours.
* Where the time goes: ``observe_lag_mean_s`` (create request -> the watcher's first
  ``WorkloadObserved`` on the log), ``admit_to_unsuspended_mean_s`` (``Admitted`` -> the
  watcher's first observation of the job unsuspended, i.e. the decision carried out),
  ``finish_to_release_mean_s`` (``WorkloadFinished`` -> ``Released``),
  ``held_beyond_runtime_<class>_mean_s`` (quota held beyond the runtime, from the ledger),
  ``throughput_jobs_per_s`` against ``needed_jobs_per_s`` (workloads / ideal makespan), and
  ``cpu_s_<process>`` (CPU seconds of each process from the first creation until the last
  finish, PostgreSQL with its backends) with ``cpu_cores_busy`` (their sum / that time), and
  the same per admitted job in ms (``cpu_ms_per_job_<process>``, all summed: ``cpu_ms_per_job``).
* ``start_estimate_mae_<class>_s``: median absolute error of the estimated start a workload
  had when it arrived (``usher.core.history.estimate.estimates_on_arrival``: the log folded, after
  the
  run, up to its first observation) against the wait that followed (that observation to its
  first ``Admitted``, both log times), over the workloads whose estimate was known;
  ``start_estimate_known_<class>_pct`` is how many of the class had one (the rest: "unknown",
  too few runs had ended yet, or nothing ran on their path);
  ``start_estimate_coverage_<class>_pct`` is how many of those known estimates stated a
  range (early .. late) that the actual start fell inside, bounds included.
* ``history_violations``: instants where the ledger's history shows a quota node above its
  ``max`` (the e2e tests' sweep, ``tests/e2e/checks.py``); must be 0.
Quick mode scales down to 1 parent x 6 leaves and a fifth of each arrival stream (70 small,
20 medium, 10 large per leaf: 600 workloads, ideal 13.2 s); ``scale_vs_kueue`` says so, and
Kueue's numbers (measured at full scale) are then only a reference. ``parents`` (``python -m
bench --kueue-parents N``) keeps N of the 5 cohorts: every leaf's arrivals, and so each
cohort's contention and the ideal makespan, stay those of the baseline (cohorts lend only
inside themselves); only the machine's load shrinks, to N/5. With a ``profiler`` (``--profile``)
every process is sampled from the first creation to the last finish.
What it must never do: feed the services anything but Kubernetes objects, read a number the
system did not publish or record, leave a process running, or pass or fail on a number.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from pathlib import Path
from statistics import median
from typing import Any

import nats
from kubernetes_asyncio import client, config
from nats.aio.msg import Msg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from bench.common import (
    Servers,
    cpu_seconds,
    fresh_servers,
    mean,
    prepare_streams,
    quiesce,
    start_emulator,
    start_services,
)
from bench.profile import Profiler
from schemas import (
    Admitted,
    Envelope,
    Preempted,
    Released,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    decode_envelope,
)
from usher.adapters.kube.client import _look_up_the_environment_once
from usher.adapters.nats.export import read_entries
from usher.adapters.nats.subjects import Subjects
from usher.core.history.estimate import Estimate, estimates_on_arrival
from usher.core.history.replay import history_of
from usher.core.model.config import EngineConfig


@dataclass(frozen=True)
class WorkloadClass:
    """One of Kueue's baseline workload sets (per ClusterQueue)."""

    name: str
    count: int
    interval_ms: int
    cpu: int
    runtime_s: float
    priority: int


CLASSES = (
    WorkloadClass("small", 350, 100, 1, 0.2, 50),
    WorkloadClass("medium", 100, 500, 5, 0.5, 100),
    WorkloadClass("large", 50, 1200, 20, 1.0, 200),
)
PARENT_CPU, LEAF_MIN_CPU, LEAF_MAX_CPU, LEAVES_PER_PARENT = 120, 20, 120, 6

KUEUE = {"wall_s": 351.0, "large": 16.5, "medium": 76.8, "small": 215.5, "usage_pct": 55.9}
"""Kueue's published baseline means (wall time, mean time to admission per class, usage)."""

ZONE = "default"
PREFIX = "kueue"


@dataclass(frozen=True)
class Scale:
    parents: int
    divisor: int
    """Each arrival stream keeps ``count // divisor`` workloads (same interval)."""

    @property
    def leaves(self) -> list[str]:
        return [f"cq-{p}-{i}" for p in range(self.parents) for i in range(LEAVES_PER_PARENT)]

    def count(self, cls: WorkloadClass) -> int:
        return cls.count // self.divisor


FULL, QUICK = Scale(parents=5, divisor=1), Scale(parents=1, divisor=5)


@dataclass(frozen=True)
class Arrival:
    at_ms: int
    namespace: str
    name: str
    cls: WorkloadClass

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def plan(scale: Scale) -> list[Arrival]:
    """Every workload with its arrival time, in arrival order (ties: leaf, then class)."""
    out = [
        Arrival(i * cls.interval_ms, leaf, f"{cls.name}-{i:03d}", cls)
        for leaf in scale.leaves
        for cls in CLASSES
        for i in range(scale.count(cls))
    ]
    out.sort(key=lambda a: a.at_ms)
    return out


def ideal_makespan_s(scale: Scale) -> float:
    """Total cpu-seconds of the plan / the root's cpu."""
    cpu_s = sum(a.cls.cpu * a.cls.runtime_s for a in plan(scale))
    return cpu_s / (PARENT_CPU * scale.parents)


def scale_of(quick: bool, parents: int | None = None) -> Scale:
    """The size a run plays: full, quick, or ``parents`` of the 5 cohorts (at that divisor)."""
    base = QUICK if quick else FULL
    return base if parents is None else Scale(parents=parents, divisor=base.divisor)


def notes(quick: bool, parents: int | None = None) -> str:
    """One line for the results file about what this run's numbers compare."""
    scale = scale_of(quick, parents)
    workloads = len(plan(scale))
    if scale == FULL:
        return "kueue: Kueue's scheduler baseline at full scale (5 x 6 leaves, 15,000 workloads)"
    part = "a fifth of each arrival stream" if scale.divisor > 1 else "every arrival stream"
    return (
        f"kueue ({'quick' if quick else 'reduced'}): {scale.parents} parent(s) x"
        f" {LEAVES_PER_PARENT} leaves, {part} ({workloads:,} workloads); Kueue's numbers are"
        " for its full 15,000-workload baseline"
        + (
            ", shown for reference"
            if scale.divisor > 1
            else " (per cohort the same contention: cohorts lend only inside themselves)"
        )
    )


# ---------------------------------------------------------------------- manifests


def tree(scale: Scale) -> dict[str, Any]:
    total = str(PARENT_CPU * scale.parents)
    parents = [
        {
            "name": f"cohort-{p}",
            "min": {"cpu": str(PARENT_CPU)},
            "max": {"cpu": str(PARENT_CPU)},
            "children": [
                {
                    "name": f"cq-{p}-{i}",
                    "min": {"cpu": str(LEAF_MIN_CPU)},
                    "max": {"cpu": str(LEAF_MAX_CPU)},
                    "namespaces": [f"cq-{p}-{i}"],
                }
                for i in range(LEAVES_PER_PARENT)
            ],
        }
        for p in range(scale.parents)
    ]
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "elasticquotatree", "namespace": "kube-system"},
        "spec": {
            "root": {
                "name": "root",
                "min": {"cpu": total},
                "max": {"cpu": total},
                "children": parents,
            }
        },
    }


def priority_class(cls: WorkloadClass) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": f"kueue-{cls.name}"},
        "value": cls.priority,
    }


def job(arrival: Arrival) -> dict[str, Any]:
    cls = arrival.cls
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": arrival.name,
            "namespace": arrival.namespace,
            "labels": {"bench.usher.io/class": cls.name},
            "annotations": {"usher.io/sim-duration": str(cls.runtime_s)},
        },
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": f"kueue-{cls.name}",
                    "containers": [
                        {
                            "name": "work",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": str(cls.cpu)}},
                        }
                    ],
                }
            },
        },
    }


# ---------------------------------------------------------------------- the run


class Progress:
    """Counts finished workloads as the watcher publishes them (a core subscription)."""

    def __init__(self) -> None:
        self.finished: set[str] = set()
        self.changed = asyncio.Event()

    async def on_message(self, msg: Msg) -> None:
        event = decode_envelope(msg.data).event
        if isinstance(event, WorkloadFinished):
            self.finished.add(str(event.workload))
            self.changed.set()

    async def wait(self, count: int, deadline: float) -> None:
        while len(self.finished) < count and time.monotonic() < deadline:
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=1)


async def _api(kubeconfig: Path) -> client.ApiClient:
    """The client's API connection, without the per-request environment look-ups (the
    ``--profile`` of the before run: aiohttp's netrc and proxy look-ups in worker threads were
    a third of the client's samples), as the services' adapter builds it."""
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = 64
    api = client.ApiClient(cfg)
    _look_up_the_environment_once(api)
    return api


def _wait_for_line(servers: Servers, name: str, line: str, timeout_s: float) -> None:
    proc = next(p for p in servers.procs if p.name == name)
    deadline = time.monotonic() + timeout_s
    while line not in proc.log_tail(400):
        if time.monotonic() > deadline or not proc.running():
            raise RuntimeError(f"{name} never logged {line!r}:\n{servers.tails()}")
        time.sleep(0.1)


async def _wait_tree(database_url: str, nodes: int, timeout_s: float) -> None:
    engine = create_async_engine(database_url)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            async with engine.connect() as conn:
                have = await conn.scalar(text("SELECT count(*) FROM quota_nodes WHERE present"))
            if have == nodes:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the ledger holds {have} of {nodes} quota nodes")
            await asyncio.sleep(0.2)
    finally:
        await engine.dispose()


async def _create(
    batch: client.BatchV1Api, arrival: Arrival, created: dict[str, float], failures: list[str]
) -> None:
    manifest: Any = job(arrival)  # the client sends a plain dict as it is
    created[arrival.key] = time.time()  # the first attempt is the arrival
    for attempt in range(3):
        try:
            await batch.create_namespaced_job(arrival.namespace, manifest)
            return
        except client.ApiException as exc:
            if exc.status == 409:  # created by an attempt whose answer was lost
                return
            if attempt == 2:
                failures.append(f"{arrival.key}: {exc.status} {exc.reason}")
        except Exception as exc:  # a dropped connection: try again
            if attempt == 2:
                failures.append(f"{arrival.key}: {exc!r}")
        await asyncio.sleep(0.2)


async def submit(
    api: client.ApiClient, arrivals: list[Arrival], created: dict[str, float]
) -> tuple[float, list[str]]:
    """Create every Job at its arrival time; returns (max lag behind schedule s, failures)."""
    batch = client.BatchV1Api(api)
    ticks: dict[int, list[Arrival]] = defaultdict(list)
    for arrival in arrivals:
        ticks[arrival.at_ms].append(arrival)
    failures: list[str] = []
    tasks: list[asyncio.Future[Any]] = []
    lag = 0.0
    began = time.monotonic()
    for at_ms, group in sorted(ticks.items()):
        delay = began + at_ms / 1000 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        lag = max(lag, time.monotonic() - began - at_ms / 1000)
        tasks.append(
            asyncio.ensure_future(
                asyncio.gather(*(_create(batch, a, created, failures) for a in group))
            )
        )
    await asyncio.gather(*tasks)
    return lag, failures


@dataclass
class Holds:
    """What the ledger's allocations say about quota held over the run."""

    cpu_s: float
    """Sum over allocations of cpu x seconds held inside the window."""
    rows: int
    overhead_s: dict[str, list[float]]
    """Per class: seconds held beyond the runtime, for allocations ended by a release."""


async def holds(database_url: str, t0: float, t1: float) -> Holds:
    """Read every allocation's interval (as the history check does) and sum them up."""
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    text(
                        "SELECT workload, requests, preempted_at,"
                        " COALESCE(admitted_at, reserved_at) AS start,"
                        " COALESCE(preempted_at, released_at) AS stop FROM allocations"
                    )
                )
            ).all()
    finally:
        await engine.dispose()
    runtimes = {cls.name: cls.runtime_s for cls in CLASSES}
    total = 0.0
    overhead: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        start: datetime = row.start
        stop = row.stop.timestamp() if row.stop is not None else t1
        held = min(stop, t1) - max(start.timestamp(), t0)
        if held > 0:
            total += int(row.requests.get("cpu", 0)) / 1000 * held
        cls = str(row.workload).partition("/")[2].partition("-")[0]
        if row.stop is not None and row.preempted_at is None and cls in runtimes:
            overhead[cls].append(row.stop.timestamp() - start.timestamp() - runtimes[cls])
    return Holds(total, len(rows), overhead)


async def measure(
    servers: Servers, kubeconfig: Path, scale: Scale, profiler: Profiler | None = None
) -> dict[str, float]:
    subjects = Subjects(PREFIX)
    arrivals = plan(scale)
    api = await _api(kubeconfig)
    nc = await nats.connect(servers.nats_url)
    try:
        js = nc.jetstream()
        for cls in CLASSES:
            body: Any = priority_class(cls)
            await client.SchedulingV1Api(api).create_priority_class(body)
        await client.CustomObjectsApi(api).create_namespaced_custom_object(
            "scheduling.sigs.k8s.io", "v1beta1", "kube-system", "elasticquotatrees", tree(scale)
        )
        await _wait_tree(servers.database_url, 1 + scale.parents * (1 + LEAVES_PER_PARENT), 60)
        await quiesce(js, subjects.stream_name, quiet_s=1.0, timeout_s=30)

        progress = Progress()
        await nc.subscribe(f"{PREFIX}.cluster.{ZONE}.job.>", cb=progress.on_message)
        created: dict[str, float] = {}
        with profiler.sampling(servers.pids()) if profiler else contextlib.nullcontext():
            cpu_before = {name: cpu_seconds(pid) for name, pid in servers.pids().items()}
            client_before, run_began = time.process_time(), time.monotonic()
            lag, failures = await submit(api, arrivals, created)
            submitted = time.monotonic()
            budget = 120.0 if scale.divisor > 1 else 300.0
            await progress.wait(len(arrivals), submitted + budget)
            cpu = {
                name: cpu_seconds(pid) - cpu_before.get(name, 0.0)
                for name, pid in servers.pids().items()
            }
            cpu["bench-client"] = time.process_time() - client_before
            run_s = time.monotonic() - run_began
        await quiesce(js, subjects.stream_name, quiet_s=1.5, timeout_s=60)
        entries = await _read_log(js, subjects)
    finally:
        await api.close()
        await nc.drain()

    admitted: dict[str, float] = {}
    observed: dict[str, float] = {}
    unsuspended: dict[str, float] = {}
    finished: dict[str, float] = {}
    released: dict[str, float] = {}
    preemptions = 0
    for _, _, envelope in entries:
        event, when = envelope.event, envelope.time.timestamp()
        if isinstance(event, Admitted):
            admitted.setdefault(str(event.workload), when)
        elif isinstance(event, WorkloadObserved):
            observed.setdefault(str(event.workload), when)
            if not event.suspended:
                unsuspended.setdefault(str(event.workload), when)
        elif isinstance(event, WorkloadFinished):
            finished.setdefault(str(event.workload), when)
        elif isinstance(event, Released):
            released[str(event.workload)] = when
        elif isinstance(event, Preempted):
            preemptions += 1

    t0 = min(created.values())
    t1 = max(finished.values()) if finished else time.time()
    wall = t1 - t0
    held = await holds(servers.database_url, t0, t1)
    leaves = len(scale.leaves)
    ideal = ideal_makespan_s(scale)

    from tests.e2e.checks import history_violations  # the e2e tests' sweep, one definition

    violations = await history_violations(servers.database_url, Fraction(1))

    numbers: dict[str, float] = {
        "scale_vs_kueue": len(arrivals) / 15_000,
        "parents": float(scale.parents),
        "leaves": float(leaves),
        "workloads": float(len(arrivals)),
        "created": float(len(arrivals) - len(failures)),
        "admitted": float(len(admitted)),
        "finished": float(len(finished)),
        "preemptions": float(preemptions),
        "allocation_rows": float(held.rows),
        "history_violations": float(len(violations)),
        "creation_lag_max_s": lag,
        "observe_lag_mean_s": mean(
            [observed[k] - created[k] for k in observed if k in created and k in admitted]
        ),
        "admit_to_unsuspended_mean_s": mean(
            [unsuspended[k] - admitted[k] for k in admitted if k in unsuspended]
        ),
        "finish_to_release_mean_s": mean(
            [released[k] - finished[k] for k in finished if k in released]
        ),
        "ideal_makespan_s": ideal,
        "needed_jobs_per_s": len(arrivals) / ideal,
        "throughput_jobs_per_s": len(finished) / wall,
        "wall_s": wall,
        "wall_vs_ideal": wall / ideal,
        "kueue_wall_s": KUEUE["wall_s"],
    }
    for cls in CLASSES:
        waits = [
            admitted[a.key] - created[a.key]
            for a in arrivals
            if a.cls is cls and a.key in admitted and a.key in created
        ]
        ours = mean(waits)
        numbers[f"tta_{cls.name}_mean_s"] = ours
        numbers[f"tta_{cls.name}_max_s"] = max(waits) if waits else float("nan")
        numbers[f"kueue_tta_{cls.name}_mean_s"] = KUEUE[cls.name]
        numbers[f"speedup_{cls.name}"] = KUEUE[cls.name] / ours if ours > 0 else float("nan")
        numbers[f"held_beyond_runtime_{cls.name}_mean_s"] = mean(held.overhead_s[cls.name])
    numbers.update(start_estimate_errors(entries, arrivals))
    numbers["usage_pct"] = 100 * held.cpu_s / (leaves * LEAF_MIN_CPU * wall)
    numbers["kueue_usage_pct"] = KUEUE["usage_pct"]
    numbers["leaf_usage_of_max_pct"] = 100 * held.cpu_s / (leaves * LEAF_MAX_CPU * wall)
    for name, seconds in sorted(cpu.items()):
        numbers[f"cpu_s_{name}"] = seconds
    numbers["cpu_cores_busy"] = sum(cpu.values()) / run_s
    jobs = max(1, len(admitted))
    for name, seconds in sorted(cpu.items()):
        numbers[f"cpu_ms_per_job_{name}"] = 1000 * seconds / jobs
    numbers["cpu_ms_per_job"] = 1000 * sum(cpu.values()) / jobs
    return numbers


def start_estimate_errors(
    entries: list[tuple[int, str, Envelope]], arrivals: list[Arrival]
) -> dict[str, float]:
    """Per class: the median absolute error (s) of the estimate made at arrival against the
    wait that followed, and the share of workloads that had a known estimate (%)."""
    history = history_of([(subject, envelope) for _, subject, envelope in entries])
    made = estimates_on_arrival(history.items, EngineConfig(within_quota="LowerPriority"))
    admitted: dict[str, int] = {}
    for item in history.items:
        if isinstance(item.event, Admitted):
            admitted.setdefault(str(item.event.workload), item.time_ms)
    out: dict[str, float] = {}
    for cls in CLASSES:
        errors: list[float] = []
        inside = 0
        mine = [a.key for a in arrivals if a.cls is cls]
        for key in mine:
            found = made.get(WorkloadKey(key))
            if found is None or found[1].start_ms is None or key not in admitted:
                continue
            arrived, estimate = found
            assert estimate.start_ms is not None
            errors.append(abs((estimate.start_ms - arrived) - (admitted[key] - arrived)) / 1000)
            inside += within_range(estimate, admitted[key])
        out[f"start_estimate_mae_{cls.name}_s"] = median(errors) if errors else float("nan")
        out[f"start_estimate_known_{cls.name}_pct"] = 100 * len(errors) / max(1, len(mine))
        coverage = 100 * inside / len(errors) if errors else float("nan")
        out[f"start_estimate_coverage_{cls.name}_pct"] = coverage
    return out


def within_range(estimate: Estimate, started_ms: int) -> bool:
    """Whether the actual start fell inside the range the estimate stated (early .. late,
    bounds included; one that states only its middle covers only that instant)."""
    assert estimate.start_ms is not None
    early = estimate.early_ms if estimate.early_ms is not None else estimate.start_ms
    late = estimate.late_ms if estimate.late_ms is not None else estimate.start_ms
    return early <= started_ms <= late


def run(
    quick: bool, parents: int | None = None, profiler: Profiler | None = None
) -> dict[str, float]:
    """Start the whole stack as processes in a temporary folder, play the baseline, stop all."""
    scale = scale_of(quick, parents)
    with fresh_servers("usher-bench-kueue-") as servers:
        kubeconfig = servers.home / "kubeconfig"
        start_emulator(servers, kubeconfig, namespaces=scale.leaves)
        asyncio.run(prepare_streams(servers.nats_url, Subjects(PREFIX)))
        start_services(
            servers,
            {
                "USHER_NATS_URL": servers.nats_url,
                "USHER_DATABASE_URL": servers.database_url,
                "KUBECONFIG": str(kubeconfig),
                "USHER_PREFIX": PREFIX,
                "USHER_HOME": str(servers.home / "home"),
                "USHER_WITHIN_QUOTA": "LowerPriority",
            },
            zones=[ZONE],
        )
        _wait_for_line(servers, "ledger", "ledger ready", 60)
        _wait_for_line(servers, f"dequeuer-{ZONE}", "replay done", 60)
        try:
            return asyncio.run(measure(servers, kubeconfig, scale, profiler))
        except Exception:
            print(servers.tails(), file=sys.stderr)
            raise


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    for key, value in run(quick).items():
        print(f"{key:<28} {value:>14,.2f}")
    return 0


async def _read_log(js: Any, subjects: Subjects) -> list[tuple[int, str, Envelope]]:
    """The whole log as (seq, subject, envelope), through the export adapter's reader."""
    return [
        (entry.seq, entry.subject, decode_envelope(bytes(entry.envelope)))
        for entry in await read_entries(js, subjects)
        if entry.data is None  # not an envelope: nothing this report reads
    ]


if __name__ == "__main__":
    sys.exit(main())
