"""What-if with zone policy changes (docs/admission-rules.md Z1-Z3): the flags' parsing (each
error names the flag and what is wrong), the pure tree transformation, and replays of logs
built in memory where a zone cap makes a job wait or fall back and a burst zone takes one."""

from __future__ import annotations

import msgspec
import pytest

from schemas import Millis, QuotaNode, WorkloadObserved, Zone
from tests.builders.log import BASE_MS, A, Log
from tests.builders.trees import departments_tree
from usher.core.history import whatif
from usher.core.history.whatif import ZonePolicy, ZonePolicyError, ZoneSetting
from usher.core.model.config import EngineConfig
from usher.core.tree.zone_burst import BURST_ZONES_ATTRIBUTE, DEFAULT_ZONES_ATTRIBUTE
from usher.core.tree.zone_quota import ZONE_MAX_ATTRIBUTE


def _policy(
    zone_max: tuple[str, ...] = (), zones: tuple[str, ...] = (), burst: str | None = None
) -> ZonePolicy:
    policy = whatif.parse_zone_policy(zone_max, zones, burst)
    assert policy is not None
    return policy


# ---------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("zone_max", "zones", "burst", "flag", "says"),
    [
        (("Department-a",), (), None, "--zone-max", "expected NODE=VALUE"),
        (("=default: cpu=4",), (), None, "--zone-max", "expected NODE=VALUE"),
        (("Department-a=default cpu=4",), (), None, "--zone-max", "is not '<zone>: <resource>"),
        (("Department-a=default: cpu",), (), None, "--zone-max", "is not '<resource>=<n>'"),
        (("Department-a=default: cpu=lots",), (), None, "--zone-max", "cpu"),
        (("Department-a=a: cpu=1; a: cpu=2",), (), None, "--zone-max", "capped twice"),
        (
            ("Department-a=default: cpu=1", "Department-a=default: cpu=2"),
            (),
            None,
            "--zone-max",
            "Department-a: the node is given twice",
        ),
        ((), ("Department-a",), None, "--zones", "expected NODE=VALUE"),
        ((), ("Department-a=default,,eci",), None, "--zones", "not a comma-separated list"),
        ((), ("Department-a=default,default",), None, "--zones", "names a zone twice"),
        ((), (), "eci,eci", "--burst-zones", "names a zone twice"),
        ((), (), "eci aci", "--burst-zones", "not a comma-separated list"),
    ],
)
def test_bad_zone_flags_name_the_flag_and_what_is_wrong(
    zone_max: tuple[str, ...], zones: tuple[str, ...], burst: str | None, flag: str, says: str
) -> None:
    with pytest.raises(ZonePolicyError) as raised:
        whatif.parse_zone_policy(zone_max, zones, burst)
    assert raised.value.flag == flag
    assert str(raised.value).startswith(f"{flag} ") and says in str(raised.value), raised.value


def test_no_zone_flag_is_no_policy_and_values_keep_the_attributes_syntax() -> None:
    assert whatif.parse_zone_policy((), (), None) is None
    policy = _policy(("gpu-team=a100: nvidia.com/gpu=8; h100: nvidia.com/gpu=4",), ("x=",), "")
    assert policy.nodes == (
        ZoneSetting("--zone-max", "gpu-team", "a100: nvidia.com/gpu=8; h100: nvidia.com/gpu=4"),
        ZoneSetting("--zones", "x", ""),
    )
    assert policy.burst_zones == ""
    assert policy.text() == (
        "--zone-max gpu-team=a100: nvidia.com/gpu=8; h100: nvidia.com/gpu=4; --zones x=; "
        "--burst-zones "
    )


# ---------------------------------------------------------------------------- the tree


def _zoned_tree() -> QuotaNode:
    tree = departments_tree()
    zoned = msgspec.structs.replace(
        tree.children[1], attributes={ZONE_MAX_ATTRIBUTE: "default: cpu=10"}
    )
    return msgspec.structs.replace(tree, children=[tree.children[0], zoned])


def test_the_policy_sets_and_removes_attributes_by_name_or_path() -> None:
    tree = _zoned_tree()
    policy = _policy(
        ("root/Department-a=default: cpu=30", "Department-b="),
        ("root=default,eci",),
        "eci",
    )
    changed = whatif.with_zone_policy(tree, policy)
    assert changed.attributes == {
        DEFAULT_ZONES_ATTRIBUTE: "default,eci",
        BURST_ZONES_ATTRIBUTE: "eci",
    }
    assert changed.children[0].attributes == {ZONE_MAX_ATTRIBUTE: "default: cpu=30"}
    assert changed.children[1].attributes == {}
    assert tree == _zoned_tree()  # pure: the recorded tree is untouched
    # A node the policy does not name is the same object; an empty policy changes nothing.
    only_root = whatif.with_zone_policy(tree, _policy(burst="eci"))
    assert only_root.children[0] is tree.children[0]
    removed = whatif.with_zone_policy(tree, _policy(burst=""))
    assert removed.attributes == {}


def test_a_node_in_no_replayed_tree_is_refused_naming_the_flag() -> None:
    with pytest.raises(ZonePolicyError) as raised:
        whatif.check_zone_policy(_policy(zones=("gpu-team=a,b",)), [departments_tree()])
    assert str(raised.value) == (
        "--zones gpu-team: no such node in the replayed window's quota trees"
    )
    # Named by path or by name, a node of the tree passes.
    whatif.check_zone_policy(_policy(zones=("root/Department-a=a,b",)), [departments_tree()])
    whatif.check_zone_policy(_policy(("Department-a=eci: cpu=1",)), [departments_tree()])


