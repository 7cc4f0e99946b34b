"""`make bench`: run every benchmark suite, print a table, write ``bench/results/<ts>.json``.

What it does: runs the suites in order -- ``core`` (the pure decision core), ``cli`` (how long
``usher --version``, ``usher jobs`` and ``usher queues`` take to answer), ``console`` (a
web console queue page with 10,000 pending jobs, on the server and in Chromium), ``limits`` (what
this machine's NATS JetStream and PostgreSQL can do without Usher), ``publish`` (the watcher's
CPU per observation it publishes, in-process against a real server), ``stack`` (job events on
the log -> committed decisions, services as processes), ``replay`` (rebuilding a service from
the log, with and without a snapshot), ``kueue`` (Kueue's scheduler baseline through the whole
stack, emulator and fake kubelet included), ``scale`` (the core at 1,000,000 pending on
10,000 leaves; not with ``--quick``), ``zones`` (ten zone dequeuers' batches racing on one
ledger with borrowing: admissions/s, round trips, over-commit), ``fairness`` (fair share's
shares against weights and the longest wait of a large job with and without the starvation
guard, simulated) -- each with
fresh servers of its own; derives the
numbers that compare suites (the stack's admission rate against the limits suite's pipelined
publish rate); records the machine (cores, memory, Python), each suite's duration and notes
beside the numbers, and writes one JSON file per run. ``--quick`` runs smaller sizes (the
whole run in a minute or two); ``--suites`` picks some. ``--profile`` samples every process of
the ``kueue`` and ``stack`` suites with py-spy (``bench/profile.py``; top frames per process
under ``profiles``); ``--headroom`` runs those two suites again on one core and puts the two
runs side by side (``bench/headroom.py``; under ``headroom``); ``--kueue-parents N`` plays the
Kueue baseline on N of its 5 cohorts (same arrivals per leaf, a smaller machine load).
What it must never do: pass or fail on a number; targets are reported, not enforced. A suite
that breaks is reported (its error in the file) and the others still run; only then is the
exit code 1.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.headroom import SUITES as HEADROOM_SUITES
from bench.headroom import compare, one_core
from bench.headroom import render as render_headroom
from bench.profile import RATE, Profiler
from bench.profile import render as render_profiles

RESULTS = Path(__file__).parent / "results"

# (suite, metric) -> (target, comparison); reported beside the number, never enforced.
TARGETS: dict[tuple[str, str], tuple[float, str]] = {
    ("core", "admissions_per_s"): (50_000, ">="),
    ("core", "finish_pass_median_ms"): (1, "<="),
    ("core", "released_pass_median_ms"): (1, "<="),
    ("core", "instant_release_finish_pass_median_ms"): (0.5, "<="),
    ("core", "bytes_per_pending_workload"): (700, "<="),
    ("scale", "admissions_per_s"): (30_000, ">="),
    ("scale", "finish_pass_median_ms"): (2, "<="),
    ("scale", "released_pass_median_ms"): (2, "<="),
    ("scale", "peak_resident_mb"): (1024, "<="),
    **{("zones", f"over_commit_{seen}"): (0, "<=") for seen in ("samples", "nodes_swept", "end")},
    ("stack", "admissions_per_s"): (2_000, ">="),
    ("stack", "admissions_vs_publish"): (0.25, ">="),
    ("stack", "admissions_vs_limits_publish"): (0.25, ">="),
    ("stack", "latency_500_p99_ms"): (50, "<="),
    ("replay", "replay_vs_raw_read"): (0.8, ">="),
    ("replay", "restart_with_snapshot_s"): (1, "<="),
    ("kueue", "cpu_ms_per_job"): (5, "<="),
    ("kueue", "wall_vs_ideal"): (1.25, "<="),
    ("kueue", "speedup_small"): (10, ">="),
    ("kueue", "speedup_medium"): (10, ">="),
    ("kueue", "speedup_large"): (10, ">="),
    ("kueue", "history_violations"): (0, "<="),
    ("cli", "version_s"): (0.3, "<="),
    ("cli", "jobs_s"): (0.3, "<="),
    ("cli", "queues_s"): (0.3, "<="),
    **{
        ("cli", f"{command}_{size}_cpu_s"): (0.3, "<=")
        for command in ("jobs", "queue", "explain")
        for size in ("1k", "100k")
    },
    ("console", "queue_page_server_ms"): (1000, "<="),
    ("console", "queue_page_browser_ms"): (1000, "<="),
}

SUITES = (
    "core",
    "cli",
    "console",
    "limits",
    "publish",
    "stack",
    "replay",
    "kueue",
    "scale",
    "zones",
    "fairness",
)
"""Run order; ``replay`` only when ``bench/replay.py`` is present."""

SKIPPED_WHEN_QUICK = ("scale",)
"""Suites whose size is the point: ``make bench`` runs them, ``make bench-quick`` does not."""


def available() -> list[str]:
    """The suites this checkout has (every module but ``replay`` is always there)."""
    return [s for s in SUITES if s != "replay" or importlib.util.find_spec("bench.replay")]


PROFILED = ("kueue", "stack")
"""Suites whose ``run`` takes a ``profiler`` (``--profile``)."""


def runner(suite: str) -> Callable[..., dict[str, float]]:
    """The suite's ``run(quick=...)``."""
    module = importlib.import_module(f"bench.{suite}")
    run: Callable[..., dict[str, float]] = module.run
    return run


