"""The Kueue-baseline bench's estimate coverage (issue 28): a start is covered when it falls
inside the range the estimate stated at arrival, bounds included."""

from __future__ import annotations

import pytest

from bench.kueue import within_range
from schemas import Millis
from usher.core.history.estimate import Estimate


def _estimate(early: int | None, start: int, late: int | None) -> Estimate:
    return Estimate(
        start_ms=Millis(start),
        early_ms=None if early is None else Millis(early),
        late_ms=None if late is None else Millis(late),
        basis="p50 of 10 runs",
        made_ms=Millis(0),
        says="~2s (1s-3s)",
    )


@pytest.mark.parametrize(
    ("early", "start", "late", "started", "covered"),
    [
        (1000, 2000, 3000, 2500, True),
        (1000, 2000, 3000, 1000, True),  # bounds included
        (1000, 2000, 3000, 3000, True),
        (1000, 2000, 3000, 999, False),  # started before the earliest it said
        (1000, 2000, 3000, 3001, False),  # started after the latest it said
        (None, 2000, None, 2000, True),  # only a middle: covers that instant only
        (None, 2000, None, 2001, False),
    ],
)
def test_a_start_is_covered_only_inside_the_stated_range(
    early: int | None, start: int, late: int | None, started: int, covered: bool
) -> None:
    assert within_range(_estimate(early, start, late), started) is covered
