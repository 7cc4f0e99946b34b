"""``python -m bench --headroom``: the Kueue and stack suites again with half the machine.

What it does: runs a suite a second time with this process pinned to one core
(``os.sched_setaffinity``); every server, service, the emulator and the client start after the
pin and inherit it, so the whole stack shares one core. Pinning rather than a CPU hog beside
the stack: the cut is the same on every run (one core, whatever else the machine does), it
needs no extra process to start and stop, and a hog's share of the core would depend on the
kernel's scheduler and on the other load on a shared machine, so the cut would change from run
to run. Then it puts the two runs side by side: per figure that matters under load (waits,
wall / ideal, p99, throughput, CPU per job), the normal value, the cut value and their ratio.
What it must never do: leave the pin on (the affinity is restored however the suite ends),
or pass or fail on a number.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Mapping
from typing import Any

SUITES = ("kueue", "stack")
"""The suites ``--headroom`` runs a second time."""

FIGURES: dict[str, tuple[str, ...]] = {
    "kueue": (
        "wall_vs_ideal",
        "tta_large_mean_s",
        "tta_medium_mean_s",
        "tta_small_mean_s",
        "speedup_large",
        "speedup_medium",
        "speedup_small",
        "throughput_jobs_per_s",
        "cpu_ms_per_job",
        "cpu_cores_busy",
        "history_violations",
    ),
    "stack": (
        "admissions_per_s",
        "latency_p50_ms",
        "latency_p99_ms",
        "latency_500_p50_ms",
        "latency_500_p99_ms",
        "cpu_cores_busy",
    ),
}
"""Per suite, the figures compared (in this order); any other number is in the cut run's copy.
``cpu_cores_busy`` says whether the cut was one: on a machine others load, the stack may get
no more than a core without the pin."""


def compare(
    suite: str, normal: Mapping[str, float], cut: Mapping[str, float]
) -> dict[str, dict[str, float]]:
    """Per figure of ``FIGURES[suite]`` present in both runs: normal, cut and cut / normal
    (NaN when the normal value is 0 or either is NaN)."""
    out: dict[str, dict[str, float]] = {}
    for figure in FIGURES.get(suite, ()):
        if figure not in normal or figure not in cut:
            continue
        before, after = normal[figure], cut[figure]
        ratio = after / before if before and not math.isnan(before) else math.nan
        out[figure] = {"normal": before, "cut": after, "ratio": ratio}
    return out


def render(comparisons: Mapping[str, Mapping[str, Mapping[str, float]]], cut: str) -> str:
    """The comparisons as a table: suite, figure, normal, cut, ratio."""
    lines = [f"headroom ({cut}): figure / normal / cut / cut / normal"]
    for suite, figures in comparisons.items():
        for figure, row in figures.items():
            lines.append(
                f"{suite:<6} {figure:<24} {row['normal']:>12,.2f} {row['cut']:>12,.2f}"
                f" {row['ratio']:>8,.2f}x"
            )
    return "\n".join(lines)


@contextlib.contextmanager
def one_core() -> Iterator[dict[str, Any]]:
    """Pin this process (and so everything it starts) to the lowest core it may run on;
    yields what was done, for the results file."""
    before = os.sched_getaffinity(0)
    core = min(before)
    os.sched_setaffinity(0, {core})
    try:
        yield {
            "method": "os.sched_setaffinity: this process and all it starts on one core",
            "core": core,
            "cores_before": sorted(before),
        }
    finally:
        os.sched_setaffinity(0, before)
