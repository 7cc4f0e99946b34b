"""Pacing of side work on a service's event loop: how long to wait before doing it again.

What it does: turns the wanted period of a periodic side task (gauges, estimates) and what
its last run cost into the next period, so that the task takes at most a fixed share of the
loop however large the state it walks grows.
What it must never do: read a clock itself or sleep (callers measure and wait).
"""

from __future__ import annotations


def period_after(interval_s: float, took_s: float, share: float) -> float:
    """Seconds until the next run: ``interval_s``, or longer when the last run took
    ``took_s``, so that the task takes at most ``share`` of the loop (``took_s / share``)."""
    return max(interval_s, took_s / share)
