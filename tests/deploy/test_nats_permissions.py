"""NATS permissions on a real nats-server: each identity may publish only what it owns.

Every test runs twice: with deploy/nats/usher-auth.conf (passwords from the environment, as
the Helm chart gives them) and with the local stack's own server (``NatsServer`` of
``usher up``, literal passwords). Both come from usher/adapters/nats/permissions.py, and the
deploy files must equal what it renders. Every user logs in with nats-py; allowed publishes
are seen to arrive (stored by JetStream, or received by the service that serves the subject),
forbidden ones are refused by the server with a permissions violation: a forged Admitted,
Preempted or Released from any identity but the ledger's, a stream created, updated, deleted
or purged by anyone but the admin. The JetStream calls the services make at start (stream
look-up, the ordered consumer, the watcher's durable consumer, snapshots) are run under each
user too, and so is leader election (services/common/leader.py) in the bucket usher_LEADERS.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from schemas import Millis, QuotaTreeApplied, Zone
from services.common.leader import Leadership
from services.common.metrics import Metrics
from services.common.runtime import ServiceContext
from services.common.settings import ServiceSettings
from services.common.snapshots import EngineSnapshots, SnapshotPolicy
from tests.builders.events import observed
from tests.builders.trees import two_leaf_tree
from tests.services.helpers import publish
from usher.adapters.logs import get_logger
from usher.adapters.nats.log import ensure_streams, require_streams
from usher.adapters.nats.permissions import (
    DEFAULT_SUBSCRIBERS,
    deploy_files,
    identities,
    password_variable,
    subscriber_name,
)
from usher.adapters.nats.snapshots import SnapshotStore, views_bucket_name
from usher.adapters.nats.subjects import Subjects
from usher.core.model.config import EngineConfig
from usher.core.protocol.log import LogEntry
from usher.local.servers import NatsServer, nats_server_binary

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
AUTH_CONF = DEPLOY / "nats" / "usher-auth.conf"
SUBJECTS = Subjects("usher")
USERS = ("watcher", "ledger", "preemptor", "dequeuer-default", "dequeuer-a", "dequeuer-b")
EVERYONE = (*USERS, "console", "admin")
NOT_THE_LEDGER = tuple(user for user in EVERYONE if user not in ("ledger", "admin"))
NOT_THE_ADMIN = tuple(user for user in EVERYONE if user != "admin")


def password(user: str) -> str:
    return f"secret-{user}"


def test_the_deploy_files_are_what_the_permissions_module_renders() -> None:
    for path, text in deploy_files(DEPLOY).items():
        assert path.read_text() == text, f"{path}: run python -m usher.adapters.nats.permissions"
    assert {i.name for i in identities(SUBJECTS)} == set(EVERYONE)


def test_the_deploy_values_ask_for_three_replicas_and_fsync_before_ack() -> None:
    import yaml

    values = yaml.safe_load((DEPLOY / "nats-values.yaml").read_text())
    assert values["config"]["cluster"] == {"enabled": True, "replicas": 3}
    assert values["config"]["jetstream"]["merge"] == {"sync_interval": "always"}
    settings = yaml.safe_load((DEPLOY / "base" / "settings.yaml").read_text().split("---")[0])
    assert settings["data"]["USHER_STREAM_REPLICAS"] == "3"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module", params=["deploy", "local"])
def nats_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A real nats-server with deploy/'s users, or the local stack's (``usher up``'s) own."""
    if request.param == "local":
        server = NatsServer(tmp_path_factory.mktemp("nats-local"),
                            passwords={user: password(user) for user in EVERYONE})  # fmt: skip
        try:
            yield server.start()
        finally:
            server.stop()
        return
    home = tmp_path_factory.mktemp("nats-auth")
    shutil.copy(AUTH_CONF, home / "usher-auth.conf")
    port = _free_port()
    (home / "nats.conf").write_text(
        f'listen: "127.0.0.1:{port}"\n'
        f'jetstream {{ store_dir: "{home / "store"}" }}\n'
        "include ./usher-auth.conf\n"
    )
    readers = [subscriber_name(system) for system in DEFAULT_SUBSCRIBERS]
    env = {password_variable(user): password(user) for user in (*EVERYONE, *readers)}
    log = (home / "nats.log").open("w")
    process = subprocess.Popen(
        [str(nats_server_binary()), "-c", str(home / "nats.conf")], env=env, stdout=log, stderr=log
    )
    try:
        _wait_for_port(port, process)
        yield f"nats://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    for _ in range(200):
        assert process.poll() is None, "nats-server exited: see nats.log"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            subprocess.run(["sleep", "0.05"], check=True)
    raise AssertionError("nats-server did not listen")


