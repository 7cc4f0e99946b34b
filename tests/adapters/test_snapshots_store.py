"""The snapshot store against a real NATS server: round trips, replacement, absence."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import AsyncIterator

import nats.js.errors
import pytest
from nats.js import JetStreamContext

from schemas import Millis, QuotaNode, QuotaTreeApplied
from tests.builders.events import observed
from usher.adapters.nats.snapshots import CHUNK_BYTES, SnapshotStore, bucket_name
from usher.adapters.nats.subjects import Subjects
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import fingerprint, restore, snapshot
from usher.core.model.config import EngineConfig


@pytest.fixture
async def store(js: JetStreamContext, subjects: Subjects) -> AsyncIterator[SnapshotStore]:
    snapshots = SnapshotStore(js, subjects)
    try:
        yield snapshots
    finally:
        await snapshots.drop_bucket()


def test_bucket_is_named_after_the_installation_prefix() -> None:
    assert bucket_name(Subjects("usher")) == "USHER_SNAPSHOTS"
    assert bucket_name(Subjects("my-site")) == "MY_SITE_SNAPSHOTS"


async def test_nothing_stored_is_none_not_an_error(store: SnapshotStore) -> None:
    # No bucket yet.
    assert await store.load("dequeuer-a") is None
    assert await store.info("dequeuer-a") is None
    assert await store.delete("dequeuer-a") is False
    # A bucket, but not this object.
    await store.save("preemptor", 3, b"x")
    assert await store.load("dequeuer-a") is None
    assert await store.info("dequeuer-a") is None


async def test_round_trip_with_sequence_and_labels(store: SnapshotStore) -> None:
    data = os.urandom(CHUNK_BYTES * 3 + 17)  # several chunks, the last one partial
    labels = {"Config": "policy=Round", "Log-Created": "2026-11-21T20:00:00+00:00"}
    saved = await store.save("dequeuer-a", 1234, data, labels)
    assert (saved.seq, saved.size) == (1234, len(data))

    info = await store.info("dequeuer-a")
    assert info is not None
    assert (info.name, info.seq, info.size, info.labels) == ("dequeuer-a", 1234, len(data), labels)
    loaded = await store.load("dequeuer-a")
    assert loaded is not None
    assert (loaded.seq, loaded.labels) == (1234, labels)
    assert loaded.data == data


async def test_a_new_save_replaces_the_old_one_and_names_are_independent(
    store: SnapshotStore, js: JetStreamContext
) -> None:
    await store.save("dequeuer-a", 10, b"a" * (CHUNK_BYTES * 2))
    await store.save("dequeuer-b", 11, b"b")
    await store.save("dequeuer-a", 20, b"newer")
    a, b = await store.load("dequeuer-a"), await store.load("dequeuer-b")
    assert a is not None and (a.seq, a.data) == (20, b"newer")
    assert b is not None and (b.seq, b.data) == (11, b"b")
    # The old chunks are gone: the bucket holds the two live objects and little else.
    stream = await js.stream_info(f"OBJ_{store.bucket}")
    assert stream.state.bytes < CHUNK_BYTES

    assert await store.delete("dequeuer-a") is True
    assert await store.load("dequeuer-a") is None
    assert await store.load("dequeuer-b") is not None


async def test_an_engine_snapshot_survives_the_store(store: SnapshotStore) -> None:
    config = EngineConfig(zones=None)
    engine = Engine(config)
    engine.apply(
        QuotaTreeApplied(
            root=QuotaNode(name="root", min={"cpu": 4000}, max={"cpu": 4000}, namespaces=["a"])
        ),
        Millis(0),
    )
    for n in range(50):
        engine.apply(observed("a", f"j{n}", 1, created=n), Millis(n))
    engine.decide(Millis(100))
    data = snapshot(engine)
    await store.save("preemptor", 51, data, {"Config": fingerprint(config)})
    loaded = await store.load("preemptor")
    assert loaded is not None and loaded.labels["Config"] == fingerprint(config)
    assert snapshot(restore(loaded.data, config)) == data


async def test_bytes_that_do_not_match_the_digest_are_refused(
    store: SnapshotStore, js: JetStreamContext
) -> None:
    await store.save("dequeuer-a", 7, b"the real state" * 1000)
    # Rewrite the object's meta with the digest of other bytes (what a torn write looks like).
    subject = f"$O.{store.bucket}.M.{base64.urlsafe_b64encode(b'dequeuer-a').decode()}"
    meta = json.loads((await js.get_last_msg(f"OBJ_{store.bucket}", subject)).data or b"{}")
    wrong = base64.urlsafe_b64encode(hashlib.sha256(b"other").digest()).decode()
    meta["digest"] = f"SHA-256={wrong}"
    await js.publish(subject, json.dumps(meta).encode(), headers={"Nats-Rollup": "sub"})
    with pytest.raises(nats.js.errors.DigestMismatchError):
        await store.load("dequeuer-a")
