"""Scale of one dequeuer: the core bench at 1,000,000 pending workloads on 10,000 leaves.

What it does: the same tree and workload generators and the same measurements as
``bench.core`` (backlog admissions/s, the two passes a dequeuer runs for one finished
workload and the ``instant_release`` one, bytes kept per pending workload), ten times the
workloads and leaves, plus the peak resident memory. It runs in a process of its own, so
that the peak is this suite's and not that of the suites run before it in ``make bench``.
It takes a few minutes and about a gigabyte, so ``make bench`` runs it and
``make bench-quick`` does not.
What it must never do: pass or fail on a number (targets are reported by ``bench``), or run
anything but the pure core.

Run: ``python -m bench.scale [--quick]`` (prints the numbers as JSON).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys

from bench.core import measure


def run(quick: bool) -> dict[str, float]:
    """The numbers, measured by a new ``python -m bench.scale`` process."""
    argv = [sys.executable, "-m", "bench.scale", *(["--quick"] if quick else [])]
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    numbers: dict[str, float] = json.loads(done.stdout)
    return numbers


def measure_here(quick: bool) -> dict[str, float]:
    """1,000,000 pending on 100 departments x 100 leaves (quick: a tenth, for trying it)."""
    numbers = measure(
        count=100_000 if quick else 1_000_000,
        departments=100,
        leaves=100 if not quick else 10,
        repetitions=50 if quick else 200,
        traced=False,
    )
    # ru_maxrss is in KiB on Linux: this process at its peak.
    numbers["peak_resident_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return numbers


def main() -> int:
    print(json.dumps(measure_here("--quick" in sys.argv[1:]), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