def derive(suites: dict[str, dict[str, float]]) -> None:
    """Numbers that compare suites, added to the suite they describe."""
    stack, limits = suites.get("stack"), suites.get("limits")
    if stack and limits and limits.get("js_publish_pipelined_per_s"):
        stack["admissions_vs_limits_publish"] = (
            stack["admissions_per_s"] / limits["js_publish_pipelined_per_s"]
        )


def met(value: float, bound: float, op: str) -> bool:
    """Whether ``value`` meets the target (NaN never does)."""
    if math.isnan(value):
        return False
    return value >= bound if op == ">=" else value <= bound


def table(suites: dict[str, dict[str, float]]) -> str:
    """A plain-text table of every number, with its target and whether it is met."""
    suite_w = max([5, *(len(s) for s in suites)])
    metric_w = max([6, *(len(m) for numbers in suites.values() for m in numbers)])
    lines = [f"{'suite':<{suite_w}} {'metric':<{metric_w}} {'value':>14}  {'target':<12} met"]
    for suite, numbers in suites.items():
        for metric, value in numbers.items():
            target = TARGETS.get((suite, metric))
            goal, ok = "", ""
            if target is not None:
                bound, op = target
                goal = f"{op} {bound:,g}"
                ok = "yes" if met(value, bound, op) else "NO"
            lines.append(
                f"{suite:<{suite_w}} {metric:<{metric_w}} {value:>14,.2f}  {goal:<12} {ok}"
            )
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
        "load_average_at_start": list(os.getloadavg()),
    }


