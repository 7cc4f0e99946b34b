"""Fair share with memory (docs/admission-rules.md F1): decayed usage per weight, exactly.

What it does: where leaves compete beyond their guarantees (R3's borrowing tier), the engine
orders them by *decayed usage per weight* when a half-life is configured. Usage is U1's
allocation intervals (resource x time a workload held), each instant weighted by how long ago
it was: usage at ``t`` counts ``decay(now - t)``, halving every half-life. ``FairBook`` keeps,
per leaf, what closed intervals accrued (folded as they close, so the log alone gives it and
a snapshot carries it); ``decayed_usage`` adds the running work up to ``now``; ``fair_key``
turns a leaf's decayed usage into its interleave key: the largest, over resources, of decayed
usage / (root capacity x weight). ``fair_weight`` reads the ``usher.io/fair-weight`` tree
attribute (a positive integer, inherited down the tree, default 1); ``weight_errors`` refuses a
bad one (T1).

The arithmetic is exact (Fractions of integers), so the same log gives the same decisions on
any machine. The decay is a documented fixed-point form of ``2 ** -x``: ``exp2(x)`` is
``2 ** floor(x) * (1 + frac(x))`` -- exact at every whole half-life, linear in between (within
6.2 % of the real exponential), strictly increasing and continuous, with ``exp2(x + 1) ==
2 * exp2(x)`` exactly, so moving the reference point by whole half-lives changes nothing. Usage
at ``t`` seen at ``now`` weighs ``exp2(t / H) / exp2(now / H)``: exactly 1/2 one half-life
later, exactly 1/4 two half-lives later.

What it must never do: read a clock (``now`` is passed in), perform I/O, use a float, or decide
anything itself (the engine puts the key in its interleave; nothing here admits or evicts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final, NamedTuple

from schemas import FieldError, Millis, QuotaPath
from usher.core.quantity import hours, unit_of

FAIR_WEIGHT_ATTRIBUTE: Final = "usher.io/fair-weight"
DEFAULT_WEIGHT: Final = 1

FairKey = Fraction | int
"""A leaf's place in the borrowing tier (F1): 0 when fair share is off or the leaf is within
its guarantee, else its dominant decayed usage per weight (smaller goes first)."""


def exp2(x: Fraction) -> Fraction:
    """``2 ** x`` in the fixed-point form F1 documents: ``2 ** n * (1 + f)``, ``x = n + f``."""
    n = x.numerator // x.denominator
    return _pow2(n) * (1 + (x - n))


def exp2_integral(x: Fraction) -> Fraction:
    """An antiderivative of ``exp2``: ``2 ** n * (3/2 + f + f * f / 2)``; continuous at every
    integer (``f -> 1`` gives ``2 ** (n + 1) * 3/2``), so differences are exact integrals."""
    n = x.numerator // x.denominator
    f = x - n
    return _pow2(n) * (Fraction(3, 2) + f + f * f / 2)


def _pow2(n: int) -> Fraction:
    return Fraction(1 << n) if n >= 0 else Fraction(1, 1 << -n)


def anchor_of(at_ms: int, half_life_ms: int) -> int:
    """The whole half-life at or before ``at_ms``: the reference point amounts are kept
    against (small numbers; exact to move, ``exp2(x + 1) == 2 * exp2(x)``)."""
    return (at_ms // half_life_ms) * half_life_ms


def accrued(amount: int, start_ms: int, end_ms: int, anchor_ms: int, half_life_ms: int) -> Fraction:
    """``amount`` held over ``[start_ms, end_ms)``, each instant ``t`` weighed ``exp2((t -
    anchor) / H)``: the integral of the weight, in amount x ms."""
    if end_ms <= start_ms or amount == 0:
        return Fraction(0)
    h = half_life_ms
    upper = exp2_integral(Fraction(end_ms - anchor_ms, h))
    lower = exp2_integral(Fraction(start_ms - anchor_ms, h))
    return amount * h * (upper - lower)


def rebased(value: Fraction, from_ms: int, to_ms: int, half_life_ms: int) -> Fraction:
    """``value`` kept against anchor ``from_ms``, kept against ``to_ms`` (both whole
    half-lives): exact, ``exp2`` doubles per half-life."""
    steps = (to_ms - from_ms) // half_life_ms
    return value * _pow2(-steps)


class Running(NamedTuple):
    """An admitted workload's open interval: its leaf, what it holds, since when."""

    leaf: QuotaPath
    requests: Mapping[str, int]
    start_ms: int


