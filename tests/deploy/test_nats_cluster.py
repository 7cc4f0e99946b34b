"""The log on a real 3-node JetStream cluster (R3) loses nothing when a node is SIGKILLed.

Three nats-server processes from the wheel on loopback (client and cluster route ports free),
the log created by ``ensure_streams`` with 3 replicas (what the admin does in deploy/, where
USHER_STREAM_REPLICAS is 3). A publisher appends entries with their ``Nats-Msg-Id``, retrying
each until it is acknowledged; mid-run the stream's leader is SIGKILLed. Publishing goes on
(a new leader is elected), and every acknowledged entry is read back, once, through a node
that was not the one killed. The replica count is a setting (``USHER_STREAM_REPLICAS``, 1 to 5)
that reaches the stream's config.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from services.common.settings import SettingsError, load_settings
from usher.adapters.nats.log import ensure_streams, log_stream_config
from usher.adapters.nats.subjects import Subjects
from usher.local.processes import ManagedProcess, free_port
from usher.local.servers import HOST, nats_server_binary

SUBJECTS = Subjects("r3")
NODES = 3
BEFORE_KILL = 150
AFTER_KILL = 150


class Node:
    def __init__(self, home: Path, index: int, routes: list[int]) -> None:
        self.name = f"n{index}"
        self.port = free_port(HOST)
        self.route = routes[index]
        store = home / self.name
        store.mkdir()
        config = store / "nats.conf"
        peers = ", ".join(f"nats-route://{HOST}:{port}" for port in routes)
        config.write_text(
            f'server_name: {self.name}\nlisten: "{HOST}:{self.port}"\n'
            f'jetstream {{ store_dir: "{store / "js"}" }}\n'
            f'cluster {{ name: usher-r3, listen: "{HOST}:{self.route}", routes: [{peers}] }}\n'
        )
        self.process = ManagedProcess(
            self.name, [str(nats_server_binary()), "-c", str(config)], store / "nats.log"
        )

    @property
    def url(self) -> str:
        return f"nats://{HOST}:{self.port}"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[Node]]:
    routes = [free_port(HOST) for _ in range(NODES)]
    nodes = [Node(tmp_path, i, routes) for i in range(NODES)]
    try:
        for node in nodes:
            node.process.start()
        for node in nodes:
            node.process.wait_for_port(HOST, node.port, 20)
        yield nodes
    finally:
        for node in nodes:
            node.process.stop(timeout=10)


async def _ready(url: str, timeout_s: float = 30) -> Client:
    """A client once the cluster's JetStream has a meta leader (it answers account info)."""
    deadline = time.monotonic() + timeout_s
    nc = await nats.connect(url)
    while True:
        try:
            await nc.jetstream().account_info()
            return nc
        except (nats.errors.Error, nats.js.errors.Error):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _publish_until_acked(nc: Client, number: int) -> int:
    """Publish entry ``number`` (its id makes retries harmless) until acknowledged."""
    js = nc.jetstream(timeout=2)
    while True:
        try:
            ack = await js.publish(
                SUBJECTS.quota, f"{number}".encode(), headers={"Nats-Msg-Id": f"entry-{number}"}
            )
            return ack.seq
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError):
            await asyncio.sleep(0.1)  # the leader died: an election is under way


async def _read_all(url: str, expected: int, timeout_s: float = 40) -> list[int]:
    """Every entry of the log as the survivor ``url`` holds it, once it serves reads again
    (after a leader is killed, the stream's new leader may still be elected: creating the
    reading consumer is retried until ``timeout_s``, as a client reconnecting would)."""
    nc = await nats.connect(url)
    got: list[int] = []
    done = asyncio.Event()

    async def on_entry(msg: Msg) -> None:
        got.append(int(msg.data))
        if len(got) >= expected:
            done.set()

    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                sub = await nc.jetstream(timeout=5).subscribe(
                    SUBJECTS.all_cluster, stream=SUBJECTS.stream_name, cb=on_entry,
                    ordered_consumer=True, config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
                )  # fmt: skip
                break
            except (nats.errors.Error, nats.js.errors.Error, TimeoutError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        await asyncio.wait_for(done.wait(), max(5.0, deadline - time.monotonic()))
        await asyncio.sleep(0.3)  # anything beyond the expected count would show up now
        await sub.unsubscribe()
    finally:
        await nc.close()
    return got


async def test_r3_log_keeps_every_acknowledged_entry_when_its_leader_is_killed(
    cluster: list[Node],
) -> None:
    admin = await _ready(cluster[0].url)
    await ensure_streams(admin.jetstream(), SUBJECTS, replicas=3)
    info = await admin.jetstream().stream_info(SUBJECTS.stream_name)
    await admin.close()
    assert info.config.num_replicas == 3
    assert info.cluster is not None and len(info.cluster.replicas or []) == 2

    by_name = {node.name: node for node in cluster}
    publisher = await nats.connect(
        servers=[node.url for node in cluster], reconnect_time_wait=0.2, max_reconnect_attempts=-1
    )
    acked: list[int] = []
    try:
        for number in range(BEFORE_KILL):
            await _publish_until_acked(publisher, number)
            acked.append(number)
        leader = by_name[str(info.cluster.leader)]
        assert leader.process.popen is not None
        leader.process.popen.send_signal(signal.SIGKILL)
        leader.process.popen.wait(5)
        for number in range(BEFORE_KILL, BEFORE_KILL + AFTER_KILL):
            await asyncio.wait_for(_publish_until_acked(publisher, number), 30)
            acked.append(number)
    finally:
        await publisher.close()

    survivor = next(node for node in cluster if node is not leader)
    got = await _read_all(survivor.url, len(acked))
    assert sorted(got) == acked, "an acknowledged entry is missing or stored twice"
    assert got == acked, "the log's order is the order of acknowledgement"


@pytest.mark.parametrize(("raw", "expected"), [(None, 1), ("3", 3), ("5", 5)])
def test_stream_replicas_are_a_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, raw: str | None, expected: int
) -> None:
    monkeypatch.setenv("USHER_NATS_URL", "nats://127.0.0.1:4222")
    monkeypatch.setenv("USHER_HOME", str(tmp_path))
    if raw is None:
        monkeypatch.delenv("USHER_STREAM_REPLICAS", raising=False)
    else:
        monkeypatch.setenv("USHER_STREAM_REPLICAS", raw)
    settings = load_settings()
    assert settings.stream_replicas == expected
    assert log_stream_config(SUBJECTS, settings.stream_replicas).num_replicas == expected


@pytest.mark.parametrize("raw", ["0", "6", "three"])
def test_a_bad_replica_count_is_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, raw: str
) -> None:
    monkeypatch.setenv("USHER_NATS_URL", "nats://127.0.0.1:4222")
    monkeypatch.setenv("USHER_HOME", str(tmp_path))
    monkeypatch.setenv("USHER_STREAM_REPLICAS", raw)
    with pytest.raises(SettingsError) as refused:
        load_settings()
    assert refused.value.name == "stream-replicas" and repr(raw) in refused.value.detail
