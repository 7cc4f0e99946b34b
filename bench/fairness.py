"""Fairness benchmark: fair share with memory (F1) and the starvation guard (N1), simulated.

What it does: generates two seeded workloads with the planning generator (``usher/simgen``)
and plays each through the pure core (``usher.core.history.sim``), with and without the rule:
1. *Shares*: three departments with equal guarantees and weights 1, 1 and 2 all ask for far
   more than the cluster has for two simulated hours; reported: each department's share of
   the cpu-seconds used, with fair share off and with a 10-minute half-life, against the
   share its weight asks for (1/4, 1/4, 1/2; the guarantees, 1/4 of the cluster each, are
   part of it).
2. *Starvation*: one department sends a stream of 1-core jobs with an occasional 16-core one
   under Round; reported: the longest wait of a 16-core job without the guard and with
   ``usher.io/starvation-seconds: 300``, and the number of them still waiting at the end.
The scenarios are simulated time (seconds of it take milliseconds), so this suite measures
decisions, not speed.
What it must never do: pass or fail on a number; it reports.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from schemas import Admitted, WorkloadObserved
from usher.core.history import planning
from usher.core.history import sim as simulator
from usher.simgen.generate import generate
from usher.simgen.spec import load_spec

WEIGHTS = {"alpha": 1, "beta": 1, "gamma": 2}
HALF_LIFE_S = 600
STARVATION_S = 300
LARGE_CPU = 16


def shares_spec(horizon_s: int) -> dict[str, Any]:
    """Three departments of equal guarantees that each want the whole cluster."""
    department = {
        "min": {"cpu": "16", "memory": "64Gi"},
        "max": {"cpu": "64", "memory": "256Gi"},
        "arrivals": {"rate": 0.2},
        "cpu": {"dist": "choice", "values": [1, 2, 4], "weights": [2, 2, 1]},
        "memory": 1,
        "runtime": {"dist": "exponential", "mean": 300},
    }
    return {
        "name": "fair-shares",
        "seed": 11,
        "horizon": horizon_s,
        "config": {"policy": "Round"},
        "cluster": {"nodes": 4, "allocatable": {"cpu": "16", "memory": "64Gi"}},
        "departments": [{"name": name, **department} for name in WEIGHTS],
    }


def starvation_spec(horizon_s: int) -> dict[str, Any]:
    """One department: a stream of 1-core jobs, now and then a 16-core one, on 16 cores; about
    three quarters of the cores are asked for on average, so only skip-ahead starves the large."""
    return {
        "name": "large-head",
        "seed": 5,
        "horizon": horizon_s,
        "config": {"policy": "Round"},
        "cluster": {"nodes": 1, "allocatable": {"cpu": "16", "memory": "64Gi"}},
        "departments": [
            {
                "name": "batch",
                "min": {"cpu": "16", "memory": "64Gi"},
                "max": {"cpu": "16", "memory": "64Gi"},
                "arrivals": {"rate": 0.15},
                "cpu": {"dist": "choice", "values": [1, LARGE_CPU], "weights": [40, 1]},
                "memory": 1,
                "runtime": {"dist": "exponential", "mean": 60},
            }
        ],
    }


def _scenario(spec_data: dict[str, Any], attributes: dict[str, str], config: dict[str, Any]) -> Any:
    """The generated scenario with ``attributes`` on the named departments' nodes (or all)."""
    spec = load_spec(spec_data, spec_data["name"])
    data = generate(spec, spec.seed)
    data["config"] = {**data["config"], **config}  # type: ignore[dict-item]
    objects: list[dict[str, Any]] = data["objects"]  # type: ignore[assignment]
    root = objects[0]["spec"]["root"]
    for child in root.get("children", []):
        extra = {k: v for k, v in attributes.items() if not k.startswith("weight:")}
        weight = attributes.get(f"weight:{child['name']}")
        if weight is not None:
            extra["usher.io/fair-weight"] = weight
        if extra:
            child["attributes"] = {**child.get("attributes", {}), **extra}
    return simulator.load_scenario(data, spec_data["name"])


def used_shares(scenario: Any) -> dict[str, float]:
    """Each department's share of all the cpu-seconds admitted work used (F1 divides decayed
    usage by weight, guarantees included, so that is the share a weight asks for)."""
    result = simulator.run(scenario)
    report = planning.planning_report(simulator.planning_record(result))
    used: dict[str, float] = {}
    for row in report.departments:
        cpu = next(r for r in row.resources if r.resource == "cpu")
        used[row.department.rsplit("/", 1)[-1]] = float(cpu.used)
    total = sum(used.values()) or 1.0
    return {name: value / total for name, value in used.items()}


def large_waits(scenario: Any) -> tuple[float, int, int]:
    """The longest wait of a large job (s; to the end for one never admitted), how many were
    created, and how many never started."""
    result = simulator.run(scenario)
    arrived: dict[str, int] = {}
    for step in scenario.steps:
        event = step.event
        if isinstance(event, WorkloadObserved) and _cpu(event) >= LARGE_CPU * 1000:
            arrived[str(event.workload)] = step.at_ms
    started: dict[str, int] = {}
    for record in result.decisions:
        decision = record.decision
        if isinstance(decision, Admitted) and str(decision.workload) in arrived:
            started.setdefault(str(decision.workload), record.at_ms)
    end = scenario.until_ms or max(arrived.values(), default=0)
    waits = [(started.get(k, end) - at) / 1000 for k, at in arrived.items()]
    return max(waits, default=0.0), len(arrived), len(arrived) - len(started)


def _cpu(event: WorkloadObserved) -> int:
    return sum(p.count * p.requests.get("cpu", 0) for p in event.pod_sets)


def run(quick: bool) -> dict[str, float]:
    horizon = 1800 if quick else 7200
    numbers: dict[str, float] = {}
    weights = {f"weight:{name}": str(weight) for name, weight in WEIGHTS.items()}
    total_weight = sum(WEIGHTS.values())
    off = used_shares(_scenario(shares_spec(horizon), weights, {}))
    on = used_shares(_scenario(shares_spec(horizon), weights, {"halfLifeSeconds": HALF_LIFE_S}))
    for name, weight in WEIGHTS.items():
        numbers[f"share_{name}_weight"] = weight / total_weight
        numbers[f"share_{name}_off"] = off.get(name, 0.0)
        numbers[f"share_{name}_half_life_{HALF_LIFE_S}s"] = on.get(name, 0.0)
    unguarded = large_waits(_scenario(starvation_spec(horizon), {}, {}))
    guard = {"usher.io/starvation-seconds": str(STARVATION_S)}
    guarded = large_waits(_scenario(starvation_spec(horizon), guard, {}))
    numbers["large_jobs"] = float(unguarded[1])
    numbers["large_wait_max_s_unguarded"] = unguarded[0]
    numbers["large_never_started_unguarded"] = float(unguarded[2])
    numbers[f"large_wait_max_s_guard_{STARVATION_S}s"] = guarded[0]
    numbers[f"large_never_started_guard_{STARVATION_S}s"] = float(guarded[2])
    return numbers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.quick), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
