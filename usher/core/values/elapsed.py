"""How long something lasts or is still to wait, as people read it: one wording everywhere.

What it does: ``age_text`` words a number of seconds in the largest unit of which there are at
least two (``45s``, ``3m``, ``2h``, ``4d``: what ``usher jobs`` prints as AGE and the console as
waits); ``start_words`` words a pending job's estimated start from now on it (``now``,
``~12m (5m-20m)``, ``unknown``), the one wording of the CLI's START column, the live views, the
client's estimate and the console.
What it must never do: read a clock (the caller says what "now" is), or import anything beyond
the standard library (``usher jobs`` loads it at start).
"""

from __future__ import annotations

UNITS = (("d", 86400), ("h", 3600), ("m", 60))


def age_text(seconds: int) -> str:
    """``seconds`` (at least 0) in the largest unit of which there are at least two."""
    seconds = max(0, seconds)
    for unit, size in UNITS:
        if seconds >= size * 2:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def start_words(
    start_ms: int | None, early_ms: int | None, late_ms: int | None, now_ms: int
) -> str:
    """A pending job's estimated start (p50, p25, p75 in ms since the epoch) from ``now_ms``:
    ``now`` once even the late end has come, else ``~12m (5m-20m)``; ``unknown`` without
    times."""
    if start_ms is None or early_ms is None or late_ms is None:
        return "unknown"
    if late_ms <= now_ms:
        return "now"
    mid, early, late = (age_text((at - now_ms) // 1000) for at in (start_ms, early_ms, late_ms))
    return f"~{mid} ({early}-{late})"
