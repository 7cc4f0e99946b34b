"""`what-if` reports the planning report's figures per department, checked by hand on the
seed reclaim log (big 60 cpu from 1 s, borrow 40 cpu from 2 s preempted at 3 s for urgent's
10 cpu; the replay ends at 3.3 s, Department-a guarantees 60 cpu)."""

from __future__ import annotations

import msgspec

from tests.builders.log import walkthrough_reclaim
from usher.core.history import planning, whatif
from usher.core.model.config import EngineConfig


def report() -> whatif.WhatIfReport:
    spec = whatif.WhatIfSpec(
        baseline=whatif.Variant(config=EngineConfig()),
        changed=whatif.Variant(config=EngineConfig(policy="Block")),
    )
    return whatif.what_if(walkthrough_reclaim().history(), spec)


def test_departments_side_by_side_with_hand_computed_usage() -> None:
    rows = {row.department: row for row in report().departments}
    assert list(rows) == ["root/Department-a", "root/Department-b", planning.CLUSTER]
    a = rows["root/Department-a"].baseline
    assert (a.jobs, a.admitted, a.pending, a.preemptions, a.wait_max_s) == (2, 2, 1, 1, 0.0)
    # big 60 cpu x 2.3 s + borrow 40 cpu x 1 s = 178 of 60 x 3.3 = 198 guaranteed.
    cpu = a.resources[0]
    assert (cpu.used, cpu.guaranteed, cpu.of_guarantee_pct, cpu.lost_to_preemption) == (
        "178.000",
        "198.000",
        "89.9",
        "40.000",
    )
    b = rows["root/Department-b"].whatif
    assert (b.jobs, b.admitted, b.resources[0].used) == (1, 1, "3.000")  # 10 cpu x 0.3 s
    assert rows[planning.CLUSTER].baseline.resources[0].used == "181.000"


def test_departments_in_the_table_and_json() -> None:
    done = report()
    table = whatif.render_whatif_table(done)
    assert "per department over the replayed window" in table
    assert "178.000 -> 178.000" in table and "40.000 -> 40.000" in table
    doc = msgspec.json.decode(whatif.render_whatif_json(done))
    assert doc["departments"][0]["baseline"]["preemptions"] == 1
