"""Replay benchmark: how fast a service rebuilds its engine from the log, with and without
a snapshot (issue: "with 1,000,000 events in the log a dequeuer is serving again <= 5 s").

What it does: starts a fresh embedded NATS in a temporary folder and writes a log of
1,000,000 events (quick: 100,000), published pipelined with the client's async publish: a
quota tree (10 departments x 10 leaves), then workloads over those leaves in time order, each
``WorkloadObserved``; most are admitted (``Admitted`` decision), finish, are released and
deleted; some still run (observed + admitted), some still wait (observed only). Then it
measures
(a) the raw read: an ordered consumer over the whole stream, msgspec-decoding each envelope;
(b) the full replay a dequeuer does on start (``LogFollower`` + ``Projection`` into an
    ``Engine``), in msg/s and as a ratio of (a);
(c) the snapshot of that engine (size, encode, restore), saved as the dequeuer's, and the
    restart time of a dequeuer process (``python -m usher run dequeuer --zone default``)
    from its start until it logs "replay done", with the snapshot and without it;
(d) size, encode and restore time of a snapshot of 100,000 pending workloads.
What it must never do: print, or pass or fail on a number: it returns the numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, PubAck

from schemas import (
    Admitted,
    Envelope,
    EventId,
    LogEvent,
    Millis,
    PodSet,
    QueueName,
    QuotaNode,
    QuotaPath,
    QuotaTreeApplied,
    Released,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    Zone,
    cloudevent_headers,
    decode_envelope,
    encode,
)
from services.common.projection import Projection
from services.common.snapshots import labels, log_identity
from usher.adapters.nats.follower import LogFollower
from usher.adapters.nats.log import ensure_streams
from usher.adapters.nats.snapshots import SnapshotStore
from usher.adapters.nats.subjects import Subjects
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import restore, snapshot
from usher.core.model.config import EngineConfig
from usher.core.protocol.log import LogEntry
from usher.core.protocol.subjects import installation_of
from usher.core.tree.quota_tree import queue_name
from usher.local.processes import ManagedProcess
from usher.local.servers import NatsServer

ZONE = Zone("default")
DEPARTMENTS, LEAVES = 10, 10
GI = 1024**3
SHAPES = [(1000, 4 * GI), (2000, 8 * GI), (4000, 16 * GI), (8000, 32 * GI)]
PUBLISH_WINDOW = 5_000
READY_LINE = "replay done"
RESTORED_LINE = "snapshot restored"
ADMIT_LAG, FINISH_LAG, DELETE_LAG = 40, 400, 800
"""How many workloads later (in arrival order) one is admitted, finishes, is deleted."""

# The dequeuer's engine configuration with default settings (see ``load_settings``).
DEQUEUER_CONFIG = EngineConfig(zones=frozenset({ZONE}))


def _tree() -> QuotaNode:
    # Plenty of room: the decisions on the log are the ledger's, as if it had admitted them.
    huge = {"cpu": 10**9, "memory": 10**9 * GI}
    return QuotaNode(
        name="root",
        min=huge,
        max=huge,
        children=[
            QuotaNode(
                name=f"dept-{d}",
                min=huge,
                max=huge,
                children=[
                    QuotaNode(name=f"leaf-{d}-{i}", min=huge, max=huge, namespaces=[f"ns-{d}-{i}"])
                    for i in range(LEAVES)
                ],
            )
            for d in range(DEPARTMENTS)
        ],
    )


def _names(n: int) -> tuple[str, str, WorkloadKey]:
    """Namespace, name and key of workload ``n``: spread evenly over the 100 leaves."""
    namespace = f"ns-{n % DEPARTMENTS}-{(n // DEPARTMENTS) % LEAVES}"
    name = f"job-{n}"
    return namespace, name, WorkloadKey(f"{namespace}/{name}")


class LogPlan:
    """A deterministic, time-ordered log of ``events`` events (see the module docstring)."""

    def __init__(self, events: int, seed: int = 5) -> None:
        # events = pending + 2 running + 5 completed (observed, admitted, finished, released,
        # deleted): 5% of the events are waiting workloads, 5% running ones, 90% history.
        pending = events // 20
        running = events // 40
        completed = (events - 1 - pending - 2 * running) // 5
        self.pending = pending + (events - 1 - pending - 2 * running - 5 * completed)
        self.running, self.completed = running, completed
        self.events = 1 + self.pending + 2 * running + 5 * completed
        kinds = ["p"] * self.pending + ["r"] * running + ["c"] * completed
        rng = random.Random(seed)
        rng.shuffle(kinds)
        self.kinds = kinds
        self.shapes = [rng.randrange(len(SHAPES)) for _ in kinds]
        self.base = datetime(2026, 11, 21, tzinfo=UTC)

    def entries(self) -> Iterator[tuple[str, Envelope]]:
        """``(subject, envelope)`` in log order."""
        subjects = Subjects("bench")
        yield subjects.quota, self._envelope("tree", 0, QuotaTreeApplied(root=_tree()))
        count = len(self.kinds)
        tick = 0
        for step in range(count + DELETE_LAG):
            if step < count:
                tick += 1
                yield self._observed(subjects, step, tick)
            admit = step - ADMIT_LAG
            if 0 <= admit < count and self.kinds[admit] != "p":
                tick += 1
                yield self._decision(subjects, admit, tick, "admitted")
            finish = step - FINISH_LAG
            if 0 <= finish < count and self.kinds[finish] == "c":
                tick += 1
                namespace, name, key = _names(finish)
                subject = subjects.job(ZONE, namespace, name)
                yield subject, self._envelope("finished", tick, WorkloadFinished(workload=key))
                tick += 1
                yield self._decision(subjects, finish, tick, "released")
            delete = step - DELETE_LAG
            if 0 <= delete < count and self.kinds[delete] == "c":
                tick += 1
                namespace, name, key = _names(delete)
                subject = subjects.job(ZONE, namespace, name)
                yield subject, self._envelope("deleted", tick, WorkloadDeleted(workload=key))

    def _requests(self, n: int) -> dict[str, int]:
        cpu, memory = SHAPES[self.shapes[n]]
        return {"cpu": cpu, "memory": memory}

    def _observed(self, subjects: Subjects, n: int, tick: int) -> tuple[str, Envelope]:
        namespace, name, key = _names(n)
        event = WorkloadObserved(
            workload=key,
            namespace=namespace,
            name=name,
            kind="batch/v1/Job",
            uid=f"uid-{n}",
            zone=ZONE,
            priority=n % 3,
            created_ms=Millis(n),
            pod_sets=[PodSet(name="main", count=1, requests=self._requests(n))],
            resource_version=str(n),
        )
        return subjects.job(ZONE, namespace, name), self._envelope("observed", tick, event)

    def _decision(self, subjects: Subjects, n: int, tick: int, action: str) -> tuple[str, Envelope]:
        namespace, name, key = _names(n)
        leaf = namespace.removeprefix("ns-").split("-")
        quota = QuotaPath(f"root/dept-{leaf[0]}/leaf-{leaf[0]}-{leaf[1]}")
        event: Admitted | Released
        if action == "admitted":
            event = Admitted(
                workload=key,
                queue=QueueName(queue_name(quota, namespace)),
                quota=quota,
                zone=ZONE,
                requests=self._requests(n),
                priority=n % 3,
            )
        else:
            event = Released(
                workload=key, quota=quota, requests=self._requests(n), cause="Finished"
            )
        subject = subjects.decision(ZONE, action, namespace, name)
        return subject, self._envelope(action, tick, event, source="usher/ledger")

    def _envelope(
        self, kind: str, tick: int, event: LogEvent, source: str = "usher/watcher"
    ) -> Envelope:
        key = getattr(event, "workload", "tree")
        return Envelope(
            id=EventId(f"bench:{kind}:{key}"),
            time=self.base + timedelta(milliseconds=tick),
            source=source,
            event=event,
        )


# ---------------------------------------------------------------------- writing the log


async def write_log(js: JetStreamContext, plan: LogPlan) -> float:
    """Publish the whole plan with the client's async publish; msg/s."""
    began = time.perf_counter()
    futures: list[asyncio.Future[PubAck]] = []
    for subject, envelope in plan.entries():
        futures.append(
            await js.publish_async(
                subject,
                encode(envelope),
                headers=cloudevent_headers(envelope, installation_of(subject)),
            )
        )
        if len(futures) >= PUBLISH_WINDOW:
            await asyncio.gather(*futures)
            futures = []
    await asyncio.gather(*futures)
    return plan.events / (time.perf_counter() - began)