class Session:
    """One service's connection, with the permission violations the server reported."""

    def __init__(self, nc: Client, refused: list[str]) -> None:
        self.nc = nc
        self.refused = refused

    async def is_refused(self, subject: str) -> bool:
        before = len(self.refused)
        await self.nc.publish(subject, b"{}")
        await self.nc.flush()
        for _ in range(40):
            if len(self.refused) > before:
                # nats-py lower-cases the server's message.
                return any(subject.lower() in err.lower() for err in self.refused[before:])
            await asyncio.sleep(0.025)
        return False


@asynccontextmanager
async def login(url: str, user: str) -> AsyncIterator[Session]:
    refused: list[str] = []

    async def on_error(exc: Exception) -> None:
        refused.append(str(exc))

    nc = await nats.connect(
        url, user=f"usher-{user}", password=password(user), error_cb=on_error,
        allow_reconnect=False,
    )  # fmt: skip
    try:
        yield Session(nc, refused)
    finally:
        await nc.close()


@pytest.fixture(scope="module")
async def streams(nats_url: str) -> str:
    """The log and DLQ streams, created (then updated) by the admin, as `usher up` does."""
    async with login(nats_url, "admin") as admin:
        await ensure_streams(admin.nc.jetstream(), SUBJECTS)
        await ensure_streams(admin.nc.jetstream(), SUBJECTS)
    assert admin.refused == []
    return nats_url


@pytest.mark.parametrize("user", NOT_THE_LEDGER)
async def test_a_forged_decision_of_the_ledger_is_refused_from_anyone_else(
    nats_url: str, user: str
) -> None:
    async with login(nats_url, user) as session:
        for zone in ("default", "a", "b"):
            for action in ("admitted", "preempted", "released"):
                subject = f"usher.decision.{zone}.{action}.user-c.forge-big"
                assert await session.is_refused(subject), f"{user} may publish {subject}"


@pytest.mark.parametrize("user", NOT_THE_ADMIN)
async def test_nobody_but_the_admin_may_create_update_delete_or_purge_a_stream(
    streams: str, user: str
) -> None:
    async with login(streams, user) as session:
        for operation in ("CREATE", "UPDATE", "DELETE", "PURGE"):
            for stream in (SUBJECTS.stream_name, SUBJECTS.dlq_stream_name):
                subject = f"$JS.API.STREAM.{operation}.{stream}"
                assert await session.is_refused(subject), f"{user} may {operation} {stream}"
    async with login(streams, "admin") as admin:
        info = await admin.nc.jetstream().stream_info(SUBJECTS.stream_name)
    assert info.config.subjects == SUBJECTS.log_subjects  # untouched


def _usher_streams(url: str, prefix: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "usher.cli", "streams", "--nats", url, "--prefix", prefix]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


async def test_usher_streams_creates_the_log_as_the_admin_and_fails_as_a_service(
    nats_url: str,
) -> None:
    host = nats_url.removeprefix("nats://")
    refused = _usher_streams(f"nats://usher-ledger:{password('ledger')}@{host}", "usher")
    assert refused.returncode == 4, refused.stderr
    assert password("ledger") not in refused.stderr and "usher-ledger:***@" in refused.stderr
    made = _usher_streams(f"nats://usher-admin:{password('admin')}@{host}", "usher")
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == "streams USHER_LOG, USHER_DLQ: 1 replicas"
    async with login(nats_url, "console") as console:
        info = await console.nc.jetstream().stream_info(SUBJECTS.stream_name)
    assert info.config.subjects == SUBJECTS.log_subjects


