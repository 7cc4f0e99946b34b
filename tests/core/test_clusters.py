"""Several clusters under one queue (M1): the mapping's parser, the keys, the links, the gate
and who may say a cluster connected, disconnected or lost."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import (
    DEFAULT_CLUSTER,
    ClusterConnected,
    ClusterDisconnected,
    ClusterLost,
    ClusterName,
    Envelope,
    EventId,
    Millis,
    WorkloadKey,
    Zone,
    cluster_of,
    object_name,
    workload_key,
)
from tests.builders.log import Log
from usher.core.history.explain import explain
from usher.core.model.config import EngineConfig
from usher.core.model.errors import ValueRefused
from usher.core.protocol.subjects import OPERATOR_SOURCE, WATCHER_SOURCE, Subjects
from usher.core.rules import clusters
from usher.core.state.indexed import JobState
from usher.core.values.clusters import (
    MAX_CLUSTERS,
    format_cluster_zones,
    parse_cluster_zones,
)

WEST = ClusterName("west")
SUBJECTS = Subjects("usher")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("west=b200", {"west": ("b200",)}),
        ("east=a100,h100;west=b200", {"east": ("a100", "h100"), "west": ("b200",)}),
        (" east = a100 , h100 ; west=b200 ", {"east": ("a100", "h100"), "west": ("b200",)}),
    ],
)
def test_a_mapping_names_each_clusters_zones_in_order(
    text: str, expected: dict[str, tuple[str, ...]]
) -> None:
    assert parse_cluster_zones(text, "clusters") == expected


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("", "invalid-format"),
        ("west", "invalid-format"),
        ("west=", "invalid-value"),
        ("West=a", "invalid-value"),
        ("west=a;west=b", "duplicate"),
        ("east=a;west=a", "duplicate"),
        ("west=a,a", "invalid-value"),
        ("west=a;", "invalid-format"),
        (";".join(f"c{i}=z{i}" for i in range(MAX_CLUSTERS + 1)), "too-many"),
        ("w=" + "a," * 10_000, "too-long"),
    ],
)
def test_a_bad_mapping_is_refused_naming_why(text: str, code: str) -> None:
    with pytest.raises(ValueRefused) as refused:
        parse_cluster_zones(text, "clusters")
    assert refused.value.code == code


LABELS = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(LABELS, st.lists(LABELS, min_size=1, max_size=4, unique=True), max_size=5))
def test_a_mapping_reads_back_as_written(raw: dict[str, list[str]]) -> None:
    seen: set[str] = set()
    mapping = {}
    for cluster, zones in raw.items():
        mine = tuple(Zone(zone) for zone in zones if zone not in seen)
        seen.update(mine)
        if mine:
            mapping[ClusterName(cluster)] = mine
    if mapping:
        assert parse_cluster_zones(format_cluster_zones(mapping), "m") == mapping


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_a_mapping_or_refused_never_a_crash(text: str) -> None:
    try:
        mapping = parse_cluster_zones(text, "m")
    except ValueRefused:
        return
    assert 0 < len(mapping) <= MAX_CLUSTERS


@pytest.mark.parametrize(
    ("namespace", "name", "cluster", "key"),
    [
        ("team", "job", DEFAULT_CLUSTER, "team/job"),
        ("team", "job", WEST, "team/job@west"),
        ("team", "a.b", WEST, "team/a.b@west"),
    ],
)
def test_a_key_names_its_cluster_outside_the_default_one(
    namespace: str, name: str, cluster: ClusterName, key: str
) -> None:
    made = workload_key(namespace, name, cluster)
    assert made == key
    assert cluster_of(made) == cluster
    assert object_name(made) == (namespace, name)


def test_the_same_object_in_two_clusters_has_two_keys() -> None:
    assert workload_key("team", "job") != workload_key("team", "job", WEST)


def _links(
    *events: ClusterConnected | ClusterDisconnected | ClusterLost,
) -> dict[ClusterName, clusters.ClusterLink]:
    links: dict[ClusterName, clusters.ClusterLink] = {}
    for at, event in enumerate(events):
        links[event.cluster] = clusters.fold_link(links, event, Millis(at * 1000))
    return links


def test_the_first_cluster_to_claim_a_zone_keeps_it() -> None:
    links = _links(
        ClusterConnected(cluster=WEST, zones=[Zone("b200")]),
        ClusterConnected(cluster=ClusterName("rogue"), zones=[Zone("b200"), Zone("r1")]),
    )
    assert clusters.zone_owners(links) == {Zone("b200"): WEST, Zone("r1"): ClusterName("rogue")}


@pytest.mark.parametrize(
    ("events", "key", "zones", "code"),
    [
        ((), "team/a@west", ("b200",), None),
        ((ClusterConnected(cluster=WEST, zones=[Zone("b200")]),), "team/a@west", ("b200",), None),
        (
            (
                ClusterConnected(cluster=WEST, zones=[Zone("b200")]),
                ClusterDisconnected(cluster=WEST, reason="refused"),
            ),
            "team/a@west",
            ("b200",),
            "ClusterDisconnected",
        ),
        (
            (
                ClusterConnected(cluster=WEST, zones=[Zone("b200")]),
                ClusterDisconnected(cluster=WEST),
            ),
            "team/a",
            ("a100",),
            None,
        ),
        (
            (ClusterLost(cluster=WEST, by="ops"),),
            "team/a@west",
            ("b200",),
            "ClusterLost",
        ),
        (
            (
                ClusterLost(cluster=WEST, by="ops"),
                ClusterConnected(cluster=WEST, zones=[Zone("b200")]),
            ),
            "team/a@west",
            ("b200",),
            None,
        ),
        (
            (ClusterConnected(cluster=WEST, zones=[Zone("b200")]),),
            "team/a",
            ("a100", "b200"),
            "ZoneInOtherCluster",
        ),
    ],
)
def test_a_waiting_workload_is_shut_only_by_its_own_cluster(
    events: tuple[ClusterConnected | ClusterDisconnected | ClusterLost, ...],
    key: str,
    zones: tuple[str, ...],
    code: str | None,
) -> None:
    links = _links(*events)
    reason = clusters.stop(
        links, clusters.zone_owners(links), WorkloadKey(key), [Zone(z) for z in zones]
    )
    assert (reason.code if reason is not None else None) == code


def test_a_lost_cluster_keeps_its_zones_and_says_who_declared_it() -> None:
    links = _links(
        ClusterConnected(cluster=WEST, zones=[Zone("b200")]),
        ClusterLost(cluster=WEST, by="ops", reason="flood"),
    )
    assert links[WEST].state == clusters.LinkState.LOST
    assert links[WEST].zones == (Zone("b200"),)
    assert links[WEST].why == "by ops: flood"


def _envelope(event: ClusterConnected | ClusterDisconnected | ClusterLost, source: str) -> Envelope:
    return Envelope(
        id=EventId("e"), time=datetime(2026, 1, 1, tzinfo=UTC), source=source, event=event
    )


@pytest.mark.parametrize(
    "event",
    [
        ClusterConnected(cluster=WEST, zones=[Zone("b200")]),
        ClusterDisconnected(cluster=WEST),
        ClusterLost(cluster=WEST, by="ops"),
    ],
)
def test_a_clusters_state_is_believed_only_on_its_subject_from_its_owner(
    event: ClusterConnected | ClusterDisconnected | ClusterLost,
) -> None:
    home, owner = SUBJECTS.owner(event, Zone("b200"))
    assert owner == (OPERATOR_SOURCE if isinstance(event, ClusterLost) else WATCHER_SOURCE)
    assert SUBJECTS.owner_problem(home, _envelope(event, owner)) is None
    other = type(event)(**{**_fields(event), "cluster": ClusterName("east")})
    assert SUBJECTS.owner_problem(home, _envelope(other, owner)) is not None
    for subject in ("usher.cluster.quota", SUBJECTS.fleet(WEST, "lost"), "usher.decision.x"):
        if subject != home:
            assert SUBJECTS.owner_problem(subject, _envelope(event, owner)) is not None
    impostor = WATCHER_SOURCE if owner == OPERATOR_SOURCE else OPERATOR_SOURCE
    assert SUBJECTS.owner_problem(home, _envelope(event, impostor)) is not None


def _fields(event: object) -> dict[str, object]:
    return {name: getattr(event, name) for name in event.__struct_fields__}  # type: ignore[attr-defined]


def test_explain_says_the_cluster_is_disconnected_and_a_forged_loss_changes_nothing() -> None:
    log = Log().tree(0)
    log.add(0, ClusterConnected(cluster=WEST, zones=[Zone("default")]))
    log.add(1, ClusterDisconnected(cluster=WEST, reason="connection refused"))
    log.job(2, "user-a/x@west", 1)
    log.add(3, ClusterLost(cluster=WEST, by="mallory"), source=WATCHER_SOURCE)
    explained = explain(log.history(), EngineConfig(), WorkloadKey("user-a/x@west"), Millis(0))
    assert explained.state == JobState.PENDING
    assert explained.reason is not None and explained.reason.code == "ClusterDisconnected"
    assert "connection refused" in explained.reason.message
    log.add(4, ClusterLost(cluster=WEST, by="ops"))
    explained = explain(log.history(), EngineConfig(), WorkloadKey("user-a/x@west"), Millis(0))
    assert explained.state == JobState.DELETED
