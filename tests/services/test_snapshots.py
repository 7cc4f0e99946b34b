"""Services start from their latest snapshot plus the tail of the log, over real NATS."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from schemas import Millis, QuotaTreeApplied, Unmapped, Zone
from services.common.projection import Projection
from services.common.runtime import ServiceContext
from services.common.settings import ServiceSettings, SettingsError
from services.common.snapshots import (
    LABEL_CONFIG,
    LABEL_FORMAT,
    LABEL_LOG,
    EngineSnapshots,
    SnapshotPolicy,
)
from services.dequeuer.service import main as dequeuer_main
from tests.builders.events import observed
from tests.builders.trees import two_leaf_tree
from tests.conftest import Infra
from tests.services.helpers import eventually, log_events, publish, running
from usher.adapters.logs import get_logger
from usher.adapters.nats.follower import LogFollower, _stream_seq
from usher.adapters.nats.log import delete_streams, ensure_streams
from usher.adapters.nats.snapshots import SnapshotStore
from usher.adapters.nats.subjects import Subjects
from usher.core.engine.snapshot import FORMAT, fingerprint, snapshot
from usher.core.model.config import EngineConfig

CONFIG = EngineConfig(zones=frozenset({Zone("a")}))
EVERY_ENTRY = SnapshotPolicy(every_entries=1, every_s=3600)


@pytest.fixture
async def ctx(
    infra: Infra, nc: Client, js: JetStreamContext, subjects: Subjects
) -> AsyncIterator[ServiceContext]:
    settings = ServiceSettings(nats_url=infra.nats_url, prefix=subjects.prefix, engine=CONFIG)
    context = ServiceContext(
        "test", settings, nc, js, subjects, asyncio.Event(), get_logger(service="test")
    )
    try:
        yield context
    finally:
        await SnapshotStore(js, subjects).drop_bucket()


async def _fill(js: JetStreamContext, subjects: Subjects, count: int) -> None:
    await publish(js, subjects.quota, QuotaTreeApplied(root=two_leaf_tree()))
    for n in range(count):
        await publish(js, subjects.job(Zone("a"), "a1", f"j{n}"), observed("a1", f"j{n}", 1))


async def _replay(snapshots: EngineSnapshots) -> tuple[Projection, LogFollower]:
    """Open, then follow until caught up, as a service does; report each batch."""
    projection = await snapshots.open()
    follower = snapshots.follower(projection, max_batch=1)
    await follower.start()
    stop = asyncio.Event()
    if not follower.caught_up:
        async for batch in follower.batches(stop):
            # The engine builds no reference cycles: no garbage collection while replaying.
            assert gc.isenabled() == follower.caught_up
            for entry in batch:
                assert not isinstance(entry, Exception)
                projection.apply(entry)  # type: ignore[arg-type]
            snapshots.after_batch(projection, follower)
            if follower.caught_up:
                break
    await follower.stop()
    assert gc.isenabled()
    return projection, follower


async def test_without_a_snapshot_the_whole_log_is_replayed(
    ctx: ServiceContext, js: JetStreamContext, subjects: Subjects
) -> None:
    await _fill(js, subjects, 3)
    snapshots = EngineSnapshots(ctx, "dequeuer-a", CONFIG, SnapshotPolicy(enabled=False))
    projection, _ = await _replay(snapshots)
    assert snapshots.restored_seq == 0 and projection.applied_seq == 4
    await snapshots.close(projection)
    assert await snapshots.store.info("dequeuer-a") is None  # disabled: nothing saved


async def test_saved_when_caught_up_then_restored_and_followed_from_the_next_entry(
    ctx: ServiceContext, js: JetStreamContext, subjects: Subjects
) -> None:
    await _fill(js, subjects, 3)
    first = EngineSnapshots(ctx, "dequeuer-a", CONFIG, EVERY_ENTRY)
    projection, _ = await _replay(first)
    await first.close(projection)  # waits for the background upload
    info = await first.store.info("dequeuer-a")
    assert info is not None and info.seq == 4
    assert info.labels[LABEL_CONFIG] == fingerprint(CONFIG)
    assert info.labels[LABEL_FORMAT] == str(FORMAT)

    await publish(js, subjects.job(Zone("a"), "a1", "late"), observed("a1", "late", 1))
    second = EngineSnapshots(ctx, "dequeuer-a", CONFIG, EVERY_ENTRY)
    restored, follower = await _replay(second)
    assert second.restored_seq == 4
    assert restored.applied_seq == follower.last_seq == 5
    # Snapshot + tail is the very engine a full replay builds.
    fresh = EngineSnapshots(ctx, "dequeuer-a", CONFIG, SnapshotPolicy(enabled=False))
    replayed, _ = await _replay(fresh)
    assert snapshot(restored.engine) == snapshot(replayed.engine)
    await second.close(restored)
    info = await second.store.info("dequeuer-a")
    assert info is not None and info.seq == 5


async def test_a_snapshot_is_saved_on_stop_even_mid_replay(
    ctx: ServiceContext, js: JetStreamContext, subjects: Subjects
) -> None:
    await _fill(js, subjects, 2)
    snapshots = EngineSnapshots(ctx, "dequeuer-a", CONFIG, EVERY_ENTRY)
    projection = await snapshots.open()
    engine = projection.engine
    engine.apply(QuotaTreeApplied(root=two_leaf_tree()), Millis(0))
    projection.applied_seq = 1  # stopped after the first entry, before any boundary
    await snapshots.close(projection)
    info = await snapshots.store.info("dequeuer-a")
    assert info is not None and info.seq == 1


async def test_an_interrupted_pass_is_never_saved(
    ctx: ServiceContext, js: JetStreamContext, subjects: Subjects
) -> None:
    await _fill(js, subjects, 2)
    snapshots = EngineSnapshots(ctx, "dequeuer-a", CONFIG, EVERY_ENTRY)
    projection = await snapshots.open()
    projection.applied_seq = 3
    await snapshots.close(projection, consistent=False)
    assert await snapshots.store.info("dequeuer-a") is None


@pytest.mark.parametrize(
    ("labels", "seq", "data"),
    [
        ({LABEL_CONFIG: "policy=Block"}, 3, None),  # another engine configuration
        ({LABEL_LOG: "2001-01-01T00:00:00+00:00"}, 3, None),  # the stream was re-created
        ({LABEL_FORMAT: "0"}, 3, None),  # another format
        ({}, 99, None),  # covers more than the log holds
        ({}, 3, b"\x00garbage"),  # refused by restore: replay instead
    ],
    ids=["config", "log", "format", "ahead", "garbage"],
)
async def test_an_unusable_snapshot_means_a_full_replay(
    ctx: ServiceContext,
    js: JetStreamContext,
    subjects: Subjects,
    labels: dict[str, str],
    seq: int,
    data: bytes | None,
) -> None:
    await _fill(js, subjects, 2)
    good = EngineSnapshots(ctx, "dequeuer-a", CONFIG, EVERY_ENTRY)
    projection, _ = await _replay(good)
    await good.close(projection)
    stored = await good.store.load("dequeuer-a")
    assert stored is not None
    await good.store.save("dequeuer-a", seq, data or stored.data, {**stored.labels, **labels})

    again = EngineSnapshots(ctx, "dequeuer-a", CONFIG, EVERY_ENTRY)
    replayed, _ = await _replay(again)
    assert again.restored_seq == 0
    assert replayed.applied_seq == 3


async def test_a_re_created_log_is_not_confused_with_the_old_one(
    ctx: ServiceContext, js: JetStreamContext, subjects: Subjects
) -> None:
    await _fill(js, subjects, 2)
    first = EngineSnapshots(ctx, "dequeuer-a", CONFIG, EVERY_ENTRY)
    projection, _ = await _replay(first)
    await first.close(projection)
    await delete_streams(js, subjects)
    await ensure_streams(js, subjects)
    await _fill(js, subjects, 3)  # a longer new log: the sequence alone would pass
    again = EngineSnapshots(ctx, "dequeuer-a", CONFIG, EVERY_ENTRY)
    replayed, _ = await _replay(again)
    assert again.restored_seq == 0 and replayed.applied_seq == 4


async def test_a_restarted_dequeuer_resumes_from_its_snapshot(
    infra: Infra, js: JetStreamContext, subjects: Subjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("USHER_SNAPSHOT_EVERY_ENTRIES", "1")
    settings = ServiceSettings(
        nats_url=infra.nats_url,
        prefix=subjects.prefix,
        zone=Zone("a"),
        engine=CONFIG,
        request_timeout_s=1.0,
    )
    await publish(js, subjects.quota, QuotaTreeApplied(root=two_leaf_tree()))
    for name in ("lost", "gone"):
        await publish(
            js, subjects.job(Zone("a"), "nowhere", name), observed("nowhere", name, 1, zone="a")
        )

    async def unmapped() -> list[str]:
        return [e.workload for e in await log_events(js, subjects) if isinstance(e, Unmapped)]

    try:
        async with running("dequeuer", dequeuer_main, settings, subjects):
            assert sorted(await eventually(unmapped)) == ["nowhere/gone", "nowhere/lost"]
        store = SnapshotStore(js, subjects)
        info = await store.info("dequeuer-a")
        last = (await js.stream_info(subjects.stream_name)).state.last_seq
        assert info is not None and info.seq == last  # saved on the graceful stop

        await publish(
            js, subjects.job(Zone("a"), "nowhere", "new"), observed("nowhere", "new", 1, zone="a")
        )
        async with running("dequeuer", dequeuer_main, settings, subjects):

            async def three() -> list[str]:
                found = await unmapped()
                return found if len(found) >= 3 else []

            found = await eventually(three)
            await asyncio.sleep(0.3)  # a replaying dequeuer would announce the old ones again
            found = await unmapped()
        # Restored: what was announced before the restart is not announced again.
        assert sorted(found) == ["nowhere/gone", "nowhere/lost", "nowhere/new"]
    finally:
        await SnapshotStore(js, subjects).drop_bucket()


@pytest.mark.parametrize(
    ("reply", "seq"),
    [
        ("$JS.ACK.USHER_LOG.c1.1.42.7.1700000000000000000.0", 42),
        ("$JS.ACK._.ACCHASH.USHER_LOG.c1.1.43.7.1700000000000000000.0.r4nd", 43),
        ("$JS.ACK.hub.ACCHASH.USHER_LOG.c1.1.44.7.1700000000000000000.0", 44),
    ],
)
def test_the_follower_reads_the_stream_sequence_of_both_reply_formats(reply: str, seq: int) -> None:
    assert _stream_seq(Msg(_client=None, subject="x", reply=reply)) == seq  # type: ignore[arg-type]


def test_the_policy_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("USHER_SNAPSHOTS", "USHER_SNAPSHOT_EVERY_ENTRIES", "USHER_SNAPSHOT_EVERY_S"):
        monkeypatch.delenv(name, raising=False)
    assert SnapshotPolicy.from_env() == SnapshotPolicy()
    monkeypatch.setenv("USHER_SNAPSHOTS", "off")
    monkeypatch.setenv("USHER_SNAPSHOT_EVERY_ENTRIES", "1000")
    monkeypatch.setenv("USHER_SNAPSHOT_EVERY_S", "2.5")
    assert SnapshotPolicy.from_env() == SnapshotPolicy(
        enabled=False, every_entries=1000, every_s=2.5
    )
    for bad in ("lots", "0"):
        monkeypatch.setenv("USHER_SNAPSHOT_EVERY_ENTRIES", bad)
        with pytest.raises(SettingsError):
            SnapshotPolicy.from_env()