# ---------------------------------------------------------------------- reading it back


async def raw_read(js: JetStreamContext, subjects: Subjects, last_seq: int) -> float:
    """(a) Ordered consumer over the whole stream, decoding every envelope; msg/s."""
    done = asyncio.Event()
    decoded = 0

    async def on_message(msg: Msg) -> None:
        nonlocal decoded
        decode_envelope(msg.data)
        decoded += 1
        if msg.metadata.sequence.stream >= last_seq:
            done.set()

    began = time.perf_counter()
    sub = await js.subscribe(
        f"{subjects.prefix}.>",
        stream=subjects.stream_name,
        cb=on_message,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
        pending_msgs_limit=-1,
        pending_bytes_limit=-1,
    )
    await done.wait()
    elapsed = time.perf_counter() - began
    await sub.unsubscribe()
    return decoded / elapsed


async def full_replay(js: JetStreamContext, subjects: Subjects) -> tuple[Engine, int, float]:
    """(b) What a dequeuer does on start without a snapshot: replay the log into an engine."""
    stop = asyncio.Event()
    began = time.perf_counter()
    projection = Projection(Engine(DEQUEUER_CONFIG))
    follower = LogFollower(js, subjects, start_seq=1, pause_collector=True)  # as services do
    await follower.start()
    async for batch in follower.batches(stop):
        for entry in batch:
            if isinstance(entry, LogEntry):
                projection.apply(entry)
        if follower.caught_up:
            break
    elapsed = time.perf_counter() - began
    await follower.stop()
    return projection.engine, follower.last_seq, elapsed