def notes(chosen: list[str], quick: bool, kueue_parents: int | None = None) -> dict[str, str]:
    """What some suites' numbers mean beyond their names."""
    out: dict[str, str] = {}
    for suite in ("core", "scale"):
        if suite in chosen:
            out[suite] = (
                "finish_pass_* and released_pass_*: the engine as a dequeuer runs it (R7), the"
                " pass after a finished workload (its usage still counts) and the pass after"
                " the ledger's Released of it; instant_release_finish_pass_*: the pass after a"
                " finish with EngineConfig(instant_release=True), as scenarios run it (the"
                " figure of rounds one and two)"
            )
    if "kueue" in chosen:
        from bench import kueue

        out["kueue"] = kueue.notes(quick, kueue_parents)
    if "fairness" in chosen:
        out["fairness"] = (
            "simulated (usher.core.history.sim on usher/simgen workloads): share_* are each"
            " department's"
            " share of the cpu-seconds used (weights 1, 1, 2) with fair share off and on;"
            " large_* the longest wait of a 16-core job among 1-core ones under Round, without"
            " and with usher.io/starvation-seconds (to the end for one never started)"
        )
    if "cli" in chosen:
        out["cli"] = (
            "each command a new process of the usher console script, median of runs; *_s wall"
            " seconds (a person's wait), *_cpu_s user+system (not inflated by a busy machine);"
            " jobs/queues read a log of a tree and 200 pending jobs on a fresh NATS;"
            " <command>_1k/_100k_cpu_s: jobs, queue Q and explain J on logs of 1,000 and"
            " 100,000 events (jobs observed and deleted again, the same 200 pending)"
        )
    if "console" in chosen:
        out["console"] = (
            "one queue of the demo tree with pending_jobs jobs; server_ms: the answer when the"
            " state is new (queue order and every pending job's reason worked out again),"
            " cached_ms: the state unchanged; browser_ms: headless Chromium from asking for"
            " the page to its load event (NaN without /usr/bin/chromium); medians"
        )
    if "limits" in chosen:
        out["limits"] = (
            "fresh embedded NATS (default sync) and PostgreSQL (durable, fsync on);"
            " no Usher service runs"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, a minute or two")
    parser.add_argument(
        "--suites",
        default=None,
        help=f"comma-separated, in any order (default: all of {', '.join(available())};"
        " with --quick all but scale)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy on every process of the kueue and stack suites (pip install -e '.[bench]')",
    )
    parser.add_argument(
        "--profile-raw",
        type=Path,
        default=None,
        metavar="DIR",
        help="with --profile: keep each process's raw py-spy stacks in DIR/<suite>/",
    )
    parser.add_argument(
        "--profile-rate",
        type=int,
        default=RATE,
        metavar="HZ",
        help=f"with --profile: samples per second per process (default {RATE})",
    )
    parser.add_argument(
        "--headroom",
        action="store_true",
        help="run the kueue and stack suites again pinned to one core, side by side",
    )
    parser.add_argument(
        "--kueue-parents",
        type=int,
        choices=range(1, 6),
        default=None,
        metavar="N",
        help="the Kueue baseline on N of its 5 cohorts (default 5; --quick: 1 at a fifth)",
    )
    args = parser.parse_args(argv)
    default = [s for s in available() if not (args.quick and s in SKIPPED_WHEN_QUICK)]
    listed = args.suites.split(",") if args.suites is not None else default
    wanted = [s.strip() for s in listed if s.strip()]
    unknown = [s for s in wanted if s not in available()]
    if unknown:
        parser.error(f"unknown suites: {', '.join(unknown)}")
    chosen = [s for s in available() if s in wanted]

    started = datetime.now(UTC)
    began = time.monotonic()
    measured_on = machine()  # the load average before the suites add theirs
    suites: dict[str, dict[str, float]] = {}
    durations: dict[str, float] = {}
    errors: dict[str, str] = {}
    profilers: dict[str, Profiler] = {}
    for suite in chosen:
        at = time.monotonic()
        suites[suite] = attempt(suite, options(suite, args, profilers), errors)
        durations[suite] = time.monotonic() - at
    headroom: dict[str, Any] = {}
    for suite in (s for s in chosen if args.headroom and s in HEADROOM_SUITES):
        at = time.monotonic()
        with one_core() as pinned:
            cut = attempt(
                suite,
                options(suite, args, profilers, f"{suite}_one_core"),
                errors,
                f"{suite} (one core)",
            )
        headroom.setdefault("cut", pinned)
        headroom.setdefault("suites", {})[suite] = cut
        headroom.setdefault("compared", {})[suite] = compare(suite, suites[suite], cut)
        durations[f"{suite}_one_core"] = time.monotonic() - at
    suites = {suite: numbers for suite, numbers in suites.items() if numbers}
    profiles = {suite: profiler.report() for suite, profiler in profilers.items()}
    derive(suites)
    durations["total"] = time.monotonic() - began
    remarks = notes(chosen, args.quick, args.kueue_parents)
    if profilers:
        remarks["profiles"] = PROFILE_NOTE
    if headroom:
        remarks["headroom"] = HEADROOM_NOTE
    record = {
        "started_at": started.isoformat(),
        "command": "make bench-quick" if args.quick else "make bench",
        "argv": list(argv if argv is not None else sys.argv[1:]),
        "machine": {**measured_on, "load_average_at_end": list(os.getloadavg())},
        "suites": suites,
        "targets": {
            f"{suite}.{metric}": {
                "target": bound,
                "op": op,
                "met": met(suites[suite][metric], bound, op),
            }
            for (suite, metric), (bound, op) in TARGETS.items()
            if metric in suites.get(suite, {})
        },
        "durations_s": durations,
        "notes": remarks,
        "errors": errors,
    }
    if args.profile:
        record["profiles"] = profiles
    if args.headroom:
        record["headroom"] = headroom
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    # NaN is not JSON: a number that could not be measured is written as null.
    path.write_text(json.dumps(_finite(record), indent=2, sort_keys=True) + "\n")
    print(table(suites))
    for suite, found in profiles.items():
        print(f"\nprofile ({suite}, {found['command']}):\n{render_profiles(found['processes'])}")
    if headroom.get("compared"):
        print("\n" + render_headroom(headroom["compared"], headroom["cut"]["method"]))
    for suite, note in remarks.items():
        print(f"note ({suite}): {note}")
    print("durations: " + ", ".join(f"{k} {v:,.1f} s" for k, v in durations.items()))
    print(f"\nmachine: {record['machine']}")
    print(f"results written to {path}")
    if errors:
        print(f"suites that failed: {', '.join(errors)}", file=sys.stderr)
        return 1
    return 0


PROFILE_NOTE = (
    "profiles.<suite>.processes.<process>: cpu_s from /proc over the sampled span; samples and"
    " top (15 frames by self_pct) from py-spy --nonblocking: self_pct = share of the process's"
    " samples with the frame innermost, total_pct = anywhere on the stack; a sample is a thread"
    " py-spy did not see idle, so EpollSelector.select is the event loop waiting and, on a busy"
    " machine, time runnable but not running counts too; sampler_cpu_s: py-spy's own CPU"
)
HEADROOM_NOTE = (
    "headroom: the kueue and stack suites run a second time with the bench process pinned to one"
    " core before it starts anything (every server, service and the client inherit the pin);"
    " compared.<suite>.<figure>: normal, cut and cut / normal; suites.<suite>: the cut run;"
    " with --profile both runs are sampled (profiles.<suite>_one_core: the cut run)"
)


def options(
    suite: str, args: argparse.Namespace, profilers: dict[str, Profiler], run: str | None = None
) -> dict[str, Any]:
    """The keyword arguments of ``suite``'s ``run``: ``quick``, its size and, with
    ``--profile``, a profiler (kept in ``profilers[run]``, ``run`` defaulting to the suite:
    the headroom run is profiled too, so that the two runs it compares bear the same cost)."""
    out: dict[str, Any] = {"quick": args.quick}
    if suite == "kueue" and args.kueue_parents is not None:
        out["parents"] = args.kueue_parents
    if args.profile and suite in PROFILED:
        key = run or suite
        keep = args.profile_raw / key if args.profile_raw is not None else None
        out["profiler"] = profilers[key] = Profiler(rate=args.profile_rate, keep=keep)
    return out


def attempt(
    suite: str, kwargs: dict[str, Any], errors: dict[str, str], label: str | None = None
) -> dict[str, float]:
    """Run one suite; a failure is recorded in ``errors`` under ``label`` (and {} returned)."""
    try:
        return runner(suite)(**kwargs)
    except Exception:
        errors[label or suite] = traceback.format_exc()
        print(f"suite {label or suite} failed:\n{errors[label or suite]}", file=sys.stderr)
        return {}


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
