"""Burst zones and a tree node's default zone list (Z3), table-driven.

Parsing of ``usher.io/burst-zones`` and the tree attribute ``usher.io/zones`` (T1 names the
attribute), the zones a job accepts from its node's list, the order they are tried in, the
order of reclaim candidates of one standing; through the engine, two zone dequeuers sharing
a job that only the tree lets burst, a snapshot of it, and the audit accepting it.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest

from schemas import Admitted, Millis, QuotaNode, QuotaPath, QuotaTreeApplied, WorkloadKey, Zone
from tests.builders.events import CORE, admitted, observed
from tests.builders.log import QA, Log
from tests.builders.manifests import elastic_quota_tree, quota_node
from tests.builders.trees import departments_tree, two_leaf_tree
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import restore, snapshot
from usher.core.history import audit
from usher.core.model.config import EngineConfig
from usher.core.model.errors import TreeInvalid
from usher.core.tree.quota_tree import parse_tree
from usher.core.tree.zone_burst import (
    BURST_ZONES_ATTRIBUTE,
    DEFAULT_ZONES_ATTRIBUTE,
    attribute_errors,
    burst_first,
    burst_zones,
    default_zones,
    tree_accepted,
    try_order,
)
from usher.core.tree.zone_quota import ZONE_MAX_ATTRIBUTE

ROOT = "spec.root.attributes"
Z = Zone


@pytest.mark.parametrize(
    ("attributes", "root", "field", "says"),
    [
        ({BURST_ZONES_ATTRIBUTE: "eci,eci"}, True, BURST_ZONES_ATTRIBUTE, "names a zone twice"),
        ({BURST_ZONES_ATTRIBUTE: ""}, True, BURST_ZONES_ATTRIBUTE, "not a comma-separated"),
        ({BURST_ZONES_ATTRIBUTE: "eci"}, False, BURST_ZONES_ATTRIBUTE, "on the root only"),
        ({DEFAULT_ZONES_ATTRIBUTE: "a,,b"}, False, DEFAULT_ZONES_ATTRIBUTE, "not a comma"),
        ({DEFAULT_ZONES_ATTRIBUTE: "a b"}, True, DEFAULT_ZONES_ATTRIBUTE, "not a comma"),
    ],
)
def test_bad_zone_lists_are_refused_naming_the_attribute(
    attributes: dict[str, str], root: bool, field: str, says: str
) -> None:
    [error] = attribute_errors(attributes, ROOT, root=root)
    assert (error.path, error.code) == (f"{ROOT}.{field}", "invalid-attribute")
    assert says in error.message


@pytest.mark.parametrize(
    "attributes",
    [{}, {BURST_ZONES_ATTRIBUTE: "eci"}, {DEFAULT_ZONES_ATTRIBUTE: " default , eci "}],
)
def test_good_zone_lists_pass(attributes: dict[str, str]) -> None:
    assert attribute_errors(attributes, ROOT, root=True) == []


def test_t1_refuses_the_whole_tree_naming_every_bad_zone_list() -> None:
    leaf = quota_node("a", max_cpu="8", namespaces=["a"], attributes={BURST_ZONES_ATTRIBUTE: "eci"})
    root = quota_node(
        "root",
        max_cpu="8",
        min_cpu="8",
        attributes={BURST_ZONES_ATTRIBUTE: "eci,eci"},
        children=[leaf],
    )
    manifest = elastic_quota_tree(root, name="t")
    with pytest.raises(TreeInvalid) as refused:
        parse_tree(manifest)
    assert sorted(e.path for e in refused.value.errors) == [
        f"spec.root.attributes.{BURST_ZONES_ATTRIBUTE}",
        f"spec.root.children[0](a).attributes.{BURST_ZONES_ATTRIBUTE}",
    ]


@pytest.mark.parametrize(
    ("attributes", "inherited", "zones"),
    [
        ({}, (), ()),
        ({}, (Z("a"), Z("eci")), (Z("a"), Z("eci"))),
        ({DEFAULT_ZONES_ATTRIBUTE: "b"}, (Z("a"), Z("eci")), (Z("b"),)),
        ({DEFAULT_ZONES_ATTRIBUTE: "b,,c"}, (Z("a"),), (Z("a"),)),
    ],
)
def test_default_zones_are_inherited_unless_a_node_sets_its_own(
    attributes: dict[str, str], inherited: tuple[Zone, ...], zones: tuple[Zone, ...]
) -> None:
    assert default_zones(attributes, inherited) == zones


def test_burst_zones_come_from_the_root() -> None:
    assert burst_zones({BURST_ZONES_ATTRIBUTE: "eci, aci"}) == {Z("eci"), Z("aci")}
    assert burst_zones({}) == frozenset()


@pytest.mark.parametrize(
    ("default", "home", "accepted"),
    [
        (("default", "eci"), "default", ("default", "eci")),
        (("a100", "h100", "eci"), "h100", ("h100", "eci")),
        (("a100", "h100", "eci"), "eci", ()),
        (("a100", "eci"), "default", ()),
        ((), "default", ()),
    ],
)
def test_a_job_accepts_its_nodes_list_from_its_own_zone_on(
    default: tuple[str, ...], home: str, accepted: tuple[str, ...]
) -> None:
    assert tree_accepted([Z(z) for z in default], Z(home)) == tuple(Z(z) for z in accepted)


@pytest.mark.parametrize(
    ("zones", "burst", "order"),
    [
        (("a", "eci"), (), ("a", "eci")),
        (("eci", "a"), (), ("eci", "a")),
        (("eci", "a"), ("eci",), ("a", "eci")),
        (("eci", "a", "aci", "b"), ("eci", "aci"), ("a", "b", "eci", "aci")),
        (("a", "b"), ("eci",), ("a", "b")),
    ],
)
def test_burst_zones_are_tried_after_every_other_zone_in_listed_order(
    zones: tuple[str, ...], burst: tuple[str, ...], order: tuple[str, ...]
) -> None:
    tried = try_order([Z(z) for z in zones], frozenset(Z(z) for z in burst))
    assert tuple(tried) == tuple(Z(z) for z in order)


Candidate = tuple[str, str, int]
"""A reclaim candidate as (name, zone, priority), already in R5's order."""


