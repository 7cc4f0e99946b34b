"""The emulator's kubelet reads ``usher.io/sim-duration`` with the registry's parser (issue 26):
``inf`` once made it run a job forever."""

from __future__ import annotations

import pytest

from usher.local.kube_emulator.kubelet import sim_duration


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        ("1.5", 1.5),
        ("30", 30.0),
        ("inf", None),
        ("nan", None),
        ("1e300", None),
        ("-1", None),
        (" 5 ", None),
        ("\uff15", None),
        (5, None),
    ],
)
def test_sim_duration_is_read_strictly(raw: object, seconds: float | None) -> None:
    assert sim_duration({"metadata": {"annotations": {"usher.io/sim-duration": raw}}}) == seconds
