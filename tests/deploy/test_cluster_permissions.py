"""Several clusters (M1) on a real nats-server with the local stack's users: each cluster's
watcher may publish only its own zones' jobs and nodes and its own connection, no watcher may
declare a cluster lost, and the admin (the operator) may."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas import ClusterName, Zone
from tests.deploy.test_nats_permissions import EVERYONE, login, password
from usher.adapters.nats.permissions import identities
from usher.adapters.nats.subjects import Subjects
from usher.local.servers import NatsServer

CLUSTERS = {
    ClusterName("default"): (Zone("default"), Zone("a")),
    ClusterName("c2"): (Zone("c2"),),
}
USERS = (*EVERYONE, "watcher-c2")


@pytest.fixture(scope="module")
def clusters_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home: Path = tmp_path_factory.mktemp("nats-clusters")
    server = NatsServer(home, passwords={user: password(user) for user in USERS}, clusters=CLUSTERS)
    try:
        yield server.start()
    finally:
        server.stop()


def test_each_other_cluster_has_its_own_watcher_identity() -> None:
    names = [i.name for i in identities(Subjects("usher"), clusters=CLUSTERS)]
    assert names.count("watcher") == 1 and names.count("watcher-c2") == 1


@pytest.mark.parametrize(
    ("user", "subject", "refused"),
    [
        ("watcher-c2", "usher.cluster.c2.job.user-a.j", False),
        ("watcher-c2", "usher.cluster.node.c2.node-c2", False),
        ("watcher-c2", "usher.cluster.fleet.c2.connected", False),
        ("watcher-c2", "usher.cluster.fleet.c2.disconnected", False),
        ("watcher-c2", "usher.cluster.a.job.user-a.j", True),
        ("watcher-c2", "usher.cluster.node.a.node-a", True),
        ("watcher-c2", "usher.cluster.fleet.default.disconnected", True),
        ("watcher-c2", "usher.cluster.quota", True),
        ("watcher-c2", "usher.cluster.priorityclass.high", True),
        ("watcher-c2", "usher.cluster.lost.c2", True),
        ("watcher-c2", "usher.decision.c2.admitted.user-a.j", True),
        ("watcher", "usher.cluster.a.job.user-a.j", False),
        ("watcher", "usher.cluster.fleet.default.connected", False),
        ("watcher", "usher.cluster.quota", False),
        ("watcher", "usher.cluster.c2.job.user-a.j", True),
        ("watcher", "usher.cluster.node.c2.node-c2", True),
        ("watcher", "usher.cluster.fleet.c2.disconnected", True),
        ("watcher", "usher.cluster.lost.c2", True),
        ("watcher", "usher.cluster.lost.default", True),
        ("admin", "usher.cluster.lost.c2", False),
    ],
)
async def test_a_clusters_watcher_publishes_only_for_its_cluster(
    clusters_url: str, user: str, subject: str, refused: bool
) -> None:
    async with login(clusters_url, user) as session:
        assert await session.is_refused(subject) == refused
