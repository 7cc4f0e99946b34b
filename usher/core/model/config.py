"""Deployment settings of the decision core (docs/admission-rules.md R2-R7).

What it does: one frozen ``EngineConfig`` holding the admission policy, the exact oversell
rate, the default within-quota preemption mode, minimum runtime and readiness policy (R10),
fair share's half-life (F1, off by default) and the zones one engine decides for; the
``Policy`` enum and the within-quota modes every choice list (CLI, settings, scenarios) is
built from.
What it must never do: read the environment or files; callers build it from their own input.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Literal

from schemas import Zone


class Policy(StrEnum):
    """How a queue's head stands against the rest (R3, docs/admission-rules.md)."""

    ROUND = "Round"
    """A head that cannot be admitted lets the next workload of its queue be tried."""
    BLOCK = "Block"
    """Strict priority: a head that cannot be admitted closes its queue for the pass."""


WithinQuota = Literal["Never", "LowerPriority"]
"""Within-quota preemption mode (a Literal: the ledger store's signature names it so)."""

POLICIES: tuple[str, ...] = tuple(policy.value for policy in Policy)
"""Every policy's name, in the order choice lists show them."""
WITHIN_QUOTA_MODES: tuple[WithinQuota, ...] = ("Never", "LowerPriority")


@dataclass(frozen=True, slots=True)
class ReadinessPolicy:
    """How long an admitted workload may take to become ready, and what follows (R10).

    The default is off (``timeout_ms == 0``): a cluster whose watcher reports no pod progress
    would otherwise see every admission evicted, and every scenario written before readiness
    existed plays exactly as it did. The backoff defaults are Kueue's (60 s doubling up to an
    hour); five attempts bound a gang that can never be placed.
    """

    timeout_ms: int = 0
    """0 = off: an admitted workload is never requeued for not being ready."""
    backoff_base_ms: int = 60_000
    """Wait after the first requeue; it doubles with each further requeue."""
    backoff_cap_ms: int = 3_600_000
    max_attempts: int = 5
    """Admissions a workload may time out in; the last one ends it ``Inadmissible``."""
    requeued_may_preempt: bool = False
    """Whether a workload requeued for readiness may preempt on its later attempts; by
    default it takes only free room (a gang that never gets ready evicts nobody twice)."""

    def __post_init__(self) -> None:
        for name in ("timeout_ms", "backoff_base_ms", "backoff_cap_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")

    def backoff_ms(self, attempt: int) -> int:
        """The wait after the ``attempt``-th requeue (1-based): base x 2^(attempt-1), capped."""
        if attempt < 1 or self.backoff_base_ms == 0:
            return 0
        # Doubling stops at the cap: no huge integers for a large attempt count.
        wait = self.backoff_base_ms
        for _ in range(attempt - 1):
            if wait >= self.backoff_cap_ms:
                break
            wait *= 2
        return min(wait, self.backoff_cap_ms)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How the engine decides. ``oversell_rate`` is exact (a Fraction), never a float."""

    policy: Policy = Policy.ROUND
    oversell_rate: Fraction = Fraction(1)
    within_quota: WithinQuota = "Never"
    min_runtime_ms: int = 0
    readiness: ReadinessPolicy = ReadinessPolicy()
    """The readiness policy of the root (nodes override it with attributes, R10)."""
    zones: frozenset[Zone] | None = None
    """Zones this engine decides for; ``None`` = all. Other zones' admissions still count."""
    instant_release: bool = False
    """Scenarios and what-if (R7, S1): a preempted victim stops, and a finished or deleted
    workload's usage leaves, the instant it happens. A running system (False) keeps any usage
    counted until the ledger's ``Released`` for it is on the log (docs/admission-rules.md R7):
    what the engine believes is what the ledger holds."""
    half_life_ms: int | None = None
    """Fair share with memory (F1): borrowing leaves are ordered by usage decayed with this
    half-life. ``None`` (the default) = off: R3's order, exactly as before F1."""

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        # Callers may name it by its string: one enum value from here on.
        object.__setattr__(self, "policy", Policy(self.policy))
        if self.within_quota not in WITHIN_QUOTA_MODES:
            raise ValueError(
                f"within_quota must be one of {WITHIN_QUOTA_MODES}, got {self.within_quota!r}"
            )
        if not isinstance(self.oversell_rate, Fraction):
            # Accept ints (and exact Fractions) but normalise so caps are computed exactly.
            object.__setattr__(self, "oversell_rate", Fraction(self.oversell_rate))
        if self.oversell_rate <= 0:
            raise ValueError(f"oversell_rate must be positive, got {self.oversell_rate}")
        if self.min_runtime_ms < 0:
            raise ValueError(f"min_runtime_ms must be >= 0, got {self.min_runtime_ms}")
        if self.half_life_ms is not None and self.half_life_ms <= 0:
            raise ValueError(f"half_life_ms must be > 0, got {self.half_life_ms}")

    def decides_for(self, zone: Zone) -> bool:
        """Whether this engine admits workloads of ``zone``."""
        return self.zones is None or zone in self.zones


def format_rate(rate: Fraction) -> str:
    """Render the oversell rate for reasons: ``1.0``, ``2.0``, ``1.5`` (``4/3`` if not decimal)."""
    if rate.denominator == 1:
        return f"{rate.numerator}.0"
    denominator = rate.denominator
    while denominator % 2 == 0:
        denominator //= 2
    while denominator % 5 == 0:
        denominator //= 5
    if denominator == 1:
        # Terminating decimal: exact digits, no float rounding.
        digits = 0
        scaled = rate
        while scaled.denominator != 1:
            scaled *= 10
            digits += 1
        text = str(scaled.numerator).rjust(digits + 1, "0")
        return f"{text[:-digits]}.{text[-digits:]}"
    return f"{rate.numerator}/{rate.denominator}"
