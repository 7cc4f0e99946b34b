"""How long ago something happened, as ``usher jobs`` prints AGE and the console shows waits.

What it does: one short human form of an elapsed time (``45s``, ``3m``, ``2h``, ``4d``), the
same everywhere people read it. What it must never do: read the clock itself (the caller says
what "now" is) or import anything beyond the standard library.
"""

from __future__ import annotations

from datetime import datetime


def age(since: datetime | None, now: datetime) -> str:
    """``now - since`` in the largest unit of which there are at least two; ``-`` if unknown."""
    if since is None:
        return "-"
    seconds = max(0, int((now - since).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * 2:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
