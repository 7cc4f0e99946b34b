"""Zones in the quota tree: per-zone caps (Z1) and ordered fallback (Z2), table-driven.

Parsing of ``usher.io/zone-max`` (T1 names the attribute), the per-zone fit check and its
reason, the ``usher.io/zones`` annotation against the zone label, and the choice of zone;
end to end through the engine, a fallback admission and what it counts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import (
    Admitted,
    Millis,
    QuotaNode,
    QuotaPath,
    QuotaTreeApplied,
    Reason,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    Zone,
)
from tests.builders.events import CORE, admitted, observed
from tests.builders.generated import Op, configs, ops, trees
from tests.builders.manifests import elastic_quota_tree, quota_node
from tests.builders.trees import two_leaf_tree
from tests.core.test_properties import play
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import restore, snapshot
from usher.core.intake.workload import extract_workload
from usher.core.model.config import EngineConfig
from usher.core.model.errors import TreeInvalid, WorkloadInvalid
from usher.core.tree.quota_tree import parse_tree
from usher.core.tree.zone_fallback import owner_zone, parse_accepted_zones, passed_over, zone_choice
from usher.core.tree.zone_quota import (
    ZONE_MAX_ATTRIBUTE,
    ZoneCaps,
    count_in_zone,
    parse_zone_max,
    zone_quota_exceeded,
    zone_shortfall,
)

GPU = "nvidia.com/gpu"
FIELD = f"spec.root.attributes.{ZONE_MAX_ATTRIBUTE}"


@pytest.mark.parametrize(
    ("text", "caps"),
    [
        ("a100: nvidia.com/gpu=8", {"a100": {GPU: 8}}),
        ("a100: nvidia.com/gpu=8; h100: nvidia.com/gpu=4", {"a100": {GPU: 8}, "h100": {GPU: 4}}),
        (" a100 : cpu=1500m , memory=2Gi ;", {"a100": {"cpu": 1500, "memory": 2 * 2**30}}),
    ],
)
def test_zone_max_parses_to_exact_caps(text: str, caps: ZoneCaps) -> None:
    assert parse_zone_max({ZONE_MAX_ATTRIBUTE: text}, "spec.root.attributes") == (caps, [])


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "no zone given"),
        ("nvidia.com/gpu=8", "is not '<zone>: <resource>=<quantity>, ...'"),
        ("a100:", "caps no resource"),
        ("a100: nvidia.com/gpu", "is not '<resource>=<n>'"),
        ("a100: cpu=1, cpu=2", "cpu given twice"),
        ("a100: nvidia.com/gpu=8; a100: cpu=1", "zone a100 is capped twice"),
        ("a100: nvidia.com/gpu=eight", ""),
        ("a b: cpu=1", "is not '<zone>"),
    ],
)
def test_zone_max_refuses_bad_values_naming_the_attribute(text: str, says: str) -> None:
    caps, errors = parse_zone_max({ZONE_MAX_ATTRIBUTE: text}, "spec.root.attributes")
    assert caps == {}
    assert errors, text
    assert all(e.path.startswith(FIELD) and e.code == "invalid-attribute" for e in errors)
    assert any(says in e.message for e in errors)


def test_a_tree_with_a_bad_zone_cap_is_refused_by_t1() -> None:
    root = quota_node(
        "root", max_cpu="4", min_cpu="4", attributes={ZONE_MAX_ATTRIBUTE: "a100 cpu=1"}
    )
    manifest = elastic_quota_tree(root, name="t")
    with pytest.raises(TreeInvalid) as refused:
        parse_tree(manifest)
    assert [e.path for e in refused.value.errors] == [FIELD]


@dataclass
class _Node:
    path: QuotaPath
    zone_max: ZoneCaps = field(default_factory=dict)
    zone_used: ZoneCaps = field(default_factory=dict)


@pytest.mark.parametrize(
    ("root_cap", "leaf_cap", "used", "zone", "ask", "short"),
    [
        # No cap in the zone: nothing is short, however much is used.
        (None, None, 100, "a100", 4, None),
        # The leaf's cap: 6 + 4 > 8 names the leaf.
        (None, 8, 6, "a100", 4, ("root/gpu-team", 6, 8)),
        (None, 8, 4, "a100", 4, None),
        # Both capped: the leaf (nearest) is named first.
        (9, 8, 6, "a100", 4, ("root/gpu-team", 6, 8)),
        (9, 12, 6, "a100", 4, ("root", 6, 9)),
        # Another zone's cap does not apply.
        (None, 8, 6, "h100", 4, None),
    ],
)
def test_zone_shortfall_counts_per_zone_nearest_first(
    root_cap: int | None,
    leaf_cap: int | None,
    used: int,
    zone: str,
    ask: int,
    short: tuple[str, int, int] | None,
) -> None:
    root = _Node(QuotaPath("root"), {Zone("a100"): {GPU: root_cap}} if root_cap else {})
    leaf = _Node(QuotaPath("root/gpu-team"), {Zone("a100"): {GPU: leaf_cap}} if leaf_cap else {})
    count_in_zone([root, leaf], Zone("a100"), ((GPU, used),), 1)
    found = zone_shortfall([root, leaf], Zone(zone), ((GPU, ask),))
    if short is None:
        assert found is None
    else:
        assert found is not None
        assert (found.node, found.used, found.cap) == short


def test_count_in_zone_touches_only_nodes_capping_that_zone() -> None:
    capped = _Node(QuotaPath("root"), {Zone("a100"): {GPU: 8}})
    free = _Node(QuotaPath("root/x"))
    count_in_zone([capped, free], Zone("a100"), ((GPU, 3),), 1)
    count_in_zone([capped, free], Zone("h100"), ((GPU, 5),), 1)
    assert (capped.zone_used, free.zone_used) == ({"a100": {GPU: 3}}, {})
    count_in_zone([capped, free], Zone("a100"), ((GPU, 3),), -1)
    assert capped.zone_used == {"a100": {GPU: 0}}


def test_zone_reason_has_the_numbers() -> None:
    node = _Node(QuotaPath("root/gpu-team"), {Zone("a100"): {GPU: 8}}, {Zone("a100"): {GPU: 6}})
    found = zone_shortfall([node], Zone("a100"), ((GPU, 4),))
    assert found is not None
    reason = zone_quota_exceeded(found)
    assert (
        reason.message == "root/gpu-team nvidia.com/gpu in zone a100: 6 used + 4 requested > max 8"
    )
    assert (reason.code, reason.used, reason.requested, reason.limit) == (
        "ZoneQuotaExceeded",
        6,
        4,
        8,
    )


@pytest.mark.parametrize(
    ("annotation", "label", "zones", "error"),
    [
        (None, None, [], None),
        ("a100,h100", None, ["a100", "h100"], None),
        (" a100 , h100 ", "a100", ["a100", "h100"], None),
        ("a100,h100", "h100", [], "must be the job's usher.io/zone label"),
        ("a100,,h100", None, [], "comma-separated"),
        ("a100,a100", None, [], "names a zone twice"),
        ("", None, [], "comma-separated"),
    ],
)
def test_accepted_zones_annotation(
    annotation: str | None, label: str | None, zones: list[str], error: str | None
) -> None:
    annotations = {} if annotation is None else {"usher.io/zones": annotation}
    parsed, errors = parse_accepted_zones(annotations, label, "metadata.annotations.")
    assert parsed == zones
    if error is None:
        assert errors == []
    else:
        assert len(errors) == 1 and error in errors[0].message
        assert errors[0].path == "metadata.annotations.usher.io/zones"


@pytest.mark.parametrize(
    ("labels", "annotations", "owner"),
    [
        ({}, {}, None),
        ({"usher.io/zone": "a100"}, {"usher.io/zones": "a100,h100"}, "a100"),
        ({}, {"usher.io/zones": "h100, a100"}, "h100"),
    ],
)
def test_owner_zone(labels: dict[str, str], annotations: dict[str, str], owner: str | None) -> None:
    assert owner_zone(labels, annotations) == owner


def _job(annotations: dict[str, str], labels: dict[str, str] | None = None) -> dict[str, object]:
    container = {"name": "w", "image": "x", "resources": {"requests": {"cpu": "1"}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "n", "annotations": annotations, "labels": labels},
        "spec": {"suspend": True, "template": {"spec": {"containers": [container]}}},
    }


def test_the_first_accepted_zone_owns_a_job_without_a_label() -> None:
    observed = extract_workload(_job({"usher.io/zones": "h100,a100"}), created_ms=0)
    assert (observed.zone, observed.zones) == ("h100", ["h100", "a100"])


def test_a_label_other_than_the_first_accepted_zone_is_refused() -> None:
    with pytest.raises(WorkloadInvalid):
        extract_workload(
            _job({"usher.io/zones": "h100,a100"}, {"usher.io/zone": "a100"}), created_ms=0
        )


_FULL = Reason(code="ZoneQuotaExceeded", message="a100 full")
_NODES = Reason(code="ZoneCapacity", message="h100 nodes full")


@pytest.mark.parametrize(
    ("short", "chosen", "passed"),
    [
        ({}, "a100", []),
        ({"a100": _FULL}, "h100", ["a100"]),
        ({"a100": _FULL, "h100": _NODES}, "v100", ["a100", "h100"]),
        ({"a100": _FULL, "h100": _NODES, "v100": _FULL}, None, ["a100", "h100", "v100"]),
    ],
)
def test_zone_choice_takes_the_first_that_fits_in_order(
    short: dict[str, Reason], chosen: str | None, passed: list[str]
) -> None:
    zones = [Zone("a100"), Zone("h100"), Zone("v100")]
    got, over = zone_choice(zones, lambda zone: short.get(zone))
    assert got == chosen
    assert [zone for zone, _ in over] == passed


def test_passed_over_reasons_name_each_zone() -> None:
    over = [(Zone("a100"), _FULL), (Zone("h100"), _NODES)]
    admitted = passed_over(Zone("v100"), over)
    assert admitted.code == "ZoneFallback"
    assert admitted.message == (
        "admitted in zone v100, passed over zone a100: a100 full; zone h100: h100 nodes full"
    )
    waiting = passed_over(None, over)
    assert waiting.code == "ZoneQuotaExceeded"
    assert waiting.message.startswith("no accepted zone fits now: zone a100: a100 full")


# ---------------------------------------------------------------- through the engine (Z1, Z2)


def _two_zone_engines() -> tuple[Engine, Engine]:
    """The dequeuers of zones a100 and h100, over a root that caps a100 at 10 cpu."""
    tree = two_leaf_tree(("a1",))
    tree = msgspec.structs.replace(tree, attributes={ZONE_MAX_ATTRIBUTE: "a100: cpu=10"})
    engines = []
    for zone in ("a100", "h100"):
        engine = Engine(EngineConfig(zones=frozenset({Zone(zone)})))
        engine.apply(QuotaTreeApplied(root=tree), Millis(0))
        engines.append(engine)
    return engines[0], engines[1]


def _flex(suspended: bool = True) -> WorkloadObserved:
    job = observed("a1", "flex", 4, zone="a100", created=1)
    return msgspec.structs.replace(job, zones=[Zone("a100"), Zone("h100")], suspended=suspended)


def _apply_all(engines: tuple[Engine, Engine], event: object, now: int) -> None:
    for engine in engines:
        engine.apply(event, Millis(now))  # type: ignore[arg-type]


def test_each_accepted_zones_dequeuer_admits_only_into_its_own_zone_once() -> None:
    a100, h100 = engines = _two_zone_engines()
    _apply_all(engines, observed("a1", "fill", 10, zone="a100"), 0)
    _apply_all(engines, admitted("a1/fill", 10, zone="a100"), 0)
    _apply_all(engines, _flex(), 1)
    assert [d for d in a100.decide(Millis(2)) if isinstance(d, Admitted)] == []
    reason = a100.reason(WorkloadKey("a1/flex"))
    assert reason is not None and reason.message.startswith("fits now")
    decided = [d for d in h100.decide(Millis(2)) if isinstance(d, Admitted)]
    assert [(d.workload, d.zone) for d in decided] == [("a1/flex", "h100")]
    assert decided[0].reason is not None and decided[0].reason.code == "ZoneFallback"
    a100.apply(decided[0], Millis(3))
    # Seen running (no longer suspended) and a100 freed: it stays in h100, admitted once.
    _apply_all(engines, _flex(suspended=False), 4)
    _apply_all(engines, WorkloadFinished(workload=WorkloadKey("a1/fill")), 5)
    for engine in engines:
        assert [d for d in engine.decide(Millis(6)) if isinstance(d, Admitted)] == []
        view = engine.jobs()[WorkloadKey("a1/flex")]
        assert view.state == "Admitted"
        # fill's usage lingers until the ledger's Released; flex counts once, not in a100.
        assert engine.quota_used()[QuotaPath("root")]["cpu"] == 14 * CORE
        root = engine.state.tree.nodes[QuotaPath("root")]
        assert root.zone_used == {Zone("a100"): {"cpu": 10 * CORE}}
    restored = restore(snapshot(a100), a100.config)
    assert restored.state.jobs[WorkloadKey("a1/flex")].zones == (Zone("a100"), Zone("h100"))
    assert restored.state.jobs[WorkloadKey("a1/flex")].zone == Zone("h100")


def test_a_released_fallback_waits_in_its_first_zone_again() -> None:
    a100, h100 = engines = _two_zone_engines()
    _apply_all(engines, observed("a1", "fill", 10, zone="a100"), 0)
    _apply_all(engines, admitted("a1/fill", 10, zone="a100"), 0)
    _apply_all(engines, _flex(), 1)
    decided = [d for d in h100.decide(Millis(2)) if isinstance(d, Admitted)]
    a100.apply(decided[0], Millis(3))
    for engine in engines:
        engine.revert_admission(WorkloadKey("a1/flex"), Reason(code="StaleView", message="x"))
        job = engine.state.jobs[WorkloadKey("a1/flex")]
        assert (job.zone, job.state) == (Zone("a100"), "Pending")


@settings(max_examples=100, deadline=None)
@given(configs, trees(), ops, st.booleans())
def test_usage_split_by_zone_sums_to_each_nodes_total(
    config: EngineConfig, tree: QuotaNode, stream: list[Op], release_at_once: bool
) -> None:
    """What the zone usage gauges read (every zone, not only capped ones): per node, summed
    over zones, exactly ``quota_used`` after every pass -- finished usage lingering until its
    ``Released`` (R7) included when release is not instant -- but for what a reclaim's victims
    still add above their preemptor's hold until seen stopped (the node's ``residual``, R7),
    which the engine's per-zone counts (Z1, Z4) never include either."""
    config = dataclasses.replace(config, instant_release=release_at_once)

    def verify(engine: Engine, _made: object) -> None:
        summed: dict[QuotaPath, dict[str, int]] = {}
        for (path, _zone), amounts in engine.quota_used_by_zone().items():
            into = summed.setdefault(path, {})
            for resource, amount in amounts.items():
                into[resource] = into.get(resource, 0) + amount
        nonzero = {p: {r: a for r, a in u.items() if a} for p, u in summed.items()}
        settled: dict[QuotaPath, dict[str, int]] = {}
        for path, used in engine.quota_used().items():
            residual = engine.state.tree.nodes[path].residual
            amounts = {r: a - residual.get(r, 0) for r, a in used.items()}
            settled[path] = {r: a for r, a in amounts.items() if a}
        assert {p: u for p, u in nonzero.items() if u} == {p: u for p, u in settled.items() if u}

    play(config, tree, [*stream, Op("pass", 0)], verify)