@pytest.mark.parametrize(
    ("candidates", "burst", "order"),
    [
        # No burst zone: R5's order untouched.
        ([("x", "eci", 0), ("y", "a", 0)], (), "xy"),
        # One priority: the burst ones first, each part in R5's order.
        ([("x", "a", 0), ("y", "eci", 0), ("z", "a", 0), ("w", "eci", 0)], ("eci",), "ywxz"),
        # Priority stays first: a burst candidate of higher priority waits its turn.
        ([("x", "a", 0), ("y", "eci", 5), ("z", "a", 5)], ("eci",), "xyz"),
        ([("x", "a", 0), ("y", "eci", 0), ("z", "a", 5), ("w", "eci", 5)], ("eci",), "yxwz"),
    ],
)
def test_burst_candidates_go_first_among_one_priority(
    candidates: list[Candidate], burst: tuple[str, ...], order: str
) -> None:
    ordered = burst_first(
        candidates, frozenset(Z(z) for z in burst), lambda c: Z(c[1]), lambda c: c[2]
    )
    assert "".join(c[0] for c in ordered) == order


def test_burst_first_reads_no_further_than_the_next_priority() -> None:
    seen: list[str] = []

    def candidates() -> Iterator[Candidate]:
        for name, priority in (("x", 0), ("y", 1), ("z", 2)):
            seen.append(name)
            yield (name, "a", priority)

    ordered = burst_first(candidates(), {Z("eci")}, lambda c: Z(c[1]), lambda c: c[2])
    assert next(ordered)[0] == "x"
    assert seen == ["x", "y"]


# ---------------------------------------------------------------- through the engine


def _burst_tree(default_list: str | None = "default,eci") -> QuotaNode:
    """Two leaves; the root caps zone default at 10 cpu, marks eci burst and, unless
    ``default_list`` is None, gives every job that list."""
    attributes = {ZONE_MAX_ATTRIBUTE: "default: cpu=10", BURST_ZONES_ATTRIBUTE: "eci"}
    if default_list is not None:
        attributes[DEFAULT_ZONES_ATTRIBUTE] = default_list
    return msgspec.structs.replace(two_leaf_tree(("a1",)), attributes=attributes)


def _dequeuers(default_list: str | None = "default,eci") -> tuple[Engine, Engine]:
    engines = []
    for zone in ("default", "eci"):
        engine = Engine(EngineConfig(zones=frozenset({Zone(zone)})))
        engine.apply(QuotaTreeApplied(root=_burst_tree(default_list)), Millis(0))
        engines.append(engine)
    return engines[0], engines[1]


