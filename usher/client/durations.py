"""How long ago something happened and when a pending job likely starts, as people read it.

What it does: one short human form of an elapsed time (``45s``, ``3m``, ``2h``, ``4d``: ``age``,
as ``usher jobs`` prints AGE and the console shows waits), and on it the one wording of a
pending job's estimated start (``estimated_start``: ``~12m (5m-20m)``, ``now`` or ``unknown``,
as ``usher jobs --start`` prints START and the live views show it), the same everywhere people
read them.
What it must never do: read the clock itself (the caller says what "now" is), word anything
itself (``usher.core.values.elapsed`` does, for the estimate too), or import anything beyond
the standard library and that module when it runs (the estimate's type is only named for the
checker: ``usher jobs`` starts without importing the core's engine).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from usher.core.values.elapsed import age_text

if TYPE_CHECKING:
    from usher.core.history.estimate import Estimate


def age(since: datetime | None, now: datetime) -> str:
    """``now - since`` in the largest unit of which there are at least two; ``-`` if unknown."""
    if since is None:
        return "-"
    return age_text(int((now - since).total_seconds()))


def estimated_start(estimate: Estimate | None, now: datetime, *, why: bool = False) -> str:
    """A pending job's estimated start from ``now``: ``now``, ``~12m (5m-20m)`` (p50, with
    p25-p75) or ``unknown``; ``-`` for a job that does not wait (the estimate's own words,
    ``Estimate.words``).

    With ``why`` an unknown start is given with its reason, as the estimate words it
    (``unknown: 2 runs have ended on the log, 3 are needed``): where there is room for it
    (the live views), not in ``usher jobs``' column."""
    if estimate is None:
        return "-"
    return estimate.words(int(now.timestamp() * 1000), why=why)
