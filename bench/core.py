"""Benchmark of the pure decision core: backlog admission rate, one-finish pass latency, memory.

Builds, deterministically (seeded), a 3-level tree (root -> 10 departments -> 100 leaves
each) and 100,000 pending workloads, then measures:
- admissions/s of the pass that admits the backlog,
- median and p99 ms of the two passes a dequeuer runs for one finished workload (200
  repetitions): the pass after the finish (its usage still counts, R7) and the pass after
  the ledger's ``Released`` of it; beside them the pass after a finish with
  ``EngineConfig(instant_release=True)`` (usage freed with the finish, as scenarios run it),
- bytes retained per pending workload (tracemalloc).

Run: ``python -m bench.core [--quick]``. The bench may read the clock; the core never does.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Iterator

from schemas import (
    Admitted,
    Millis,
    PodSet,
    QuotaNode,
    QuotaTreeApplied,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    Zone,
)
from usher.core.engine.facade import Engine
from usher.core.model.config import EngineConfig

GI = 1024**3
SHAPES = [(1000, 4 * GI), (2000, 8 * GI), (4000, 16 * GI), (8000, 32 * GI)]


def build_tree(departments: int, leaves: int, root_cores: int) -> QuotaNode:
    """root (min == max) -> departments (min = share, max = 1.5 share) -> leaves (max 4x min)."""
    dept_cpu = root_cores * 1000 // departments
    leaf_cpu = dept_cpu // leaves
    children = []
    for d in range(departments):
        kids = [
            QuotaNode(
                name=f"leaf-{d}-{i}",
                min={"cpu": leaf_cpu, "memory": leaf_cpu // 1000 * 4 * GI},
                max={"cpu": 4 * leaf_cpu, "memory": 4 * leaf_cpu // 1000 * 4 * GI},
                namespaces=[f"ns-{d}-{i}"],
            )
            for i in range(leaves)
        ]
        children.append(
            QuotaNode(
                name=f"dept-{d}",
                min={"cpu": dept_cpu, "memory": dept_cpu // 1000 * 4 * GI},
                max={"cpu": dept_cpu * 3 // 2, "memory": dept_cpu * 3 // 2 // 1000 * 4 * GI},
                children=kids,
            )
        )
    total = {"cpu": root_cores * 1000, "memory": root_cores * 4 * GI}
    return QuotaNode(name="root", min=total, max=dict(total), children=children)


def workloads(count: int, departments: int, leaves: int, seed: int) -> Iterator[WorkloadObserved]:
    """The workloads, one at a time (a million of them are not kept twice)."""
    rng = random.Random(seed)
    for n in range(count):
        d, i = rng.randrange(departments), rng.randrange(leaves)
        cpu, memory = SHAPES[rng.randrange(len(SHAPES))]
        namespace = f"ns-{d}-{i}"
        name = f"job-{n}"
        yield (
            WorkloadObserved(
                workload=WorkloadKey(f"{namespace}/{name}"),
                namespace=namespace,
                name=name,
                kind="batch/v1/Job",
                zone=Zone("default"),
                priority=rng.choice((0, 0, 0, 1, 5)),
                created_ms=Millis(n),
                pod_sets=[PodSet(name="main", count=1, requests={"cpu": cpu, "memory": memory})],
            )
        )


def resident_bytes() -> int:
    """This process's resident memory now (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def run(quick: bool) -> dict[str, float]:
    """Run the benchmark; return its numbers (also printed as a table by ``main``)."""
    return measure(
        count=20_000 if quick else 100_000,
        departments=10,
        leaves=100,
        repetitions=50 if quick else 200,
    )