def _apply_all(engines: tuple[Engine, Engine], event: object, now: int) -> None:
    for engine in engines:
        engine.apply(event, Millis(now))  # type: ignore[arg-type]


def test_only_the_burst_zones_dequeuer_admits_a_job_the_tree_lets_burst() -> None:
    own, eci = engines = _dequeuers()
    _apply_all(engines, observed("a1", "fill", 8), 0)
    _apply_all(engines, admitted("a1/fill", 8), 0)
    _apply_all(engines, observed("a1", "more", 4, created=1), 1)
    assert [d for d in own.decide(Millis(2)) if isinstance(d, Admitted)] == []
    [decided] = [d for d in eci.decide(Millis(2)) if isinstance(d, Admitted)]
    assert (decided.workload, decided.zone) == ("a1/more", "eci")
    assert decided.reason is not None and decided.reason.code == "ZoneFallback"
    _apply_all(engines, decided, 3)
    # Seen again (no zone list of its own): it stays where it runs, counted once, not in
    # zone default.
    _apply_all(engines, msgspec.structs.replace(observed("a1", "more", 4), suspended=False), 4)
    for engine in engines:
        job = engine.state.jobs[WorkloadKey("a1/more")]
        assert (job.zone, job.zones, job.listed) == (Z("eci"), (Z("default"), Z("eci")), ())
        root = engine.state.tree.nodes[QuotaPath("root")]
        assert root.zone_used == {Z("default"): {"cpu": 8 * CORE}}
        assert engine.accepted_zones(WorkloadKey("a1/more")) == (Z("default"), Z("eci"))
    twin = restore(snapshot(eci), eci.config)
    job = twin.state.jobs[WorkloadKey("a1/more")]
    assert (job.zone, job.zones, job.listed) == (Z("eci"), (Z("default"), Z("eci")), ())


def test_without_the_trees_list_the_job_waits_in_its_own_zone() -> None:
    own, _eci = engines = _dequeuers(default_list=None)
    _apply_all(engines, observed("a1", "fill", 8), 0)
    _apply_all(engines, admitted("a1/fill", 8), 0)
    _apply_all(engines, observed("a1", "more", 4, created=1), 1)
    for engine in engines:
        assert [d for d in engine.decide(Millis(2)) if isinstance(d, Admitted)] == []
    reason = own.reason(WorkloadKey("a1/more"))
    assert reason is not None and reason.code == "ZoneQuotaExceeded"


def test_a_new_tree_gives_and_takes_a_waiting_jobs_list() -> None:
    engine = Engine(EngineConfig())
    key = WorkloadKey("a1/wait")
    engine.apply(QuotaTreeApplied(root=_burst_tree(None)), Millis(0))
    engine.apply(observed("a1", "wait", 4), Millis(0))
    assert engine.accepted_zones(key) == ()
    engine.apply(QuotaTreeApplied(root=_burst_tree()), Millis(1))
    assert engine.accepted_zones(key) == (Z("default"), Z("eci"))
    engine.apply(QuotaTreeApplied(root=_burst_tree("eci")), Millis(2))
    assert engine.accepted_zones(key) == ()


@pytest.mark.parametrize(("default_list", "wrong_zone"), [("default,eci", False), (None, True)])
def test_the_audit_accepts_a_burst_admission_only_when_a_list_allowed_it(
    default_list: str | None, wrong_zone: bool
) -> None:
    attributes = {BURST_ZONES_ATTRIBUTE: "eci"}
    if default_list is not None:
        attributes[DEFAULT_ZONES_ATTRIBUTE] = default_list
    tree = msgspec.structs.replace(departments_tree(), attributes=attributes)
    log = Log().tree(0, tree).job(1, "user-a/j", 10)
    burst = Admitted(
        workload=WorkloadKey("user-a/j"),
        queue=QA,
        quota=QuotaPath("root/Department-a"),
        zone=Z("eci"),
        requests={"cpu": 10 * 1000},
    )
    log.add(2, burst, id="ledger:admitted:user-a/j:1")
    findings, _ = audit.audit_log(log.history(), EngineConfig())
    assert ("wrong-zone" in [f.check for f in findings]) == wrong_zone, findings
