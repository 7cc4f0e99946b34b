"""The ``subscriber`` identity on a real nats-server (issue 31): another system may read the
decision stream with a durable pull consumer, resume it after a restart, and use ordered and
push consumers filtered on decisions -- and nothing else: every other operation is refused.

Run against deploy/nats/usher-auth.conf (its ``subscriber-example``) and the local stack's own
server (``usher up``'s config, with ``subscriber-billing`` and ``subscriber-other``). The
local stack's identity is minted by ``usher subscriber`` (usher/local/subscribers.py): the
running server reloads, and a restarted one keeps it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from schemas import Envelope, EventId, WorkloadDeleted, WorkloadKey
from schemas.export import DEFAULT_DIR
from tests.deploy.test_nats_permissions import AUTH_CONF, _free_port, _wait_for_port
from tests.nodejs import node_dir, run_node
from usher.adapters.nats.log import ensure_streams, publish_envelope
from usher.adapters.nats.permissions import (
    DEFAULT_SUBSCRIBERS,
    identities,
    inbox_prefix,
    password_variable,
    subscriber_name,
)
from usher.adapters.nats.subjects import Subjects
from usher.adapters.stack_file import StackInfo
from usher.local.credentials import load_credentials
from usher.local.servers import NatsServer, nats_server_binary
from usher.local.stack import write_stack_info
from usher.local.subscribers import mint

S = Subjects("usher")
LOG, DLQ = S.stream_name, S.dlq_stream_name
DECISIONS = S.all_decisions
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples" / "subscribe"


@dataclass(frozen=True)
class Server:
    url: str
    system: str
    other: str | None
    passwords: dict[str, str]


def _passwords(names: list[str]) -> dict[str, str]:
    return {name: f"secret-{name}" for name in names}


@pytest.fixture(scope="module", params=["deploy", "local"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    if request.param == "local":
        names = [i.name for i in identities(S, subscribers=["billing", "other"])]
        passwords = _passwords(names)
        local = NatsServer(tmp_path_factory.mktemp("nats-local"), passwords=passwords)
        try:
            yield Server(local.start(), "billing", "other", passwords)
        finally:
            local.stop()
        return
    names = [i.name for i in identities(S, subscribers=DEFAULT_SUBSCRIBERS)]
    passwords = _passwords(names)
    home = tmp_path_factory.mktemp("nats-auth")
    shutil.copy(AUTH_CONF, home / "usher-auth.conf")
    port = _free_port()
    (home / "nats.conf").write_text(
        f'listen: "127.0.0.1:{port}"\njetstream {{ store_dir: "{home / "store"}" }}\n'
        "include ./usher-auth.conf\n"
    )
    env = {password_variable(name): pw for name, pw in passwords.items()}
    with (home / "nats.log").open("w") as log:
        process = subprocess.Popen(
            [str(nats_server_binary()), "-c", str(home / "nats.conf")],
            env=env,
            stdout=log,
            stderr=log,
        )
        try:
            _wait_for_port(port, process)
            yield Server(f"nats://127.0.0.1:{port}", DEFAULT_SUBSCRIBERS[0], None, passwords)
        finally:
            process.terminate()
            process.wait(10)


class Session:
    """A connection with the permission violations the server reported to it."""

    def __init__(self, nc: Client, refused: list[str]) -> None:
        self.nc = nc
        self.refused = refused

    async def _reported(self, before: int, what: str) -> bool:
        for _ in range(80):
            if len(self.refused) > before:
                return any(what.lower() in err.lower() for err in self.refused[before:])
            await asyncio.sleep(0.025)
        return False

    async def is_refused(self, subject: str) -> bool:
        before = len(self.refused)
        await self.nc.publish(subject, b"{}")
        await self.nc.flush()
        return await self._reported(before, subject)

    async def subscription_refused(self, subject: str) -> bool:
        before = len(self.refused)
        sub = await self.nc.subscribe(subject)
        await self.nc.flush()
        refused = await self._reported(before, subject)
        await sub.unsubscribe()
        return refused


@asynccontextmanager
async def login(
    url: str, name: str, password: str, inbox: str = "_INBOX"
) -> AsyncIterator[Session]:
    refused: list[str] = []

    async def on_error(exc: Exception) -> None:
        refused.append(str(exc))

    nc = await nats.connect(
        url, user=f"usher-{name}", password=password, error_cb=on_error,
        allow_reconnect=False, inbox_prefix=inbox,
    )  # fmt: skip
    try:
        yield Session(nc, refused)
    finally:
        await nc.close()


def as_subscriber(server: Server) -> AbstractAsyncContextManager[Session]:
    """The consuming system's connection, with its own inbox prefix."""
    name = subscriber_name(server.system)
    return login(server.url, name, server.passwords[name], inbox_prefix(server.system))