def measure(
    count: int, departments: int, leaves: int, repetitions: int, traced: bool = True
) -> dict[str, float]:
    """The numbers for ``count`` pending workloads on ``departments`` x ``leaves`` leaves.

    First the engine as a dequeuer runs it (the default configuration, R7): after each
    finished workload a pass (its usage still counts), then the ledger's ``Released`` for it
    and a pass (now it is free): ``finish_pass_*`` and ``released_pass_*``. Then the same
    on an engine with ``instant_release`` (usage leaves with the finish, as scenarios run
    it): ``instant_release_finish_pass_*``. One engine at a time, so the peak is one's.

    ``traced``: bytes kept per workload as tracemalloc counts them (exact, but tracing a
    million allocations costs time and memory of its own); else from the resident size.
    """
    root_cores = count * 375 // 200  # about half of the backlog fits
    tree = build_tree(departments, leaves, root_cores)

    gc.collect()
    if traced:
        tracemalloc.start()
    engine = Engine(EngineConfig())
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    base = tracemalloc.get_traced_memory()[0] if traced else resident_bytes()
    for event in workloads(count, departments, leaves, seed=7):
        engine.apply(event, Millis(0))
    gc.collect()
    if traced:
        retained = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
    else:
        retained = resident_bytes() - base

    started = time.perf_counter()
    decisions = engine.decide(Millis(1))
    backlog_seconds = time.perf_counter() - started
    admitted = [d.workload for d in decisions if isinstance(d, Admitted)]
    backlog = len(admitted)
    finish, released = one_event_passes(engine, admitted, repetitions, ledger=True)
    del engine, decisions
    gc.collect()

    # The decision algorithm alone, as scenarios run it (victims stop, finished workloads
    # release at once): the figure earlier rounds reported.
    engine = Engine(EngineConfig(instant_release=True))
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    for event in workloads(count, departments, leaves, seed=7):
        engine.apply(event, Millis(0))
    at_once = [d.workload for d in engine.decide(Millis(1)) if isinstance(d, Admitted)]
    instant, _ = one_event_passes(engine, at_once, repetitions, ledger=False)
    return {
        "pending_workloads": float(count),
        "backlog_admitted": float(backlog),
        "backlog_pass_s": backlog_seconds,
        "admissions_per_s": backlog / backlog_seconds,
        "finish_pass_median_ms": statistics.median(finish),
        "finish_pass_p99_ms": p99(finish),
        "released_pass_median_ms": statistics.median(released),
        "released_pass_p99_ms": p99(released),
        "instant_release_finish_pass_median_ms": statistics.median(instant),
        "instant_release_finish_pass_p99_ms": p99(instant),
        "bytes_per_pending_workload": retained / count,
    }


def one_event_passes(
    engine: Engine, admitted: list[WorkloadKey], repetitions: int, *, ledger: bool
) -> tuple[list[float], list[float]]:
    """Milliseconds of the pass after each of ``repetitions`` finished workloads (the event
    folded, then the pass) and, with ``ledger``, of the pass after the ledger's ``Released``
    of it (what a dequeuer reads next on the log, R7); without, the second list is empty."""
    rng = random.Random(11)
    finish: list[float] = []
    released: list[float] = []
    running = list(admitted)
    for step in range(repetitions):
        victim = running.pop(rng.randrange(len(running)))
        now = Millis(2 + 2 * step)
        started = time.perf_counter()
        frees = engine.apply(WorkloadFinished(workload=victim), now)
        new = engine.decide(now)
        finish.append((time.perf_counter() - started) * 1000)
        running.extend(d.workload for d in new if isinstance(d, Admitted))
        if not ledger:
            continue
        now = Millis(now + 1)
        started = time.perf_counter()
        for decision in frees:
            engine.apply(decision, now)
        new = engine.decide(now)
        released.append((time.perf_counter() - started) * 1000)
        running.extend(d.workload for d in new if isinstance(d, Admitted))
    return finish, released


def p99(timings: list[float]) -> float:
    ordered = sorted(timings)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20k workloads, 50 repetitions")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)
    numbers = run(args.quick)
    if args.json:
        print(json.dumps(numbers, indent=2, sort_keys=True))
        return 0
    width = max(len(k) for k in numbers)
    for key, value in numbers.items():
        print(f"{key:<{width}}  {value:>14,.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