async def test_the_console_reads_the_log_and_publishes_nothing(streams: str) -> None:
    async with login(streams, "ledger") as ledger:
        await ledger.nc.jetstream().publish("usher.decision.a.admitted.ns.console", b"{}")
    async with login(streams, "console") as console:
        js = console.nc.jetstream()
        got: asyncio.Queue[str] = asyncio.Queue()

        async def on_entry(msg: Msg) -> None:
            await got.put(msg.subject)

        sub = await js.subscribe(
            "usher.>", stream=SUBJECTS.stream_name, cb=on_entry, ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
        )  # fmt: skip
        seen = {await asyncio.wait_for(got.get(), 5) for _ in range(1)}
        await sub.unsubscribe()
        assert seen and all(subject.startswith("usher.") for subject in seen)
        for subject in ("usher.cluster.quota", "usher.decision.a.inadmissible.ns.j",
                        "usher.ledger.reserve", "usher.dlq.console"):  # fmt: skip
            assert await console.is_refused(subject), subject


async def test_a_wrong_password_is_refused(nats_url: str) -> None:
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(nats_url, user="usher-ledger", password="guess",
                           allow_reconnect=False, max_reconnect_attempts=0)  # fmt: skip


@pytest.mark.parametrize(
    ("user", "subject"),
    [
        ("watcher", "usher.cluster.a.job.ns.j"),
        ("watcher", "usher.cluster.quota"),
        ("watcher", "usher.dlq.watcher"),
        ("ledger", "usher.decision.a.admitted.ns.j"),
        ("ledger", "usher.decision.b.preempted.ns.j"),
        ("ledger", "usher.decision.default.released.ns.j"),
        ("ledger", "usher.dlq.ledger"),
        ("dequeuer-a", "usher.decision.a.inadmissible.ns.j"),
        ("dequeuer-a", "usher.decision.a.unmapped.ns.j"),
        ("dequeuer-b", "usher.decision.b.inadmissible.ns.j"),
        ("dequeuer-default", "usher.decision.default.unmapped.ns.j"),
        ("dequeuer-a", "usher.dlq.dequeuer"),
        ("preemptor", "usher.dlq.preemptor"),
    ],
)
async def test_a_service_may_append_what_it_owns_to_the_log(
    streams: str, user: str, subject: str
) -> None:
    async with login(streams, user) as session:
        ack = await session.nc.jetstream().publish(subject, b"{}")
    assert ack.seq > 0


@pytest.mark.parametrize(
    ("user", "subject"),
    [
        ("watcher", "usher.decision.a.admitted.ns.j"),
        ("watcher", "usher.ledger.reserve"),
        ("watcher", "usher.dlq.ledger"),
        ("watcher", "$JS.API.STREAM.DELETE.USHER_LOG"),
        ("ledger", "usher.cluster.quota"),
        ("ledger", "usher.decision.a.inadmissible.ns.j"),
        ("ledger", "usher.preempt.request"),
        ("ledger", "$JS.API.STREAM.PURGE.USHER_LOG"),
        ("ledger", "$JS.API.CONSUMER.DELETE.USHER_LOG.usher-watcher"),
        ("dequeuer-a", "usher.decision.b.inadmissible.ns.j"),
        ("dequeuer-a", "usher.decision.a.admitted.ns.j"),
        ("dequeuer-a", "usher.cluster.a.job.ns.j"),
        ("dequeuer-a", "usher.ledger.preempt"),
        ("dequeuer-a", "$O.USHER_SNAPSHOTS.M.cHJlZW1wdG9y"),
        ("dequeuer-a", "$JS.ACK.USHER_LOG.usher-watcher.1.1.1.1.1"),
        ("preemptor", "usher.ledger.reserve"),
        ("preemptor", "usher.decision.a.preempted.ns.j"),
        ("preemptor", "usher.cluster.quota"),
        ("preemptor", "usher.dlq.watcher"),
        ("watcher", "$KV.usher_LEADERS.preemptor"),
        ("ledger", "$KV.usher_LEADERS.preemptor"),
        ("preemptor", "$KV.usher_LEADERS.ledger-relay"),
        ("preemptor", "$KV.usher_LEADERS.dequeuer-a"),
        ("dequeuer-a", "$KV.usher_LEADERS.dequeuer-b"),
        ("dequeuer-a", "$KV.usher_LEADERS.preemptor"),
        ("dequeuer-b", "$KV.usher_LEADERS.ledger-relay"),
        ("dequeuer-a", "$JS.API.STREAM.PURGE.KV_usher_LEADERS"),
        ("dequeuer-a", "$JS.API.STREAM.DELETE.KV_usher_LEADERS"),
        ("dequeuer-a", "$JS.API.STREAM.UPDATE.KV_usher_LEADERS"),
        ("dequeuer-a", "$JS.API.DIRECT.GET.KV_usher_LEADERS.$KV.usher_LEADERS.preemptor"),
    ],
)
async def test_a_service_may_not_publish_what_others_own(
    nats_url: str, user: str, subject: str
) -> None:
    async with login(nats_url, user) as session:
        assert await session.is_refused(subject)