def entry(number: int) -> Envelope:
    return Envelope(
        id=EventId(f"t:{number}"),
        time=datetime(2026, 1, 1, tzinfo=UTC),
        source="usher/ledger",
        event=WorkloadDeleted(workload=WorkloadKey(f"user-a/j{number}")),
    )


async def publish_as_admin(server: Server, subject: str, number: int) -> None:
    async with login(server.url, "admin", server.passwords["admin"]) as admin:
        js = admin.nc.jetstream()
        await ensure_streams(js, S)
        await publish_envelope(js, subject, entry(number))


async def test_a_durable_pull_consumer_reads_decisions_only_and_resumes_after_a_restart(
    server: Server,
) -> None:
    await publish_as_admin(server, "usher.decision.a.released.user-a.j1", 1)
    await publish_as_admin(server, "usher.cluster.a.job.user-a.j1", 2)
    durable = ConsumerConfig(
        name=server.system, durable_name=server.system, filter_subject=DECISIONS,
        ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
    )  # fmt: skip
    async with as_subscriber(server) as session:
        js = session.nc.jetstream()
        await js.add_consumer(LOG, durable)
        sub = await js.pull_subscribe_bind(durable=server.system, stream=LOG)
        first = await sub.fetch(10, timeout=2)
        assert [m.subject for m in first] == ["usher.decision.a.released.user-a.j1"]
        for msg in first:
            await msg.ack_sync()
        info = await js.consumer_info(LOG, server.system)
        assert info.num_pending == 0 and info.num_ack_pending == 0
    assert session.refused == []
    await publish_as_admin(server, "usher.decision.a.released.user-a.j3", 3)
    async with as_subscriber(server) as session:  # the consuming system restarted
        sub = await session.nc.jetstream().pull_subscribe_bind(durable=server.system, stream=LOG)
        again = await sub.fetch(10, timeout=2)
        assert [m.subject for m in again] == ["usher.decision.a.released.user-a.j3"]
        await again[0].ack_sync()
        await session.nc.jetstream().delete_consumer(LOG, server.system)
    assert session.refused == []


async def test_ordered_and_push_consumers_on_decisions_are_allowed(server: Server) -> None:
    await publish_as_admin(server, "usher.decision.b.released.user-a.j4", 4)
    async with as_subscriber(server) as session:
        js = session.nc.jetstream()
        ordered = ConsumerConfig(
            name="ordered-1", filter_subject=DECISIONS, ack_policy=AckPolicy.NONE,
            inactive_threshold=5.0, mem_storage=True,
        )  # fmt: skip
        await js.add_consumer(LOG, ordered)
        pulled = await (await js.pull_subscribe_bind(durable="ordered-1", stream=LOG)).fetch(
            1, timeout=2
        )
        assert pulled and pulled[0].subject.startswith("usher.decision.")
        deliver = f"{inbox_prefix(server.system)}.push"
        inbox = await session.nc.subscribe(deliver)
        push = ConsumerConfig(
            name="push-1", deliver_subject=deliver, filter_subject=DECISIONS,
            ack_policy=AckPolicy.NONE, inactive_threshold=5.0,
        )  # fmt: skip
        await js.add_consumer(LOG, push)
        pushed = await inbox.next_msg(timeout=2)
        assert pushed.subject.startswith("usher.decision.")
    assert session.refused == []


