"""TP1 topology fit (docs/admission-rules.md): the level parsers, a job's ask at intake, the
domain choice as a table, the pin the kind registry writes, and what-if over another level.
The scenarios 200-203 pin the engine's decisions end to end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import (
    Millis,
    NodeName,
    NodeObserved,
    TopologyAsk,
    TopologyPin,
    WorkloadKey,
    WorkloadObserved,
    Zone,
)
from tests.builders.log import Log
from tests.builders.manifests import batch_job, container, pod_template
from tests.builders.trees import departments_tree
from usher.core.history import explain, whatif
from usher.core.intake.workload import extract_workload
from usher.core.kinds import batch, jobset
from usher.core.kinds.topology import BOTH_CODE, pinned
from usher.core.model.config import EngineConfig
from usher.core.model.errors import ValueRefused, WorkloadInvalid
from usher.core.rules.topology import choose, rooms
from usher.core.values.labels import (
    MAX_LEVELS,
    MAX_NODE_LABELS,
    level_noun,
    topology_labels,
    topology_levels,
)
from usher.core.values.registry import TOPOLOGY_LEVELS

BLOCK = "topology.usher.io/block"
RACK = "topology.usher.io/rack"
HOST = "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOST)


# ---------------------------------------------------------------------------- values


def test_levels_parse_in_their_order_with_spaces_around_commas() -> None:
    raw = f"{BLOCK} , {RACK},{HOST}, cloud.example.com/topology-nvlink"
    assert topology_levels(raw, "p") == [*LEVELS, "cloud.example.com/topology-nvlink"]
    assert [level_noun(level) for level in topology_levels(raw, "p")] == [
        "block",
        "rack",
        "hostname",
        "nvlink",
    ]


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("example.com/rack", "invalid-value"),  # a label no watcher publishes
        (f"{RACK},{RACK}", "invalid-value"),
        (f"{RACK},,{HOST}", "invalid-value"),
        ("topology.usher.io/-rack", "invalid-value"),
        ("Topology.usher.io/rack", "invalid-value"),  # a prefix is lower case
        ("topology.usher.io/" + "r" * 64, "invalid-value"),
        (",".join(f"topology.usher.io/l{n}" for n in range(MAX_LEVELS + 1)), "too-long"),
        ("topology." + "a" * 300, "invalid-value"),
        ("topology," * 10_000, "too-long"),
        (5, "invalid-type"),
    ],
)
def test_bad_levels_are_refused_naming_the_attribute(raw: object, code: str) -> None:
    with pytest.raises(ValueRefused) as raised:
        TOPOLOGY_LEVELS.check(raw, "spec.root.attributes")
    [error] = raised.value.errors
    assert (error.path, error.code) == ("spec.root.attributes.usher.io/topology-levels", code)


def test_a_nodes_labels_keep_only_bounded_topology_ones() -> None:
    labels: dict[str, object] = {
        RACK: "rack-1",
        HOST: "n1",
        "kubernetes.io/os": "linux",  # not a level
        BLOCK: "bad value!",  # not a label value
        "topology.usher.io/x": 5,
    }
    assert topology_labels(labels) == {HOST: "n1", RACK: "rack-1"}
    many = {f"topology.usher.io/l{n:02}": "v" for n in range(40)}
    assert len(topology_labels(many)) == MAX_NODE_LABELS
    assert topology_labels(["not", "a", "mapping"]) == {}


# ---------------------------------------------------------------------------- intake


def _job(annotations: dict[str, object]) -> dict[str, object]:
    manifest = batch_job("g", "a", template=pod_template(container(cpu="1")), parallelism=2)
    manifest["metadata"]["annotations"] = annotations
    return manifest


def test_a_job_asks_required_or_preferred_and_never_both() -> None:
    required = extract_workload(_job({"usher.io/topology-required": RACK}), created_ms=0)
    assert required.topology == TopologyAsk(level=RACK, required=True)
    preferred = extract_workload(_job({"usher.io/topology-preferred": BLOCK}), created_ms=0)
    assert preferred.topology == TopologyAsk(level=BLOCK, required=False)
    assert extract_workload(_job({}), created_ms=0).topology is None
    both = {"usher.io/topology-required": RACK, "usher.io/topology-preferred": BLOCK}
    with pytest.raises(WorkloadInvalid) as raised:
        extract_workload(_job(both), created_ms=0)
    [error] = raised.value.errors
    assert (error.path, error.code) == (
        "metadata.annotations.usher.io/topology-preferred",
        BOTH_CODE,
    )
    with pytest.raises(WorkloadInvalid) as bad:
        extract_workload(_job({"usher.io/topology-required": "rack"}), created_ms=0)
    assert bad.value.errors[0].path == "metadata.annotations.usher.io/topology-required"


# ---------------------------------------------------------------------------- the choice


@dataclass(frozen=True)
class N:
    """A node as the fit reads it."""

    allocatable: dict[str, int]
    labels: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False


def _node(name: str, block: str, rack: str, gpu: int = 8, *, cordoned: bool = False) -> N:
    labels = {BLOCK: block, RACK: rack, HOST: name}
    return N({"gpu": gpu}, labels, cordoned)


NODES = {
    NodeName("n1"): _node("n1", "b1", "r1"),
    NodeName("n2"): _node("n2", "b1", "r1"),
    NodeName("n3"): _node("n3", "b1", "r2"),
    NodeName("n4"): _node("n4", "b2", "r3"),
    NodeName("n5"): _node("n5", "b2", "r3"),
    NodeName("n6"): _node("n6", "b2", "r3", cordoned=True),
}
POD = (("gpu", 8),)


def _gang(pods: int) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
    return (POD,), (("gpu", 8 * pods),)


@pytest.mark.parametrize(
    ("ask", "pods", "pinned", "fits", "pin", "best"),
    [
        # The tightest rack that holds it wins: r2 (1 node) for one pod.
        (TopologyAsk(level=RACK), 1, [], True, (RACK, "r2"), None),
        # Two pods: r1 and r3 hold 16 (the cordoned node counts nothing); r1 by name.
        (TopologyAsk(level=RACK), 2, [], True, (RACK, "r1"), None),
        # r1 taken: r3.
        (TopologyAsk(level=RACK), 2, [((RACK, "r1"), 8)], True, (RACK, "r3"), None),
        # Three pods fit no rack: required waits, naming the rack with the most room.
        (TopologyAsk(level=RACK), 3, [], False, None, "r1"),
        # Preferred goes one level up: block b1 holds three.
        (TopologyAsk(level=RACK, required=False), 3, [], True, (BLOCK, "b1"), None),
        # A block pin counts in each of its racks: r1 and r2 are full for a rack ask.
        (TopologyAsk(level=RACK), 2, [((BLOCK, "b1"), 16)], True, (RACK, "r3"), None),
        # Four pods fit no rack nor block: preferred places it anywhere (no pin).
        (TopologyAsk(level=RACK, required=False), 4, [], True, None, None),
        # A level the tree does not name: required never fits, preferred fits anywhere.
        (TopologyAsk(level="topology.usher.io/row"), 1, [], False, None, None),
        (TopologyAsk(level="topology.usher.io/row", required=False), 1, [], True, None, None),
    ],
)
def test_the_domain_choice(
    ask: TopologyAsk,
    pods: int,
    pinned: list[tuple[tuple[str, str], int]],
    fits: bool,
    pin: tuple[str, str] | None,
    best: str | None,
) -> None:
    shapes, request = _gang(pods)
    taken = [
        (TopologyPin(level=level, domain=domain), (("gpu", gpu),))
        for (level, domain), gpu in pinned
    ]
    choice = choose(ask, LEVELS, NODES, taken, shapes, request)
    assert choice.fits is fits
    assert (None if choice.pin is None else (choice.pin.level, choice.pin.domain)) == pin
    assert (None if choice.best is None else choice.best.domain) == best


def test_a_pod_larger_than_every_node_of_a_domain_never_fits_it() -> None:
    nodes = {NodeName("a"): _node("a", "b1", "r1", gpu=4), NodeName("b"): _node("b", "b1", "r1")}
    choice = choose(TopologyAsk(level=RACK), LEVELS, nodes, [], [(("gpu", 6),)], (("gpu", 6),))
    assert choice.fits
    small = {NodeName("a"): _node("a", "b1", "r1", gpu=4), NodeName("c"): _node("c", "b1", "r2")}
    taken = [(TopologyPin(level=RACK, domain="r2"), (("gpu", 8),))]
    refused = choose(TopologyAsk(level=RACK), LEVELS, small, taken, [(("gpu", 6),)], (("gpu", 6),))
    assert not refused.fits
    assert refused.best is not None and not refused.best.holds_each_pod


# ---------------------------------------------------------------------------- the pin


def test_the_pin_joins_the_zone_selector_in_every_pod_template() -> None:
    pin = TopologyPin(level=RACK, domain="r2")
    job = batch_job("g", "a", template=pod_template(container(cpu="1")))
    spec = pinned(batch.JOB.selector_patch(job["spec"], "default"), pin)
    assert spec["template"]["spec"]["nodeSelector"] == {"usher.io/zone": "default", RACK: "r2"}
    replicated = {
        "replicatedJobs": [
            {"name": name, "template": {"spec": {"template": pod_template(container(cpu="1"))}}}
            for name in ("leader", "workers")
        ]
    }
    [family] = jobset.FAMILIES
    patched = pinned(family.selector_patch(replicated, "default"), pin)
    selectors = [
        item["template"]["spec"]["template"]["spec"]["nodeSelector"]
        for item in patched["replicatedJobs"]
    ]
    assert selectors == [{"usher.io/zone": "default", RACK: "r2"}] * 2
    assert pinned(spec, None) is spec


# ---------------------------------------------------------------------------- what-if


def _racked_log() -> Log:
    """Two racks of two 16-cpu nodes in one block; user-a/big asks 3 x 12 cpu in one rack."""
    tree = departments_tree()
    root = msgspec.structs.replace(tree, attributes={"usher.io/topology-levels": f"{BLOCK},{RACK}"})
    log = Log().tree(0, root)
    for index, rack in enumerate(("r1", "r1", "r2", "r2")):
        node = NodeObserved(
            node=NodeName(f"n{index}"),
            zone=Zone("default"),
            allocatable={"cpu": 16_000},
            labels={BLOCK: "b1", RACK: rack},
        )
        log.add(0, node)
    log.job(1, "user-a/big", 36, pods=3)
    _, envelope = log.entries[-1]
    assert isinstance(envelope.event, WorkloadObserved)
    asked = msgspec.structs.replace(envelope.event, topology=TopologyAsk(level=RACK))
    log.entries[-1] = (log.entries[-1][0], msgspec.structs.replace(envelope, event=asked))
    return log


@pytest.mark.parametrize("level", [BLOCK, whatif.NO_TOPOLOGY])
def test_what_if_another_level_admits_a_gang_no_rack_holds(level: str) -> None:
    config = EngineConfig()
    report = whatif.what_if(
        _racked_log().history(),
        whatif.WhatIfSpec(
            baseline=whatif.Variant(config=config),
            changed=whatif.Variant(config=config, topology_level=level),
        ),
    )
    assert (report.overall.baseline.admitted, report.overall.whatif.admitted) == (0, 1)
    assert report.whatif.topology_level == level
    assert f"topology level {level}" in whatif.render_whatif_table(report)


def test_a_bad_topology_level_flag_names_the_flag() -> None:
    with pytest.raises(whatif.ZonePolicyError) as raised:
        whatif.parse_topology_level("rack")
    assert raised.value.flag == "--topology-level"
    assert whatif.parse_topology_level(None) is None
    assert whatif.parse_topology_level(RACK) == RACK


# ---------------------------------------------------------------------------- explain


def test_explain_says_which_rack_came_closest() -> None:
    log = _racked_log()
    told = explain.explain(log.history(), EngineConfig(), WorkloadKey("user-a/big"), Millis(0))
    assert told.state == "Pending"
    assert told.reason is not None and told.reason.code == "TopologyNoFit"
    assert told.reason.message.startswith(
        "needs 3 x 12 cpu in one rack; best r1 has 2 x 12 cpu free"
    )
    assert "TopologyNoFit: needs 3 x 12 cpu in one rack" in explain.render_explain_table(told)


# ---------------------------------------------------------------------------- properties


@st.composite
def _clusters(draw: st.DrawFn) -> tuple[dict[NodeName, N], list[tuple[TopologyPin, Any]]]:
    count = draw(st.integers(min_value=0, max_value=8))
    nodes = {
        NodeName(f"n{i}"): _node(
            f"n{i}",
            draw(st.sampled_from(["b1", "b2"])),
            draw(st.sampled_from(["r1", "r2", "r3"])),
            draw(st.integers(min_value=0, max_value=16)),
            cordoned=draw(st.booleans()),
        )
        for i in range(count)
    }
    pins = draw(
        st.lists(
            st.tuples(
                st.sampled_from([(RACK, "r1"), (RACK, "r2"), (BLOCK, "b1"), (HOST, "n0")]),
                st.integers(min_value=0, max_value=24),
            ),
            max_size=4,
        )
    )
    taken = [(TopologyPin(level=level, domain=d), (("gpu", gpu),)) for (level, d), gpu in pins]
    return nodes, taken


@settings(max_examples=200, deadline=None)
@given(
    cluster=_clusters(),
    level=st.sampled_from(LEVELS),
    required=st.booleans(),
    pods=st.integers(min_value=1, max_value=6),
    gpu=st.integers(min_value=1, max_value=16),
)
def test_a_chosen_domain_always_holds_the_gang_and_the_order_of_nodes_never_matters(
    cluster: tuple[dict[NodeName, N], list[tuple[TopologyPin, Any]]],
    level: str,
    required: bool,
    pods: int,
    gpu: int,
) -> None:
    nodes, taken = cluster
    ask = TopologyAsk(level=level, required=required)
    pod = (("gpu", gpu),)
    request = (("gpu", gpu * pods),)
    choice = choose(ask, LEVELS, nodes, taken, [pod], request)
    backwards = dict(reversed(list(nodes.items())))
    assert choose(ask, LEVELS, backwards, taken, [pod], request) == choice
    if choice.pin is not None:
        assert choice.fits
        allowed = LEVELS[: LEVELS.index(level) + 1]
        assert choice.pin.level == level if required else choice.pin.level in allowed
        [room] = [
            r for r in rooms(nodes, choice.pin.level, taken, [pod]) if r.domain == choice.pin.domain
        ]
        assert room.fits(request)
        members = [n for n in nodes.values() if n.labels.get(choice.pin.level) == choice.pin.domain]
        assert any(not n.unschedulable and n.allocatable["gpu"] >= gpu for n in members)
    elif required:
        assert not choice.fits
        assert all(not r.fits(request) for r in rooms(nodes, level, taken, [pod]))
    else:
        assert choice.fits
