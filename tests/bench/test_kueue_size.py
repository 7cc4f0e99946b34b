"""``python -m bench --kueue-parents N``: fewer cohorts, each playing the baseline's own load."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.kueue import FULL, QUICK, ideal_makespan_s, notes, plan, scale_of


@pytest.mark.parametrize("parents", [1, 2, 3, 4, 5])
def test_each_kept_cohort_gets_the_baseline_s_arrivals_and_the_ideal_stays(parents: int) -> None:
    full, part = plan(FULL), plan(scale_of(quick=False, parents=parents))
    per_leaf = Counter((a.namespace, a.cls.name, a.at_ms) for a in full)
    assert all(per_leaf[(a.namespace, a.cls.name, a.at_ms)] == 1 for a in part)
    assert {a.namespace for a in part} == {f"cq-{p}-{i}" for p in range(parents) for i in range(6)}
    assert len(part) * 5 == len(full) * parents
    ideal = ideal_makespan_s(scale_of(quick=False, parents=parents))
    assert ideal == pytest.approx(ideal_makespan_s(FULL))


def test_without_parents_the_sizes_are_the_full_and_quick_ones() -> None:
    assert scale_of(quick=False) == FULL and scale_of(quick=True) == QUICK
    assert scale_of(quick=True, parents=3).divisor == QUICK.divisor


def test_the_note_says_how_much_of_the_baseline_ran() -> None:
    assert "15,000 workloads" in notes(quick=False)
    assert f"{len(plan(scale_of(False, 2))):,} workloads" in notes(quick=False, parents=2)
    assert "a fifth" in notes(quick=True)
