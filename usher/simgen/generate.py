"""The seeded generator of ``usher sim --generate``: a spec and a seed in, scenario data out.

What it does: ``generate`` draws, from one ``random.Random(seed)`` and in a fixed order (each
department in the spec's order: its arrival times, then each job's pods, cpu, memory, gpu,
runtime and priority class), the jobs a spec describes over its horizon, and writes them as
the scenario data ``usher sim`` reads (``usher.core.history.sim.load_scenario``): nodes, the quota
tree
(the spec's departments as the root's children, or the given tree), priority classes, one
``create`` with ``runSeconds`` per job, and ``until`` at the horizon. ``draw`` is one sample
of a distribution. The same spec and seed give the same data, byte for byte.
What it must never do: read a clock, the environment or a global random state (only the
``Random`` it makes from its random seed), perform I/O, or decide admission (the core plays the
scenario).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from fractions import Fraction

from usher.simgen.spec import GPU, Department, Distribution, GenSpec, Shape, tree_manifest

MILLICORES_PER_CORE = 1000
MIB_PER_GIB = 1024


def draw(distribution: Distribution, rng: random.Random) -> float:
    """One sample (``lognormal``: its ``mean`` is the distribution's mean, not mu)."""
    shape = distribution.shape
    if shape is Shape.FIXED:
        return distribution.value
    if shape is Shape.UNIFORM:
        return rng.uniform(distribution.low, distribution.high)
    if shape is Shape.EXPONENTIAL:
        return rng.expovariate(1 / distribution.mean)
    if shape is Shape.LOGNORMAL:
        mu = math.log(distribution.mean) - distribution.sigma**2 / 2
        return rng.lognormvariate(mu, distribution.sigma)
    return rng.choices(distribution.values, weights=distribution.weights)[0]


def draw_whole(distribution: Distribution, rng: random.Random, least: int) -> int:
    """A whole sample >= ``least`` (pods, GPUs): a uniform one is uniform over the integers
    in its range, any other is rounded."""
    if distribution.shape is Shape.UNIFORM:
        low, high = math.ceil(distribution.low), math.floor(distribution.high)
        if low <= high:
            return max(least, rng.randint(low, high))
    return max(least, round(draw(distribution, rng)))


@dataclass(frozen=True)
class Job:
    """One generated job."""

    at_ms: int
    department: int
    name: str
    namespace: str
    pods: int
    millicores: int
    mebibytes: int
    gpus: int
    run_ms: int
    priority_class: str | None


def arrivals(department: Department, horizon_s: float, rng: random.Random) -> list[int]:
    """Arrival times (ms, sorted) in ``[0, horizon)``: a Poisson stream at ``rate`` plus
    ``bursts.jobs`` at once every ``bursts.every`` seconds."""
    times: list[int] = []
    if department.rate > 0:
        at = rng.expovariate(department.rate)
        while at < horizon_s:
            times.append(round(at * 1000))
            at += rng.expovariate(department.rate)
    if department.bursts is not None:
        k = 1
        while k * department.bursts.every_s < horizon_s:
            times.extend([round(k * department.bursts.every_s * 1000)] * department.bursts.jobs)
            k += 1
    horizon_ms = round(horizon_s * 1000)
    return sorted(t for t in times if t < horizon_ms)


def _job(department: Department, index: int, number: int, at_ms: int, rng: random.Random) -> Job:
    pods = draw_whole(department.pods, rng, 1)
    cores = draw(department.cpu, rng)
    gib = draw(department.memory, rng)
    gpus = draw_whole(department.gpu, rng, 0)
    seconds = draw(department.runtime, rng)
    priority = None
    if department.priority:
        names = list(department.priority)
        priority = rng.choices(names, weights=[department.priority[n] for n in names])[0]
    return Job(
        at_ms=at_ms,
        department=index,
        name=f"{_slug(department.name)}-{number:05d}",
        namespace=department.namespace,
        pods=pods,
        millicores=max(1, round(cores * MILLICORES_PER_CORE)),
        mebibytes=max(1, round(gib * MIB_PER_GIB)),
        gpus=gpus,
        run_ms=max(1, round(seconds * 1000)),
        priority_class=priority,
    )


def _slug(name: str) -> str:
    """A department's name as the start of a Kubernetes job name."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-") or "job"


def jobs(spec: GenSpec, seed: int) -> list[Job]:
    """Every job the spec gives for ``seed``, in arrival order (ties: spec order, number)."""
    rng = random.Random(seed)
    out: list[Job] = []
    for index, department in enumerate(spec.departments):
        times = arrivals(department, spec.horizon_s, rng)
        out.extend(_job(department, index, n + 1, at, rng) for n, at in enumerate(times))
    return sorted(out, key=lambda j: (j.at_ms, j.department, j.name))


def _seconds(ms: int) -> int | float:
    """Milliseconds as the seconds a scenario writes: whole when whole."""
    return ms // 1000 if ms % 1000 == 0 else float(Fraction(ms, 1000))


def _manifest(job: Job) -> dict[str, object]:
    requests: dict[str, str] = {"cpu": f"{job.millicores}m", "memory": f"{job.mebibytes}Mi"}
    if job.gpus:
        requests[GPU] = str(job.gpus)
    pod: dict[str, object] = {
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests}}],
        "restartPolicy": "Never",
    }
    if job.priority_class is not None:
        pod = {"priorityClassName": job.priority_class, **pod}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job.name, "namespace": job.namespace},
        "spec": {
            "suspend": True,
            "parallelism": job.pods,
            "completions": job.pods,
            "template": {"spec": pod},
        },
    }


def generate(spec: GenSpec, seed: int) -> dict[str, object]:
    """The scenario data for ``seed``: what ``load_scenario`` reads."""
    objects: list[dict[str, object]] = [tree_manifest(spec)]
    objects.extend(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        for name, value in sorted(spec.priority_classes.items())
    )
    return {
        "name": spec.name,
        "description": f"generated by usher sim --generate with seed {seed}",
        "config": dict(spec.config),
        "nodes": [
            {"name": f"node-{n:03d}", "zone": "default", "allocatable": dict(spec.allocatable)}
            for n in range(1, spec.nodes + 1)
        ],
        "objects": objects,
        "timeline": [
            {
                "at": _seconds(job.at_ms),
                "create": _manifest(job),
                "runSeconds": _seconds(job.run_ms),
            }
            for job in jobs(spec, seed)
        ],
        "until": _seconds(round(spec.horizon_s * 1000)),
    }


__all__ = ["Job", "arrivals", "draw", "draw_whole", "generate", "jobs"]