@dataclass(slots=True)
class FairBook:
    """Per leaf, the decayed usage of its closed intervals, kept against a whole half-life.

    ``closed[leaf] = (anchor_ms, {resource: value})``: the value seen at ``anchor_ms`` is
    itself; at ``now`` it is ``value / exp2((now - anchor) / H)``. When a close falls in a later
    half-life the leaf's values move to the new anchor and are floored to whole amount x ms (a
    documented rounding of at most one unit x ms per half-life; it depends only on the log).
    """

    closed: dict[QuotaPath, tuple[int, dict[str, Fraction]]] = field(default_factory=dict)

    def close(
        self,
        leaf: QuotaPath,
        requests: Mapping[str, int],
        start_ms: int,
        end_ms: int,
        half_life_ms: int,
    ) -> None:
        """A workload of ``leaf`` stops holding ``requests`` at ``end_ms`` (U1's close)."""
        anchor = anchor_of(end_ms, half_life_ms)
        kept_anchor, values = self.closed.get(leaf, (anchor, {}))
        if kept_anchor != anchor:
            values = {
                resource: Fraction(int(rebased(value, kept_anchor, anchor, half_life_ms)))
                for resource, value in values.items()
            }
        else:
            values = dict(values)
        for resource in sorted(requests):
            add = accrued(requests[resource], start_ms, end_ms, anchor, half_life_ms)
            if add:
                values[resource] = values.get(resource, Fraction(0)) + add
        self.closed[leaf] = (anchor, values)

    def copy(self) -> FairBook:
        return FairBook(closed=dict(self.closed))


def decayed_usage(
    book: FairBook,
    leaf: QuotaPath,
    running: Iterable[Running],
    now: Millis,
    half_life_ms: int,
) -> dict[str, Fraction]:
    """``leaf``'s decayed usage at ``now`` per resource (amount x ms, as if held now): its
    closed intervals from the book, and ``running`` (its open ones) accrued up to ``now``."""
    anchor = anchor_of(now, half_life_ms)
    totals: dict[str, Fraction] = {}
    kept = book.closed.get(leaf)
    if kept is not None:
        for resource, value in kept[1].items():
            totals[resource] = rebased(value, kept[0], anchor, half_life_ms)
    for work in running:
        for resource in sorted(work.requests):
            add = accrued(work.requests[resource], work.start_ms, now, anchor, half_life_ms)
            totals[resource] = totals.get(resource, Fraction(0)) + add
    scale = exp2(Fraction(now - anchor, half_life_ms))
    return {resource: value / scale for resource, value in sorted(totals.items()) if value}


def fair_key(usage: Mapping[str, Fraction], capacity: Mapping[str, int], weight: int) -> Fraction:
    """The dominant decayed share per weight: max over resources of usage / (capacity x
    weight). A resource the root declares no capacity for is not compared (F1)."""
    best = Fraction(0)
    for resource in sorted(usage):
        total = capacity.get(resource, 0)
        if total > 0:
            best = max(best, usage[resource] / (total * weight))
    return best


def root_capacity(root_max: Mapping[str, int], root_min: Mapping[str, int]) -> dict[str, int]:
    """What decayed usage is measured against: the root's ``max`` per resource, else its
    ``min`` (the cluster the tree shares)."""
    capacity = dict(root_min)
    capacity.update(root_max)
    return capacity


def fair_weight(attributes: Mapping[str, str], inherited: int) -> int:
    """A node's fair-share weight: its ``usher.io/fair-weight``, else its parent's (a bad
    value was refused by ``weight_errors``; it is ignored here)."""
    text = attributes.get(FAIR_WEIGHT_ATTRIBUTE)
    if text is None or not _is_weight(text):
        return inherited
    return int(text)


def _is_weight(text: str) -> bool:
    return text.isascii() and text.isdigit() and 0 < int(text) <= 1_000_000


def weight_errors(attributes: Mapping[str, str], field_prefix: str) -> list[FieldError]:
    """Why a node's ``usher.io/fair-weight`` is refused (T1): it must be an integer 1..10^6."""
    text = attributes.get(FAIR_WEIGHT_ATTRIBUTE)
    if text is None or _is_weight(text):
        return []
    return [
        FieldError(
            path=f"{field_prefix}.{FAIR_WEIGHT_ATTRIBUTE}",
            code="invalid-attribute",
            message=f"{FAIR_WEIGHT_ATTRIBUTE} must be an integer from 1 to 1000000, got {text!r}",
        )
    ]


def format_usage(usage: Mapping[str, Fraction]) -> str:
    """Decayed usage for people (explain): ``12.500 CPU-hours`` (U1's units, floored to ms)."""
    if not usage:
        return "none"
    return ", ".join(
        f"{hours(resource, int(usage[resource]))} {unit_of(resource)[0]}-hours"
        for resource in sorted(usage)
    )