async def _request(nc: Client, subject: str) -> Msg:
    # Now and then the server answers "no responders" right after the responder's flushed
    # SUB (seen on nats-server 2.10); a denied publish would never get an answer at all.
    for _ in range(10):
        try:
            return await nc.request(subject, b"{}", timeout=2)
        except nats.errors.NoRespondersError:
            await asyncio.sleep(0.05)
    raise AssertionError(f"nobody answered on {subject}")


@pytest.mark.parametrize(
    ("requester", "responder", "subject"),
    [
        ("dequeuer-a", "ledger", "usher.ledger.reserve"),
        ("preemptor", "ledger", "usher.ledger.preempt"),
        ("dequeuer-b", "preemptor", "usher.preempt.request"),
    ],
)
async def test_requests_reach_their_server_and_are_answered(
    nats_url: str, requester: str, responder: str, subject: str
) -> None:
    async with login(nats_url, responder) as server, login(nats_url, requester) as client:

        async def answer(msg: Msg) -> None:
            await msg.respond(b"granted")

        await server.nc.subscribe(subject, cb=answer)
        await server.nc.flush()
        reply = await _request(client.nc, subject)
    assert reply.data == b"granted"
    assert server.refused == [] and client.refused == []


@pytest.mark.parametrize("user", USERS)
async def test_every_service_can_start_and_follow_the_log(streams: str, user: str) -> None:
    async with login(streams, user) as session:
        js = session.nc.jetstream()
        await require_streams(js, SUBJECTS)  # what services/common/runtime.py does at start
        got: asyncio.Queue[int] = asyncio.Queue()

        async def on_entry(msg: Msg) -> None:
            await got.put(msg.metadata.sequence.stream)

        sub = await js.subscribe(
            "usher.>", stream=SUBJECTS.stream_name, cb=on_entry, ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=1),
        )  # fmt: skip
        assert await asyncio.wait_for(got.get(), 5) == 1
        await sub.unsubscribe()
    assert session.refused == []


async def test_the_watcher_consumes_decisions_with_its_durable_consumer(streams: str) -> None:
    async with login(streams, "ledger") as ledger:
        await ledger.nc.jetstream().publish("usher.decision.a.admitted.ns.durable", b"{}")
    async with login(streams, "watcher") as watcher:
        sub = await watcher.nc.jetstream().pull_subscribe(
            SUBJECTS.all_decisions, durable="usher-watcher", stream=SUBJECTS.stream_name
        )
        messages = await sub.fetch(100, timeout=5)
        for msg in messages:
            await msg.ack()
        await watcher.nc.flush()
    assert any(msg.subject == "usher.decision.a.admitted.ns.durable" for msg in messages)
    assert watcher.refused == []


@pytest.mark.parametrize("user", ["preemptor", "dequeuer-a"])
async def test_a_service_saves_and_reads_its_own_snapshot(streams: str, user: str) -> None:
    async with login(streams, user) as session:
        store = SnapshotStore(session.nc.jetstream(), SUBJECTS)
        data = bytes(range(256)) * 2_500  # two chunks
        await store.save(user, 7, data, {"Config": "c"})
        info = await store.info(user)
        loaded = await store.load(user)
    assert info is not None and info.seq == 7
    assert loaded is not None and (loaded.seq, loaded.data) == (7, data)
    assert session.refused == []


