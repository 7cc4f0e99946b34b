"""The console shows topology pins and reasons (TP1) and clusters (M1) as the core folds them:
the log of two clusters and a rack topology (``fleet_log``) folded by ``ConsoleLog``, the pages
asked for through aiohttp's test client (no servers, no browser)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from schemas import ClusterLost, ClusterName, WorkloadFinished, WorkloadKey
from tests.builders.log import Log
from tests.console.fleet_log import GANG, QUEUE, fleet_log
from tests.console.test_console_pages import folded, page
from usher.console import pages
from usher.console.server import make_app
from usher.core.engine import queries
from usher.core.rules.clusters import LinkState


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    async with TestClient(TestServer(make_app(folded(fleet_log())))) as test_client:
        yield test_client


def text_of(html: str) -> str:
    """``html`` without its tags, its white space runs made one space."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def row(html: str, attribute: str, value: str) -> str:
    """The text of the table row whose ``attribute`` is ``value``."""
    return text_of(html.split(f'<tr {attribute}="{value}"')[1].split(">", 1)[1].split("</tr>")[0])


async def test_an_admitted_gangs_page_names_its_domain(client: TestClient) -> None:
    text = await page(client, "/job/train/a")
    domain = text.split('<dd id="domain">')[1].split("</dd>")[0]
    assert text_of(domain) == "all its pods in rack rack-1 (topology.usher.io/rack=rack-1)"
    admitted = text.split('<li class="admitted"')[1].split("</li>")[0]
    assert "in topology.usher.io/rack=rack-1" in admitted  # the story's line, as explain says
    waiting = await page(client, "/job/train/c")
    assert 'id="domain"' not in waiting  # pinned nowhere while it waits


async def test_a_waiting_gang_shows_the_topology_reason_and_admitted_ones_their_rack(
    client: TestClient,
) -> None:
    text = await page(client, f"/queue/{QUEUE}")
    assert row(text, "data-job", "train/c").endswith(
        "TopologyNoFit needs 2 x (4 cpu, 8 nvidia.com/gpu) in one rack; best rack-2 has 1 x "
        "(4 cpu, 8 nvidia.com/gpu) free (zone default: fits once work there ends)"
    )
    admitted = text_of(text.split("<h2>Admitted</h2>")[1].split("</p>")[0])
    assert admitted == "train/a in rack rack-1 , train/w1@west"


async def test_the_clusters_page_shows_each_cluster_and_each_domains_room(
    client: TestClient,
) -> None:
    text = await page(client, "/clusters")
    assert '<a href="/clusters">Clusters</a>' in text  # in the navigation of every page
    assert row(text, "data-cluster", "default") == (
        "default Connected 2024-05-01T12:00:00.000Z default 1 1"
    )
    assert row(text, "data-cluster", "west") == (
        "west Disconnected 2024-05-01T12:00:07.000Z west 1 1 connection refused"
    )
    rack = "default/topology.usher.io/rack="
    # cpu used / allocatable, cpu free, gpu used / allocatable, gpu free
    assert row(text, "data-domain", rack + "rack-1") == "default rack rack-1 8 / 64 56 16 / 16 0"
    assert row(text, "data-domain", rack + "rack-2") == "default rack rack-2 0 / 32 32 0 / 8 8"
    assert row(text, "data-domain", "west/topology.usher.io/rack=rack-w") == (
        "west rack rack-w 0 / 64 64 0 / 16 16"
    )
    assert 'data-domain="default/topology.usher.io/rack=rack-1" class="full"' in text


async def test_a_finished_gang_frees_its_rack_and_a_lost_cluster_shows_lost() -> None:
    log = fleet_log()
    log.add(8, WorkloadFinished(workload=WorkloadKey("train/a"), succeeded=True))
    log.add(9, ClusterLost(cluster=ClusterName("west"), by="ops", reason="flooded"))
    async with TestClient(TestServer(make_app(folded(log)))) as test_client:
        text = await page(test_client, "/clusters")
        assert row(text, "data-domain", "default/topology.usher.io/rack=rack-1") == (
            "default rack rack-1 0 / 64 64 0 / 16 16"
        )
        assert row(text, "data-cluster", "west") == (
            "west Lost 2024-05-01T12:00:09.000Z west 0 0 by ops: flooded"
        )


async def test_a_log_of_one_cluster_without_topology_says_so() -> None:
    async with TestClient(TestServer(make_app(folded(Log().tree(0))))) as test_client:
        text = await page(test_client, "/clusters")
        assert "No cluster on the log: no watcher has announced its cluster" in text
        assert "No topology domain: the tree names no topology level" in text


def test_the_domain_room_is_tp1s_own_count() -> None:
    """What the page shows is ``topology.rooms`` over the zone's pins: the free room the TP1
    reason names for rack-2 (1 x 8 gpu) is the page's, and the rows are only reformatted."""
    feed = folded(fleet_log())
    engine = feed.people.engine
    uses = {(d.zone, d.level, d.domain): d for d in queries.domain_use(engine)}
    rack2 = uses[("default", "topology.usher.io/rack", "rack-2")]
    assert rack2.free == {"cpu": 32000, "nvidia.com/gpu": 8} and rack2.used == {}
    rack1 = uses[("default", "topology.usher.io/rack", "rack-1")]
    assert rack1.used == GANG  # train/a's admission, pinned there
    resources, rows = pages.domain_rows(list(uses.values()))
    assert resources == ["cpu", "nvidia.com/gpu"]
    assert len(rows) == len(uses)
    [view] = [c for c in queries.clusters(engine) if c.cluster == "west"]
    assert (view.state, view.zones, view.admitted, view.pending) == (
        LinkState.DISCONNECTED,
        ("west",),
        1,
        1,
    )
    assert queries.topology_pin(engine, WorkloadKey("train/c")) is None
