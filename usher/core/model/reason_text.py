"""The sentence pieces reasons share: ``6 used + 4 requested > max 8``, ``max 100 x 1.5``,
``root/gpu-team nvidia.com/gpu in zone a100``; one wording each, so a text reads the same
wherever it is built (the reasons of ``usher.core.model.reasons``, the per-zone caps of
``usher.core.tree.zone_quota``, reclaim refusals, ``explain``).

What it does: formats amounts in canonical Kubernetes notation into these pieces, and restates
a reason with another sentence.
What it must never do: decide anything, or change a piece's wording (every reason text built
from it is pinned by tests and by the simulations).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import msgspec

from schemas import QuotaPath, Reason, Zone
from usher.core.model.config import format_rate
from usher.core.model.quantity import format_quantity


def requested_over(resource: str, requested: int, limit: str) -> str:
    """``4 requested > max 8``: a request of ``resource`` above ``limit`` (already worded:
    ``max 8``, ``min 4``, ``8``)."""
    return f"{format_quantity(resource, requested)} requested > {limit}"


def used_and_requested_over(resource: str, used: int, requested: int, limit: str) -> str:
    """``6 used + 4 requested > max 8``: what is used of ``resource`` and what is asked
    together exceed ``limit`` (already worded)."""
    return f"{format_quantity(resource, used)} used + {requested_over(resource, requested, limit)}"


def used_over(resource: str, used: int, limit: str) -> str:
    """``6 used > min 4``: what is used of ``resource`` is above ``limit`` (already worded)."""
    return f"{format_quantity(resource, used)} used > {limit}"


def bound(word: str, resource: str, amount: int) -> str:
    """A named limit of ``resource``: ``max 8``, ``min 4``."""
    return f"{word} {format_quantity(resource, amount)}"


def oversold_max(resource: str, maximum: int, rate: Fraction) -> str:
    """A node's cap as R2 words it: ``max 100 x 1.5``."""
    return f"{bound('max', resource, maximum)} x {format_rate(rate)}"


def in_zone(node: QuotaPath, resource: str, zone: Zone) -> str:
    """Where a per-zone amount is counted: ``root/gpu-team nvidia.com/gpu in zone a100``."""
    return f"{node} {resource} in zone {zone}"


def reworded(reason: Reason, message: str) -> Reason:
    """The same finding (code and numbers kept) told with another sentence."""
    return msgspec.structs.replace(reason, message=message)


def amounts(request: Sequence[tuple[str, int]]) -> str:
    """``8 nvidia.com/gpu`` for one resource, ``(4 cpu, 8 nvidia.com/gpu)`` for several."""
    parts = [f"{format_quantity(resource, amount)} {resource}" for resource, amount in request]
    return parts[0] if len(parts) == 1 else f"({', '.join(parts)})"