async def test_every_other_operation_is_refused(server: Server) -> None:
    await publish_as_admin(server, "usher.decision.a.released.user-a.j5", 5)
    mine = server.system
    others = ["usher-watcher", *([server.other] if server.other else [])]
    refused_publishes = [
        "usher.decision.a.admitted.user-a.forged", "usher.cluster.a.job.user-a.forged",
        "usher.hold.root", "usher.zone.a.served", "usher.pass.a.ran", "usher.dlq.watcher",
        "usher.ledger.reserve", "usher.ledger.hold.admin", "usher.preempt.request",
        *(f"$JS.API.STREAM.{op}.{s}" for op in ("CREATE", "UPDATE", "DELETE", "PURGE")
          for s in (LOG, DLQ)),
        f"$JS.API.STREAM.MSG.GET.{LOG}", f"$JS.API.DIRECT.GET.{LOG}", f"$JS.API.STREAM.INFO.{DLQ}",
        "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST", "$JS.API.CONSUMER.LIST." + LOG,
        f"$JS.API.CONSUMER.CREATE.{LOG}", f"$JS.API.CONSUMER.CREATE.{LOG}.{mine}",
        f"$JS.API.CONSUMER.CREATE.{LOG}.{mine}.usher.cluster.>",
        f"$JS.API.CONSUMER.CREATE.{LOG}.{mine}.usher.>",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{LOG}.{mine}",
        f"$JS.API.CONSUMER.CREATE.{DLQ}.{mine}.usher.dlq.>",
        *(f"$JS.API.CONSUMER.CREATE.{LOG}.{o}.usher.decision.>" for o in others),
        *(f"$JS.API.CONSUMER.MSG.NEXT.{LOG}.{o}" for o in others),
        *(f"$JS.API.CONSUMER.INFO.{LOG}.{o}" for o in others),
        *(f"$JS.API.CONSUMER.DELETE.{LOG}.{o}" for o in others),
        *(f"$JS.ACK.{LOG}.{o}.1.1.1.1.1" for o in others),
        "$KV.usher_LEADERS.ledger", "$O.USHER_SNAPSHOTS.C.x",
    ]  # fmt: skip
    refused_subscriptions = ["usher.decision.>", "usher.>", "_INBOX.>", "_INBOX.someone.>", ">"]
    async with as_subscriber(server) as session:
        allowed = [s for s in refused_publishes if not await session.is_refused(s)]
        assert allowed == []
        listening = [s for s in refused_subscriptions if not await session.subscription_refused(s)]
        assert listening == []


def run_example(kind: str, server: Server, node: Path | None) -> dict[str, Any]:
    """Run the documented consumer (docs/examples/subscribe) as the subscriber, until caught up."""
    name = subscriber_name(server.system)
    url = server.url.replace("nats://", f"nats://usher-{name}:{server.passwords[name]}@")
    env = {**os.environ, "NATS_URL": url, "USHER_SYSTEM": server.system,
           "USHER_PREFIX": "usher", "USHER_SCHEMAS": str(DEFAULT_DIR)}  # fmt: skip
    if kind == "node":
        assert node is not None
        done = run_node(node, EXAMPLES / "consumer.mjs", ["--until-caught-up"], env)
    else:
        argv = [sys.executable, str(EXAMPLES / "consumer.py"), "--until-caught-up"]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["invalid"] == [] and report.get("warnings", []) == [], report
    return report