# ---------------------------------------------------------------------------- replays


def _with_zones(log: Log, at: float, key: str, cpu: int, zones: list[str]) -> Log:
    """``key`` observed with its own ``usher.io/zones`` annotation (Z2)."""
    log.job(at, key, cpu)
    _, envelope = log.entries[-1]
    assert isinstance(envelope.event, WorkloadObserved)
    observed = msgspec.structs.replace(envelope.event, zones=[Zone(z) for z in zones])
    log.entries[-1] = (log.entries[-1][0], msgspec.structs.replace(envelope, event=observed))
    return log


def _compare(log: Log, policy: ZonePolicy, **spec: object) -> whatif.WhatIfReport:
    config = EngineConfig()
    return whatif.what_if(
        log.history(),
        whatif.WhatIfSpec(
            baseline=whatif.Variant(config=config),
            changed=whatif.Variant(config=config, zone_policy=policy),
            **spec,  # type: ignore[arg-type]
        ),
    )


def _two_jobs() -> Log:
    """user-a/first (60 cpu) at t=1 and user-a/second (30 cpu) at t=2, both in zone default:
    the recorded tree admits both there."""
    return Log().tree(0).job(1, "user-a/first", 60).job(2, "user-a/second", 30)


def test_a_zone_cap_makes_a_job_wait() -> None:
    report = _compare(_two_jobs(), _policy(("Department-a=default: cpu=70",)))
    assert (report.overall.baseline.admitted, report.overall.whatif.admitted) == (2, 1)
    assert (report.overall.baseline.pending_at_end, report.overall.whatif.pending_at_end) == (0, 1)
    [diff] = report.differences
    assert (diff.workload, diff.action, diff.baseline_quota, diff.whatif_at) == (
        "user-a/second",
        "admit",
        A,
        None,
    )
    assert report.baseline.zone_policy is None
    assert report.whatif.zone_policy == "--zone-max Department-a=default: cpu=70"
    table = whatif.render_whatif_table(report)
    assert "zone policy --zone-max Department-a=default: cpu=70" in table
    assert "zone policy" not in table.splitlines()[1]  # the baseline's line


def test_a_zone_cap_with_a_default_list_falls_back_to_the_next_zone() -> None:
    policy = _policy(("Department-a=default: cpu=70",), ("Department-a=default,h100",))
    report = _compare(_two_jobs(), policy)
    assert (report.overall.baseline.admitted, report.overall.whatif.admitted) == (2, 2)
    [diff] = report.differences
    assert (diff.workload, diff.baseline_zone, diff.whatif_zone) == ("user-a/second", None, "h100")
    assert diff.baseline_at == diff.whatif_at and diff.baseline_quota == diff.whatif_quota
    row = next(
        line for line in whatif.render_whatif_table(report).splitlines() if "admit #1" in line
    )
    assert row.endswith("+2.000s root/Department-a in zone h100"), row


def test_burst_zones_take_a_job_only_when_the_own_zones_are_full() -> None:
    # Listed first, eci is still tried last: it is a burst zone (Z3).
    policy = _policy(("root=default: cpu=70",), ("root=default,eci,h100",), "eci")
    log = _two_jobs().job(3, "user-a/third", 5)
    report = _compare(log, policy)
    moved = {d.workload: d.whatif_zone for d in report.differences}
    assert moved == {"user-a/second": "h100"}  # third fits in default (60 + 5)
    capped = _policy(("root=default: cpu=70; h100: cpu=20",), ("root=default,eci,h100",), "eci")
    report = _compare(log, capped)
    moved = {d.workload: d.whatif_zone for d in report.differences}
    assert moved == {"user-a/second": "eci"}
    assert "in zone eci" in whatif.render_whatif_table(report)
    doc = msgspec.json.decode(whatif.render_whatif_json(report))
    assert doc["differences"][0]["whatif_zone"] == "eci"
    assert doc["whatif"]["zone_policy"].endswith("--burst-zones eci")
    assert "zone_policy" not in doc["baseline"]


def test_a_jobs_own_zone_list_wins_over_the_trees_default() -> None:
    log = _with_zones(Log().tree(0).job(1, "user-a/first", 60), 2, "user-a/own", 30, ["default"])
    policy = _policy(("root=default: cpu=70",), ("root=default,eci",), "eci")
    report = _compare(log, policy)
    [diff] = report.differences
    assert (diff.workload, diff.baseline_at is not None, diff.whatif_at) == (
        "user-a/own",
        True,
        None,
    )


def test_since_starts_from_the_tree_in_force_with_the_policy() -> None:
    log = _two_jobs().finished(5, "user-a/second").job(10, "user-a/late", 30)
    policy = _policy(("Department-a=default: cpu=70",), ("Department-a=default,h100",))
    report = _compare(log, policy, since_ms=Millis(BASE_MS + 8000))
    assert report.inputs == 1  # no tree in the window: the one in force got the policy
    assert {d.workload: d.whatif_zone for d in report.differences} == {"user-a/late": "h100"}
    with pytest.raises(ZonePolicyError, match="--zone-max nobody: no such node"):
        _compare(log, _policy(("nobody=default: cpu=1",)), since_ms=Millis(BASE_MS + 8000))
