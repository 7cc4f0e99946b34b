"""Side work on a service's loop (the dequeuer's gauges, the watcher's estimates) is paced by
what it cost: its share of the loop stays bounded however large the state it walks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common.pacing import period_after


@pytest.mark.parametrize(
    ("interval_s", "took_s", "share", "period_s"),
    [
        (0.25, 0.0, 0.05, 0.25),  # free: the wanted period
        (0.25, 0.01, 0.05, 0.25),  # 4% of the period: still the wanted period
        (0.25, 0.05, 0.05, 1.0),  # a 50 ms refresh comes once a second
        (10.0, 0.5, 0.02, 25.0),
    ],
)
def test_a_costly_run_comes_less_often(
    interval_s: float, took_s: float, share: float, period_s: float
) -> None:
    assert period_after(interval_s, took_s, share) == pytest.approx(period_s)


@given(
    st.floats(0.01, 60.0),
    st.floats(0.0, 10.0),
    st.sampled_from([0.01, 0.02, 0.05, 0.1]),
)
def test_the_share_of_the_loop_is_bounded(interval_s: float, took_s: float, share: float) -> None:
    period = period_after(interval_s, took_s, share)
    assert period >= interval_s
    assert took_s <= share * period + 1e-9