async def test_the_documented_consumers_read_resume_and_stay_within_the_role(
    server: Server, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """docs/how-to/subscribe.md's Python and Node.js consumers, as the subscriber: from the
    start, then resumed after a restart (nothing read twice), then a new decision only."""
    node = node_dir(tmp_path_factory) if shutil.which("node") else None
    await publish_as_admin(server, "usher.decision.a.released.user-a.j6", 6)
    kinds = ["python", *(["node"] if node else [])]
    for kind in kinds:
        first = run_example(kind, server, node)
        assert first["read"] >= 1 and first["types"] == ["workload.deleted.v1"]
        assert run_example(kind, server, node)["read"] == 0  # resumed: all acknowledged
        await publish_as_admin(server, "usher.decision.a.released.user-a.j7" + kind, 70 + len(kind))
        assert run_example(kind, server, node)["read"] == 1
        async with as_subscriber(server) as session:
            await session.nc.jetstream().delete_consumer(LOG, server.system)


async def test_the_nats_js_ordered_consumer_reads_decisions_without_a_violation(
    server: Server, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """nats.js's recommended ordered consumer (``js.consumers.get`` without a name), which
    the ``console`` identity could never use, reads the decisions as the subscriber."""
    node = node_dir(tmp_path_factory)
    await publish_as_admin(server, "usher.decision.a.released.user-a.j8", 8)
    name = subscriber_name(server.system)
    url = server.url.replace("nats://", f"nats://usher-{name}:{server.passwords[name]}@")
    env = {**os.environ, "NATS_URL": url, "USHER_SYSTEM": server.system}
    done = run_node(node, Path(__file__).parents[1] / "nodejs" / "ordered.mjs", [], env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["read"] >= 1 and report["status"] == []
    assert all(subject.startswith("usher.decision.") for subject in report["subjects"])


async def test_usher_subscriber_mints_an_identity_the_running_and_restarted_server_accept(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    base = [i.name for i in identities(S, ("default",))]
    creds = load_credentials(home, base)
    server = NatsServer(home, prefix="usher", zones=("default",), passwords=dict(creds.nats))
    url = server.start()
    try:
        assert server.process is not None and server.process.pid
        write_stack_info(home, StackInfo(
            home=str(home), nats_url=server.url_for("console"), database_url="", prefix="usher",
            pids={"nats": server.process.pid}, started_at=datetime.now(UTC), zones=["default"],
        ))  # fmt: skip
        async with login(url, "admin", creds.nats["admin"]) as admin:
            await ensure_streams(admin.nc.jetstream(), S)
        access = mint(home, "reports")
        assert oct(access.url_file.stat().st_mode & 0o777) == "0o600"
        minted = access.url_file.read_text().strip()
        assert minted.startswith("nats://usher-subscriber-reports:") and minted.endswith(
            url[len("nats://") :]
        )
        assert mint(home, "reports").url_file.read_text().strip() == minted  # same password

        async def durable_with_minted() -> None:
            nc = await _connect_when_reloaded(minted, access.inbox_prefix)
            try:
                config = ConsumerConfig(
                    name="reports", durable_name="reports", filter_subject=DECISIONS
                )
                await nc.jetstream().add_consumer(LOG, config)
            finally:
                await nc.close()

        await durable_with_minted()
        server.stop()
        server.launch()  # as `usher up` restarts it: with the passwords it started with
        server.process.wait_for_port("127.0.0.1", server.port, 20)
        await durable_with_minted()
        with pytest.raises(ValueError, match="lower-case"):
            mint(home, "Bad.Name")
    finally:
        server.stop()


async def _connect_when_reloaded(url: str, inbox: str) -> Client:
    """The server applies a reload a moment after SIGHUP: log in once it has."""
    for _ in range(100):
        try:
            return await nats.connect(
                url, allow_reconnect=False, inbox_prefix=inbox, connect_timeout=1
            )
        except (nats.errors.Error, OSError):
            await asyncio.sleep(0.05)
    raise AssertionError("the minted identity was never accepted")