async def test_a_service_may_not_replace_another_services_snapshot(streams: str) -> None:
    async with login(streams, "preemptor") as preemptor:
        await SnapshotStore(preemptor.nc.jetstream(), SUBJECTS).save("preemptor", 3, b"p")
    async with login(streams, "dequeuer-a") as session:
        store = SnapshotStore(session.nc.jetstream(), SUBJECTS)
        with pytest.raises((nats.errors.Error, TimeoutError)):
            await store.save("preemptor", 99, b"forged")
    assert any("$o.usher_snapshots.m." in refused.lower() for refused in session.refused)
    async with login(streams, "preemptor") as preemptor:
        kept = await SnapshotStore(preemptor.nc.jetstream(), SUBJECTS).load("preemptor")
    assert kept is not None and (kept.seq, kept.data) == (3, b"p")


async def test_a_restarted_service_restores_its_snapshot_instead_of_replaying(
    streams: str,
) -> None:
    """Under its own user: save on stop, then the next start resumes after the snapshot."""
    config = EngineConfig(zones=frozenset({Zone("a")}))
    async with login(streams, "admin") as admin:
        js = admin.nc.jetstream()
        await publish(js, SUBJECTS.quota, QuotaTreeApplied(root=two_leaf_tree()))
        for n in range(3):
            await publish(js, SUBJECTS.job(Zone("a"), "a1", f"j{n}"), observed("a1", f"j{n}", 1))
        last = (await js.stream_info(SUBJECTS.stream_name)).state.last_seq
    policy = SnapshotPolicy(every_entries=1, every_s=3600)
    for start in ("first", "restart"):
        async with login(streams, "dequeuer-a") as session:
            settings = ServiceSettings(nats_url=streams, prefix=SUBJECTS.prefix, engine=config)
            ctx = ServiceContext(
                "dequeuer", settings, session.nc, session.nc.jetstream(), SUBJECTS,
                asyncio.Event(), get_logger(service="dequeuer"),
            )  # fmt: skip
            snapshots = EngineSnapshots(ctx, "dequeuer-a", config, policy)
            projection = await snapshots.open()
            follower = snapshots.follower(projection)
            await follower.start()
            if projection.applied_seq < last:
                async for batch in follower.batches(ctx.stop):
                    for entry in batch:
                        if isinstance(entry, LogEntry):  # other tests' raw publishes: bad
                            projection.apply(entry)
                    snapshots.after_batch(projection, follower)
                    if follower.last_seq >= last:
                        break
            await follower.stop()
            await snapshots.close(projection)
        assert session.refused == [], start
        if start == "first":
            assert snapshots.restored_seq == 0  # nothing saved yet: the whole log
    assert snapshots.restored_seq == last  # not replayed from sequence 1


# ---------------------------------------------------------------------- leader election

ELECTING = {
    "ledger": "ledger-relay",
    "preemptor": "preemptor",
    "dequeuer-default": "dequeuer-default",
    "dequeuer-a": "dequeuer-a",
    "dequeuer-b": "dequeuer-b",
}
LEADER_TTL_S = 5.0


def _context(
    session: Session, user: str, instance: str, *, timeout_s: float = 5.0
) -> ServiceContext:
    """A service's context on ``session``; a refused request shows only as its timeout (the
    server answers a permission violation with an asynchronous error), hence ``timeout_s``."""
    settings = ServiceSettings(
        nats_url="nats://unused", instance=instance, leader_election=True, leader_ttl_s=LEADER_TTL_S
    )
    return ServiceContext(
        name=user, settings=settings, nc=session.nc, js=session.nc.jetstream(timeout=timeout_s),
        subjects=SUBJECTS, stop=asyncio.Event(), log=get_logger(service=user), metrics=Metrics(),
    )  # fmt: skip


