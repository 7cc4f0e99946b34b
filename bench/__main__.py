"""`make bench`: run every benchmark suite, print a table, write ``bench/results/<ts>.json``.

What it does: runs the suites in order (the pure core, then the services on NATS and
PostgreSQL), records the machine (cores, memory, Python) beside the numbers, and writes one
JSON file per run.
What it must never do: pass or fail on a number; targets are reported, not enforced.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"

# (suite, metric) -> (target, comparison); reported beside the number, never enforced.
TARGETS: dict[tuple[str, str], tuple[float, str]] = {
    ("core", "admissions_per_s"): (20_000, ">="),
    ("core", "finish_pass_median_ms"): (10, "<="),
    ("core", "bytes_per_pending_workload"): (2048, "<="),
    ("stack", "admissions_per_s"): (2_000, ">="),
    ("stack", "admissions_vs_publish"): (0.25, ">="),
}


def table(suites: dict[str, dict[str, float]]) -> str:
    """A plain-text table of every number, with its target and whether it is met."""
    lines = [f"{'suite':<6} {'metric':<28} {'value':>14}  {'target':<12} met"]
    for suite, numbers in suites.items():
        for metric, value in numbers.items():
            target = TARGETS.get((suite, metric))
            goal, met = "", ""
            if target is not None:
                bound, op = target
                goal = f"{op} {bound:,g}"
                met = "yes" if (value >= bound if op == ">=" else value <= bound) else "NO"
            lines.append(f"{suite:<6} {metric:<28} {value:>14,.2f}  {goal:<12} {met}")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    mem_kib = 0
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, about a minute")
    args = parser.parse_args(argv)

    from bench import core, stack

    started = datetime.now(UTC)
    suites: dict[str, dict[str, float]] = {"core": core.run(quick=args.quick)}
    suites["stack"] = stack.run(quick=args.quick)
    record = {
        "started_at": started.isoformat(),
        "command": "make bench-quick" if args.quick else "make bench",
        "machine": machine(),
        "suites": suites,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    print(table(suites))
    print(f"\nmachine: {record['machine']}")
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