async def measure_log(nats_url: str, subjects: Subjects, plan: LogPlan) -> dict[str, float]:
    """Write the log, read it raw, replay it, and store the dequeuer's snapshot of it."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, subjects)
        publish_rate = await write_log(js, plan)
        last_seq = int((await js.stream_info(subjects.stream_name)).state.last_seq)
        read_rate = await raw_read(js, subjects, last_seq)
        engine, replayed_seq, replay_s = await full_replay(js, subjects)
        replay_rate = replayed_seq / replay_s

        started = time.perf_counter()
        data = snapshot(engine)
        encode_s = time.perf_counter() - started
        started = time.perf_counter()
        restore(data, DEQUEUER_CONFIG)
        restore_s = time.perf_counter() - started
        store = SnapshotStore(js, subjects)
        started = time.perf_counter()
        await store.save(
            "dequeuer-default",
            replayed_seq,
            data,
            labels(DEQUEUER_CONFIG, await log_identity(js, subjects)),
        )
        save_s = time.perf_counter() - started
        started = time.perf_counter()
        loaded = await store.load("dequeuer-default")
        load_s = time.perf_counter() - started
        assert loaded is not None and loaded.data == data
    finally:
        await nc.drain()
    return {
        "log_events": float(last_seq),
        "log_workloads_pending": float(plan.pending),
        "log_workloads_running": float(plan.running),
        "publish_per_s": publish_rate,
        "raw_read_per_s": read_rate,
        "replay_per_s": replay_rate,
        "replay_vs_raw_read": replay_rate / read_rate,
        "replay_s": replay_s,
        "log_snapshot_bytes": float(len(data)),
        "log_snapshot_encode_s": encode_s,
        "log_snapshot_restore_s": restore_s,
        "log_snapshot_save_s": save_s,
        "log_snapshot_load_s": load_s,
    }


# ---------------------------------------------------------------------- restarting a dequeuer


def restart_time(
    home: Path, env: dict[str, str], label: str, *, restored: bool, timeout_s: float = 600
) -> float:
    """Seconds from starting a dequeuer process until it logs that its replay is done.

    ``restored`` says whether it must have started from the snapshot (checked in its log).
    """
    log_path = home / "logs" / f"dequeuer-{label}.log"
    process = ManagedProcess(
        f"dequeuer-{label}",
        [sys.executable, "-m", "usher", "run", "dequeuer", "--zone", ZONE],
        log_path,
        env=env,
    )
    began = time.perf_counter()
    process.start()
    try:
        while time.perf_counter() - began < timeout_s:
            with contextlib.suppress(FileNotFoundError):
                text = log_path.read_text(errors="replace")
                if READY_LINE in text:
                    elapsed = time.perf_counter() - began
                    if (RESTORED_LINE in text) != restored:
                        raise RuntimeError(
                            f"snapshot restored: {not restored}, expected {restored}"
                        )
                    return elapsed
            if not process.running():
                raise RuntimeError(f"dequeuer exited:\n{process.log_tail(20)}")
            time.sleep(0.01)
        raise TimeoutError(f"no {READY_LINE!r} after {timeout_s}s:\n{process.log_tail(20)}")
    finally:
        process.stop(timeout=10)


async def _drop_snapshot(nats_url: str, subjects: Subjects) -> None:
    nc = await nats.connect(nats_url)
    try:
        await SnapshotStore(nc.jetstream(), subjects).delete("dequeuer-default")
    finally:
        await nc.drain()


def measure_restarts(nats_url: str, subjects: Subjects, home: Path) -> dict[str, float]:
    env = {
        **os.environ,
        "USHER_NATS_URL": nats_url,
        "USHER_PREFIX": subjects.prefix,
        "USHER_HOME": str(home / "home"),  # never a developer's own stack.json
        "USHER_SNAPSHOTS": "on",
    }
    with_snapshot = restart_time(home, env, "with-snapshot", restored=True)
    asyncio.run(_drop_snapshot(nats_url, subjects))
    without = restart_time(home, env, "without-snapshot", restored=False)
    return {
        "restart_with_snapshot_s": with_snapshot,
        "restart_without_snapshot_s": without,
        "restart_speedup": without / with_snapshot,
    }


# ---------------------------------------------------------------------- 100k pending


def pending_snapshot(count: int = 100_000, seed: int = 7) -> dict[str, float]:
    """(d) Snapshot of an engine holding ``count`` pending workloads over 100 leaves."""
    engine = Engine(DEQUEUER_CONFIG)
    engine.apply(QuotaTreeApplied(root=_tree()), Millis(0))
    rng = random.Random(seed)
    for n in range(count):
        namespace, name, key = _names(n)
        cpu, memory = SHAPES[rng.randrange(len(SHAPES))]
        event = WorkloadObserved(
            workload=key,
            namespace=namespace,
            name=name,
            kind="batch/v1/Job",
            zone=ZONE,
            priority=rng.choice((0, 0, 0, 1, 5)),
            created_ms=Millis(n),
            pod_sets=[PodSet(name="main", count=1, requests={"cpu": cpu, "memory": memory})],
        )
        engine.apply(event, Millis(n))
    encodes, restores = [], []
    data = b""
    for _ in range(3):
        started = time.perf_counter()
        data = snapshot(engine)
        encodes.append(time.perf_counter() - started)
        started = time.perf_counter()
        restore(data, DEQUEUER_CONFIG)
        restores.append(time.perf_counter() - started)
    return {
        "pending_snapshot_workloads": float(count),
        "pending_snapshot_bytes": float(len(data)),
        "pending_snapshot_encode_s": min(encodes),
        "pending_snapshot_restore_s": min(restores),
    }


def run(quick: bool) -> dict[str, float]:
    """Start a fresh NATS in a temporary folder, measure, stop it; the numbers."""
    plan = LogPlan(100_000 if quick else 1_000_000)
    subjects = Subjects("bench")
    with tempfile.TemporaryDirectory(prefix="usher-bench-replay-") as folder:
        home = Path(folder)
        server = NatsServer(home)
        try:
            nats_url = server.start()
            numbers = asyncio.run(measure_log(nats_url, subjects, plan))
            numbers.update(measure_restarts(nats_url, subjects, home))
        finally:
            server.stop()
    numbers.update(pending_snapshot())
    return numbers