@pytest.mark.parametrize(("user", "role"), list(ELECTING.items()))
async def test_an_electing_service_acquires_renews_and_releases_its_own_key(
    streams: str, user: str, role: str
) -> None:
    async with login(streams, user) as session:
        ctx = _context(session, user, f"{user}-pod-1")
        first = Leadership(ctx, role)
        assert await first.start(), session.refused
        revision = first._revision
        await first._renew()
        assert first.is_leader and first._revision > revision
        # A process restarted under the same identity takes its key back (reads the key).
        again = Leadership(ctx, role)
        assert await again.start(), session.refused
        await first.close()  # the old revision: deletes nothing
        # Another instance waits while the key is held, and takes over once it is released.
        other = Leadership(_context(session, user, f"{user}-pod-2"), role)
        assert not await other.start()
        await again.close()
        await other._attempt()
        assert other.is_leader, session.refused
        await other.close()
    assert session.refused == []


@pytest.mark.parametrize(
    ("user", "role"),
    [("dequeuer-a", "dequeuer-b"), ("dequeuer-a", "preemptor"), ("preemptor", "ledger-relay"),
     ("ledger", "dequeuer-default")],
)  # fmt: skip
async def test_an_electing_service_cannot_take_another_roles_key(
    streams: str, user: str, role: str
) -> None:
    async with login(streams, user) as session:
        leadership = Leadership(_context(session, user, f"{user}-intruder", timeout_s=1.0), role)
        assert not await leadership.start()
        await leadership.close()
    assert any(f"$kv.usher_leaders.{role}" in err.lower() for err in session.refused)


async def test_the_console_reads_the_preemptors_read_model_and_cannot_write_it(
    streams: str,
) -> None:
    """The preemptor, under its own user, keeps the people read model (``PeopleViews``, as the
    service does); the console restores it, folds nothing more and answers as the whole log
    does; its own put into the views bucket is refused and the preemptor's read model stays."""
    from services.common.views import PeopleViews
    from usher.client import readmodel
    from usher.client.state import catch_up, read_state
    from usher.core.history.people_snapshot import encode, object_name

    config = EngineConfig()
    async with login(streams, "admin") as admin:
        js = admin.nc.jetstream()
        await publish(js, SUBJECTS.quota, QuotaTreeApplied(root=two_leaf_tree()))
        job = observed("a1", "console-view", 1)
        await publish(js, SUBJECTS.job(Zone("default"), "a1", "console-view"), job)
    async with login(streams, "preemptor") as preemptor:
        settings = ServiceSettings(nats_url=streams, prefix=SUBJECTS.prefix, engine=config)
        ctx = ServiceContext(
            "preemptor", settings, preemptor.nc, preemptor.nc.jetstream(), SUBJECTS,
            asyncio.Event(), get_logger(service="preemptor"),
        )  # fmt: skip
        views = PeopleViews(ctx, config, SnapshotPolicy())
        kept = await views.open()
        follower = await catch_up(kept, ctx.js, SUBJECTS)
        await follower.stop()
        await views.close(kept)
    assert preemptor.refused == []
    now = Millis(1_900_000_000_000)
    async with login(streams, "console") as console:
        js = console.nc.jetstream()
        said: list[str] = []
        recent = await readmodel.read_recent(js, SUBJECTS, config, say_after=1, say=said.append)
        assert (recent.restored_seq, recent.fetched, said) == (kept.applied_seq, 0, [])
        full = await read_state(js, SUBJECTS, config)
        assert recent.state.view(now) == full.view(now)
        explained = await readmodel.explain_recent(js, SUBJECTS, config, job.workload, now)
        assert explained.history[0].what == "observed"
        store = SnapshotStore(js, SUBJECTS, bucket=views_bucket_name(SUBJECTS))
        name = object_name(config)
        with pytest.raises((nats.errors.Error, TimeoutError)):
            await store.save(name, kept.applied_seq, b"a lie", {"Config": "forged"})
        assert any("$o.usher_views." in refused.lower() for refused in console.refused)
        stored = await store.load(name)
    assert stored is not None and (stored.seq, stored.data) == (kept.applied_seq, encode(kept))
