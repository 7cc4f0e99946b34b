"""What-if with lending policy changes (docs/admission-rules.md L1, L2): the flags set
``usher.io/reclaim-within`` and ``usher.io/lending-limit`` on every replayed tree, a bad value
is refused naming the flag, and a replay where Department-b borrows Department-a's idle
guarantee shows the borrower waiting once Department-a lends nothing, or less."""

from __future__ import annotations

import pytest

from tests.builders.log import B, Log
from tests.builders.trees import departments_tree
from usher.core.history import whatif
from usher.core.history.whatif import ZonePolicy, ZonePolicyError
from usher.core.model.config import EngineConfig


def _policy(*pairs: tuple[str, str]) -> ZonePolicy:
    policy = whatif.parse_zone_policy((), (), None, lending=list(pairs))
    assert policy is not None
    return policy


@pytest.mark.parametrize(
    ("flag", "raw", "says"),
    [
        ("--reclaim-within", "Department-a=never", "must be one of Any, LowerPriority, Never"),
        ("--lending-limit", "Department-a=cpu=-1", "negative"),
        ("--lending-limit", "Department-a=cpu", "is not 'resource=quantity, ...'"),
        ("--reclaim-within", "Department-a", "expected NODE=VALUE"),
    ],
)
def test_bad_lending_flags_name_the_flag_and_what_is_wrong(flag: str, raw: str, says: str) -> None:
    with pytest.raises(ZonePolicyError) as raised:
        whatif.parse_zone_policy((), (), None, lending=[(flag, raw)])
    assert raised.value.flag == flag and says in str(raised.value), raised.value


def test_the_flags_set_and_remove_the_attributes() -> None:
    policy = _policy(
        ("--reclaim-within", "Department-a=Never"),
        ("--lending-limit", "root/Department-b=cpu=4, memory=1Gi"),
    )
    tree = whatif.with_zone_policy(departments_tree(), policy)
    assert tree.children[0].attributes == {"usher.io/reclaim-within": "Never"}
    assert tree.children[1].attributes == {"usher.io/lending-limit": "cpu=4, memory=1Gi"}
    removed = whatif.with_zone_policy(tree, _policy(("--reclaim-within", "Department-a=")))
    assert removed.children[0].attributes == {}
    whatif.check_zone_policy(policy, [departments_tree()])


def _compare(policy: ZonePolicy) -> whatif.WhatIfReport:
    """user-c borrows 30 of Department-a's idle 60 cpu (Department-b is guaranteed 40)."""
    log = Log().tree(0).job(1, "user-c/borrower", 70)
    config = EngineConfig()
    return whatif.what_if(
        log.history(),
        whatif.WhatIfSpec(
            baseline=whatif.Variant(config=config),
            changed=whatif.Variant(config=config, zone_policy=policy),
        ),
    )


@pytest.mark.parametrize(
    ("pair", "waits"),
    [
        (("--reclaim-within", "Department-a=Any"), False),
        (("--reclaim-within", "Department-a=LowerPriority"), False),
        (("--reclaim-within", "Department-a=Never"), True),
        (("--lending-limit", "Department-a=cpu=30"), False),
        (("--lending-limit", "Department-a=cpu=29"), True),
        (("--lending-limit", "Department-b=cpu=0"), False),
    ],
)
def test_a_borrower_waits_when_the_lender_keeps_its_guarantee(
    pair: tuple[str, str], waits: bool
) -> None:
    report = _compare(_policy(pair))
    assert report.overall.baseline.admitted == 1
    assert report.overall.whatif.admitted == (0 if waits else 1), pair
    if waits:
        [diff] = report.differences
        assert (diff.workload, diff.baseline_quota, diff.whatif_at) == ("user-c/borrower", B, None)
    assert report.whatif.zone_policy == f"{pair[0]} {pair[1]}"
