"""Fair share with memory (docs/admission-rules.md F1): decayed usage per weight, exactly.

What it does: where leaves compete beyond their guarantees (R3's borrowing tier), the engine
orders them by *decayed usage per weight* when a half-life is configured. Usage is U1's
allocation intervals (resource x time a workload held), each instant weighted by how long ago
it was: usage at ``t`` seen at ``now`` counts ``decay(now - t) = 2 ** (-(now - t) / H)``.
``FairBook`` keeps, per leaf, the decayed usage of its closed intervals as of the last close
(folded as they close, so the log alone gives it and a snapshot carries it);
``decayed_usage`` adds the running work up to ``now``; ``fair_key`` turns a leaf's decayed
usage into its interleave key: the largest, over resources, of decayed usage / (root capacity
x weight). ``fair_weight`` reads the ``usher.io/fair-weight`` tree attribute (a whole number,
inherited down the tree, default 1); ``weight_errors`` refuses a bad one (T1).

The arithmetic is a documented fixed precision: decimal floating point of 34 significant
digits (IEEE 754 decimal128's), every operation through one explicit ``decimal.Context`` (never
the thread's), round-half-even. The General Decimal Arithmetic specification makes each
operation, ``exp`` and ``ln`` included, correctly rounded, so the same log gives the same
numbers on any machine and Python version; and since rounding is monotone, decayed usage only
falls while nothing runs and moves monotonically toward its steady state while the same work
runs. Whole half-lives are exact powers of two (``decay(2 H) == 1/4``).

What it must never do: read a clock (``now`` is passed in), perform I/O, use a binary float or
the thread's decimal context, or decide anything itself (the engine puts the key in its
interleave; nothing here admits or evicts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Context, Decimal, DivisionByZero, InvalidOperation, Overflow
from typing import Final, NamedTuple

from schemas import Millis, QuotaPath
from usher.core.model.quantity import MS_PER_HOUR, hours, unit_of
from usher.core.values import registry
from usher.core.values.registry import FAIR_WEIGHT

FAIR_WEIGHT_ATTRIBUTE: Final = FAIR_WEIGHT.key
DEFAULT_WEIGHT: Final = 1
MAX_WEIGHT: Final = registry.MAX_WEIGHT

ARITHMETIC: Final = Context(
    prec=34,
    rounding="ROUND_HALF_EVEN",
    Emin=-999_999,
    Emax=999_999,
    capitals=1,
    clamp=0,
    flags=[],
    traps=[InvalidOperation, DivisionByZero, Overflow],
)
"""The one context every F1 operation goes through (decimal128's precision)."""

ZERO: Final = Decimal(0)
ONE: Final = Decimal(1)
LN2: Final = Decimal(2).ln(ARITHMETIC)

FairKey = Decimal | int
"""A leaf's element of the interleave key (F1): 0 when fair share is off or the leaf is within
its guarantee, else its dominant decayed usage per weight (smaller goes first)."""


def decay(elapsed_ms: int, half_life_ms: int) -> Decimal:
    """``2 ** (-elapsed / H)``: whole half-lives as an exact power of two, the rest by ``exp``
    (correctly rounded); non-increasing in ``elapsed``, 1 at 0."""
    if elapsed_ms <= 0:
        return ONE
    whole, rest = divmod(elapsed_ms, half_life_ms)
    c = ARITHMETIC
    part = c.exp(c.minus(c.divide(c.multiply(LN2, Decimal(rest)), Decimal(half_life_ms))))
    return c.multiply(c.power(Decimal(2), -whole), part)


def time_constant(half_life_ms: int) -> Decimal:
    """``H / ln 2`` in ms: a constant amount held forever tends to amount x this."""
    return ARITHMETIC.divide(Decimal(half_life_ms), LN2)


def relaxed(value: Decimal, steady: Decimal, elapsed_ms: int, half_life_ms: int) -> Decimal:
    """Decayed usage ``elapsed`` after it was ``value`` while work whose steady state is
    ``steady`` ran throughout: ``steady + (value - steady) x decay`` (never below 0)."""
    c = ARITHMETIC
    moved = c.add(steady, c.multiply(c.subtract(value, steady), decay(elapsed_ms, half_life_ms)))
    return max(moved, ZERO)


def accrued(amount: int, start_ms: int, end_ms: int, half_life_ms: int) -> Decimal:
    """``amount`` held over ``[start, end)``, decayed as seen at ``end``: amount x H / ln 2 x
    (1 - decay(end - start))."""
    if end_ms <= start_ms or amount == 0:
        return ZERO
    steady = ARITHMETIC.multiply(Decimal(amount), time_constant(half_life_ms))
    return relaxed(ZERO, steady, end_ms - start_ms, half_life_ms)


class Running(NamedTuple):
    """An admitted workload's open interval: its leaf, what it holds, since when."""

    leaf: QuotaPath
    requests: Mapping[str, int]
    start_ms: int


@dataclass(slots=True)
class FairBook:
    """Per leaf, the decayed usage of its closed intervals as of its last close:
    ``closed[leaf] = (at_ms, {resource: value})``; at ``now`` a value is ``value x
    decay(now - at)``. A close decays the leaf's values to its instant and adds the interval."""

    closed: dict[QuotaPath, tuple[int, dict[str, Decimal]]] = field(default_factory=dict)

    def close(
        self,
        leaf: QuotaPath,
        requests: Mapping[str, int],
        start_ms: int,
        end_ms: int,
        half_life_ms: int,
    ) -> None:
        """A workload of ``leaf`` stops holding ``requests`` at ``end_ms`` (U1's close)."""
        at, kept = self.closed.get(leaf, (end_ms, {}))
        values = {
            resource: relaxed(value, ZERO, end_ms - at, half_life_ms)
            for resource, value in kept.items()
        }
        for resource in sorted(requests):
            add = accrued(requests[resource], start_ms, end_ms, half_life_ms)
            if add:
                values[resource] = ARITHMETIC.add(values.get(resource, ZERO), add)
        self.closed[leaf] = (end_ms, values)

    def copy(self) -> FairBook:
        return FairBook(closed=dict(self.closed))


def decayed_usage(
    book: FairBook,
    leaf: QuotaPath,
    running: Iterable[Running],
    now: Millis,
    half_life_ms: int,
) -> dict[str, Decimal]:
    """``leaf``'s decayed usage at ``now`` per resource (amount x ms): its closed intervals
    from the book and ``running`` (its open ones) up to ``now``.

    Computed at the leaf's last event (its last close or admission, ``last``) and moved from
    there as one exponential toward the running work's steady state, so it is monotone in
    ``now`` between events by construction, rounding included."""
    c = ARITHMETIC
    work = list(running)
    kept_at, kept = book.closed.get(leaf, (0, {}))
    events = [min(w.start_ms, now) for w in work] + ([kept_at] if leaf in book.closed else [])
    last = min(max(events), now) if events else now
    tau = time_constant(half_life_ms)
    totals: dict[str, Decimal] = {}
    held: dict[str, int] = {}
    for resource, value in kept.items():
        totals[resource] = relaxed(value, ZERO, last - kept_at, half_life_ms)
    for one in work:
        for resource in sorted(one.requests):
            amount = one.requests[resource]
            so_far = accrued(amount, one.start_ms, last, half_life_ms)
            totals[resource] = c.add(totals.get(resource, ZERO), so_far)
            held[resource] = held.get(resource, 0) + amount
    # The steady state of what runs: the summed amount (exact) x H / ln 2, rounded once.
    moved = {
        resource: relaxed(
            totals.get(resource, ZERO),
            c.multiply(Decimal(held.get(resource, 0)), tau),
            now - last,
            half_life_ms,
        )
        for resource in sorted(totals.keys() | held.keys())
    }
    return {resource: value for resource, value in moved.items() if value}


def fair_key(usage: Mapping[str, Decimal], capacity: Mapping[str, int], weight: int) -> Decimal:
    """The dominant decayed share per weight: max over resources of usage / (capacity x
    weight). A resource the root declares no capacity for is not compared (F1)."""
    best = ZERO
    for resource in sorted(usage):
        total = capacity.get(resource, 0)
        if total > 0:
            best = max(best, ARITHMETIC.divide(usage[resource], Decimal(total * weight)))
    return best


def root_capacity(root_max: Mapping[str, int], root_min: Mapping[str, int]) -> dict[str, int]:
    """What decayed usage is measured against: the root's ``max`` per resource, else its
    ``min`` (the cluster the tree shares)."""
    capacity = dict(root_min)
    capacity.update(root_max)
    return capacity


def fair_weight(attributes: Mapping[str, str], inherited: int) -> int:
    """A node's fair-share weight: its ``usher.io/fair-weight``, else its parent's (a bad
    value was refused with the tree, by the registry's parser; it is ignored here)."""
    weight = FAIR_WEIGHT.read(attributes)
    return inherited if weight is None else weight


KEY_DIGITS: Final = 3
"""Significant digits a key keeps at least when printed: two teams' keys at a small scale
(a few CPU-seconds of a large root) differ there, not in the third decimal."""
SCIENTIFIC_BELOW: Final = Decimal("0.001")


def format_key(key: FairKey) -> str:
    """A key for people (explain and the live view, the one place that words it): the whole
    root's capacity for that many hours, per weight (``0.144 root-hours``, ``0.00123``,
    ``6.00e-6`` below a thousandth), half-even to 3 decimals and at least 3 significant
    digits, so that keys differing in those digits never print the same."""
    hours_of_root = ARITHMETIC.divide(Decimal(key), Decimal(MS_PER_HOUR))
    return f"{_key_digits(hours_of_root)} root-hours"


def _key_digits(hours_of_root: Decimal) -> str:
    if hours_of_root.is_zero():
        return "0.000"
    if abs(hours_of_root) < SCIENTIFIC_BELOW:
        mantissa, power = f"{hours_of_root:.{KEY_DIGITS - 1}e}".split("e")
        return f"{mantissa}e{int(power)}"
    exponent = min(-3, hours_of_root.adjusted() - (KEY_DIGITS - 1))
    return str(ARITHMETIC.quantize(hours_of_root, Decimal(1).scaleb(exponent)))


def format_usage(usage: Mapping[str, Decimal]) -> str:
    """Decayed usage for people (explain): ``12.500 CPU-hours`` (U1's units, floored to ms)."""
    if not usage:
        return "none"
    return ", ".join(
        f"{hours(resource, int(usage[resource]))} {unit_of(resource)[0]}-hours"
        for resource in sorted(usage)
    )
